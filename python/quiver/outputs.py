"""RequestOutput and CompletionOutput: what LLMEngine.step() and LLM.generate() return,
with vLLM's fields and reprs."""

from typing import List, Optional, Union

from .logprobs import PromptLogprobs, SampleLogprobs
from .lora.request import LoRARequest


class CompletionOutput:
    """One completion of a request (a request with n > 1 has n of them).

    text and token_ids are cumulative; logprobs has one dict per generated token when the
    request asked for them (None otherwise), and cumulative_logprob is their sum.
    finish_reason is None while running, then "stop", "length" or "abort"; stop_reason is
    the stop string (str) or stop token id (int) that ended it, None for EOS or length."""

    __slots__ = ("index", "text", "token_ids", "cumulative_logprob", "logprobs", "finish_reason",
                 "stop_reason", "lora_request")

    def __init__(self, index: int, text: str, token_ids: List[int], cumulative_logprob: Optional[float],
                 logprobs: Optional[SampleLogprobs], finish_reason: Optional[str] = None,
                 stop_reason: Union[int, str, None] = None, lora_request: Optional[LoRARequest] = None) -> None:
        self.index = index
        self.text = text
        self.token_ids = token_ids
        self.cumulative_logprob = cumulative_logprob
        self.logprobs = logprobs
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
        self.lora_request = lora_request

    def finished(self) -> bool:
        return self.finish_reason is not None

    def __repr__(self) -> str:
        return (f"CompletionOutput(index={self.index}, text={self.text!r}, token_ids={self.token_ids}, "
                f"cumulative_logprob={self.cumulative_logprob}, logprobs={self.logprobs}, "
                f"finish_reason={self.finish_reason}, stop_reason={self.stop_reason})")


class RequestOutput:
    """A request's state as of the latest step: its prompt, its completions, and whether
    every completion has finished. prompt_logprobs (when asked for) has None for the
    first position and a dict for each later one."""

    __slots__ = ("request_id", "prompt", "prompt_token_ids", "prompt_logprobs", "outputs", "finished",
                 "lora_request", "metrics", "encoder_prompt", "encoder_prompt_token_ids", "num_cached_tokens")

    def __init__(self, request_id: str, prompt: Optional[str], prompt_token_ids: List[int],
                 prompt_logprobs: Optional[PromptLogprobs], outputs: List[CompletionOutput], finished: bool,
                 lora_request: Optional[LoRARequest] = None, num_cached_tokens: Optional[int] = None) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished
        self.lora_request = lora_request
        # Prompt tokens the prefix cache held when the request was first scheduled.
        self.num_cached_tokens = num_cached_tokens
        # vLLM's fields for encoder-decoder models and metrics; always None here.
        self.metrics = None
        self.encoder_prompt = None
        self.encoder_prompt_token_ids = None

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id}, prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids}, encoder_prompt={self.encoder_prompt!r}, "
                f"encoder_prompt_token_ids={self.encoder_prompt_token_ids}, "
                f"prompt_logprobs={self.prompt_logprobs}, outputs={self.outputs}, finished={self.finished}, "
                f"metrics={self.metrics}, lora_request={self.lora_request}, "
                f"num_cached_tokens={self.num_cached_tokens})")
