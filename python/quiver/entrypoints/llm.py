"""LLM: vLLM's offline batch API. generate() and chat() submit every prompt before the
first step, so prompts for different adapters run in the same batches, and return one
RequestOutput per prompt in input order."""

import itertools
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from .._checks import check_int
from ..beam_search import BeamSearchOutput, BeamSearchSequence
from ..engine.arg_utils import EngineArgs
from ..engine.llm_engine import LLMEngine, PromptType, _split_prompt
from ..lora.request import LoRARequest
from ..outputs import RequestOutput
from ..sampling_params import BeamSearchParams, SamplingParams
from ..tokenizer import Tokenizer
from .progress import ProgressBar

Conversation = List[Dict[str, Any]]


class LLM:
    """LLM(model, **engine_args): an engine for offline batches.

    Keyword arguments are EngineArgs fields (vLLM's names); any other keyword is a
    TypeError naming it."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        args = EngineArgs(model=model, **kwargs)
        # Read before the engine starts, so a bad generation_config.json fails fast.
        self._default_sampling = args.default_sampling_fields()
        self.get_default_sampling_params()  # a bad override_generation_config value fails here
        self.llm_engine = LLMEngine.from_engine_args(args)
        self._ids = itertools.count()

    def get_default_sampling_params(self) -> SamplingParams:
        """The SamplingParams generate() and chat() use when given none: the model's
        generation_config.json fields (EngineArgs.generation_config, "auto" by default, and
        override_generation_config), else SamplingParams()'s defaults, as in vLLM."""
        return SamplingParams(**self._default_sampling)

    def reset_prefix_cache(self, device: Any = None) -> bool:
        """vLLM's: the prefix cache forgets every block (LLMEngine.reset_prefix_cache)."""
        return self.llm_engine.reset_prefix_cache(device)

    def get_tokenizer(self, lora_request: Optional[LoRARequest] = None) -> Tokenizer:
        """The tokenizer of requests with lora_request (the model's without one): encode,
        decode, apply_chat_template (LLMEngine.get_tokenizer)."""
        return self.llm_engine.get_tokenizer(lora_request)

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
                 *, use_tqdm: Union[bool, Callable[..., Any]] = True,
                 lora_request: Optional[Union[LoRARequest, Sequence[Optional[LoRARequest]]]] = None,
                 priority: Optional[List[int]] = None) -> List[RequestOutput]:
        """Runs every prompt to completion. sampling_params and lora_request are one for
        all prompts or a list with one per prompt; priority, one int per prompt, orders them
        under EngineArgs(scheduling_policy="priority"). A prompt that cannot be added raises
        ValueError (after the prompts already added are aborted)."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        items = []
        for p in prompts:
            text, ids, salt = _split_prompt(p)
            items.append((text, ids, text, salt))
        if priority is not None:
            if not isinstance(priority, (list, tuple)) or len(priority) != len(items):
                raise ValueError(f"generate: priority must be a list with one int per prompt ({len(items)})")
        return self._run(items, sampling_params, lora_request, use_tqdm, priority)

    def chat(self, messages: Union[Conversation, Sequence[Conversation]],
             sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
             use_tqdm: Union[bool, Callable[..., Any]] = True,
             lora_request: Optional[Union[LoRARequest, Sequence[Optional[LoRARequest]]]] = None,
             chat_template: Optional[str] = None, add_generation_prompt: bool = True,
             continue_final_message: bool = False, tools: Optional[List[Dict[str, Any]]] = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None) -> List[RequestOutput]:
        """generate() for conversations ([{"role": ..., "content": ...}, ...], or a list of
        them), rendered with the chat template of each one's tokenizer (its adapter's own or
        the model's; chat_template replaces it) and tokenized without adding special tokens
        again, as vLLM does. tools and chat_template_kwargs (enable_thinking, ...) reach the
        template as its variables. continue_final_message=True (with add_generation_prompt=
        False) has the model continue the final message, e.g. a partial assistant answer."""
        if not isinstance(messages, (list, tuple)) or not messages:
            raise TypeError("chat: messages must be a conversation (a list of dicts) or a list of them")
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
            raise TypeError(f"chat: chat_template_kwargs must be a dict, got {type(chat_template_kwargs).__name__}")
        variables = dict(chat_template_kwargs or {})
        if tools is not None:
            variables["tools"] = tools
        conversations = [messages] if isinstance(messages[0], dict) else list(messages)
        loras = _per_prompt("lora_request", lora_request, len(conversations), LoRARequest)
        items = []
        for conv, lora in zip(conversations, loras):
            tokenizer = self.get_tokenizer(lora)
            if continue_final_message and add_generation_prompt:
                raise ValueError("chat: continue_final_message and add_generation_prompt are not compatible "
                                 "(continue the final message, or prompt a new one)")
            if not all(isinstance(m, dict) for m in conv):
                raise TypeError("chat: a conversation must be a list of dicts")
            # As the server renders a chat: tool call arguments as objects (vLLM's rule).
            text = tokenizer._render(conv, add_generation_prompt, continue_final_message, chat_template, variables,
                                     tool_arguments_as_objects=True)
            items.append((None, tokenizer.encode(text, add_special_tokens=False), text, None))
        return self._run(items, sampling_params, loras, use_tqdm)

    def beam_search(self, prompts: Union[PromptType, Sequence[PromptType]], params: BeamSearchParams,
                    lora_request: Optional[Union[LoRARequest, Sequence[Optional[LoRARequest]]]] = None,
                    use_tqdm: bool = False, concurrency_limit: Optional[int] = None) -> List[BeamSearchOutput]:
        """vLLM's beam search: for each prompt (text, or a dict with "prompt" or
        "prompt_token_ids", and "cache_salt"), its params.beam_width best continuations of up
        to params.max_tokens tokens, best first (quiver.beam_search). The engine runs every
        prompt's search at once, each on its adapter, batched step by step with everything
        else; a beam ends at any of the model's EOS ids unless ignore_eos. concurrency_limit
        searches that many prompts at a time."""
        if not isinstance(params, BeamSearchParams):
            raise TypeError(f"beam_search: params must be a BeamSearchParams, got {type(params).__name__}")
        check_int("beam_search", "concurrency_limit", concurrency_limit, optional=True, minimum=1)
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        loras = _per_prompt("lora_request", lora_request, len(prompts), LoRARequest)
        items = [_split_prompt(p) for p in prompts]
        limit = concurrency_limit or max(1, len(items))
        engine = self.llm_engine
        results: List[Optional[BeamSearchOutput]] = [None] * len(items)
        bar = _progress_bar(use_tqdm, len(items))
        index: Dict[str, int] = {}
        try:
            for first in range(0, len(items), limit):
                for i in range(first, min(first + limit, len(items))):
                    rid = str(next(self._ids))
                    text, ids, salt = items[i]
                    engine._add_beam_search(rid, text, ids, params, loras[i], salt)
                    index[rid] = i
                while engine.has_unfinished_requests():
                    for out in engine._step_finished():
                        tokenizer = self.get_tokenizer(out.lora_request)
                        results[index.pop(out.request_id)] = BeamSearchOutput(sequences=[BeamSearchSequence(
                            tokens=out.prompt_token_ids + c.token_ids, logprobs=c.logprobs or [],
                            lora_request=out.lora_request, cum_logprob=c.cumulative_logprob or 0.0,
                            text=tokenizer.decode(out.prompt_token_ids + c.token_ids) if tokenizer.identity else None,
                            finish_reason=c.finish_reason) for c in out.outputs])
                        if bar is not None:
                            bar.update(1)
        except BaseException:
            self._abort_and_drain(list(index))
            raise
        finally:
            if bar is not None:
                bar.close()
        return results  # type: ignore[return-value]

    def _run(self, items: List[Any], sampling_params: Any, lora_request: Any, use_tqdm: Any,
             priority: Optional[Sequence[int]] = None) -> List[RequestOutput]:
        n = len(items)
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        params = _per_prompt("sampling_params", sampling_params, n, SamplingParams)
        loras = _per_prompt("lora_request", lora_request, n, LoRARequest)
        engine = self.llm_engine
        index: Dict[str, int] = {}
        results: List[Optional[RequestOutput]] = [None] * n
        bar = None
        try:
            for i, (text, ids, prompt_text, salt) in enumerate(items):
                rid = str(next(self._ids))
                engine._add(rid, text, ids, params[i], loras[i], prompt_text, 0 if priority is None else priority[i],
                            salt)
                index[rid] = i
            bar = _progress_bar(use_tqdm, n)
            start = time.monotonic()
            in_toks = out_toks = 0
            while engine.has_unfinished_requests():
                for out in engine._step_finished():
                    results[index.pop(out.request_id)] = out
                    if bar is not None:
                        in_toks += len(out.prompt_token_ids)
                        out_toks += sum(len(c.token_ids) for c in out.outputs)
                        elapsed = max(time.monotonic() - start, 1e-9)
                        bar.set_postfix_str(f"est. speed input: {in_toks / elapsed:.2f} toks/s, "
                                            f"output: {out_toks / elapsed:.2f} toks/s")
                        bar.update(1)
        except BaseException:
            # Ctrl-C or a prompt that could not be added: the engine stays usable.
            self._abort_and_drain(list(index))
            raise
        finally:
            if bar is not None:
                bar.close()
        return results  # type: ignore[return-value]

    def _abort_and_drain(self, request_ids: List[str]) -> None:
        engine = self.llm_engine
        engine.abort_request(request_ids)
        while engine.has_unfinished_requests():
            engine._step_finished()


def _per_prompt(name: str, value: Any, n: int, kind: type) -> List[Any]:
    if value is None or isinstance(value, kind):
        return [value] * n
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a {kind.__name__}, a list of them, or None; got {type(value).__name__}")
    if len(value) != n:
        raise ValueError(f"{name} has {len(value)} entries for {n} prompts")
    for v in value:
        if v is not None and not isinstance(v, kind):
            raise TypeError(f"{name} entries must be {kind.__name__} or None, got {type(v).__name__}")
    return list(value)


def _progress_bar(use_tqdm: Any, total: int) -> Any:
    if use_tqdm is False or use_tqdm is None:
        return None
    factory = use_tqdm if callable(use_tqdm) else ProgressBar
    return factory(total=total, desc="Processed prompts")
