"""OutputBuilder: turns the native engine's RequestOutput into vLLM's classes, decoding
each logprob entry's token text with the request's tokenizer (its adapter's own or the
model's)."""

from dataclasses import dataclass
from typing import Any, Dict, Optional

from ..logprobs import Logprob
from ..lora.request import LoRARequest
from ..outputs import CompletionOutput, RequestOutput
from ..sampling_params import RequestOutputKind, SamplingParams
from ..tokenizer import Tokenizer


@dataclass
class RequestInfo:
    """What the Python side remembers about a request until it finishes."""

    params: SamplingParams
    lora_request: Optional[LoRARequest]
    prompt: Optional[str]  # the text the caller gave (also for chat prompts sent as ids)
    tokenizer: Tokenizer  # what its text went through


class OutputBuilder:
    @staticmethod
    def logprob_dict(entry: Any, tokenizer: Tokenizer) -> Dict[int, Logprob]:
        """The chosen (or actual) token first, then the top-K by rank, as vLLM orders them."""
        d = {entry.token: Logprob(entry.logprob, entry.rank, tokenizer.token_text(entry.token))}
        for rank, (token, logprob) in enumerate(entry.top, start=1):
            if token not in d:
                d[token] = Logprob(logprob, rank, tokenizer.token_text(token))
        return d

    def build(self, raw: Any, info: RequestInfo, whole: bool = False) -> RequestOutput:
        """The request's output as its params.output_kind asks (whole: cumulative anyway)."""
        params = info.params
        delta = params.output_kind == RequestOutputKind.DELTA and not whole
        completions = []
        for c in raw.outputs:
            token_ids = c.token_ids
            entries = c.logprobs
            if delta:  # this step's part; the cumulative logprob still counts them all
                new = c.num_new_tokens
                token_ids = token_ids[len(token_ids) - new:]
                entries = entries[len(entries) - min(new, len(entries)):]
            logprobs = None
            cumulative = None
            if params.logprobs is not None:
                logprobs = [self.logprob_dict(e, info.tokenizer) for e in entries]
                cumulative = sum(e.logprob for e in c.logprobs)
            text = c.delta_text if delta else c.text
            completions.append(CompletionOutput(
                index=c.index,
                text=text if params.detokenize else "",
                token_ids=token_ids,
                cumulative_logprob=cumulative,
                logprobs=logprobs,
                finish_reason=c.finish_reason or None,
                stop_reason=_stop_reason(c.stop_reason, params),
                lora_request=info.lora_request,
            ))
        prompt_logprobs = None
        if params.prompt_logprobs is not None:
            prompt_logprobs = [None if e is None else self.logprob_dict(e, info.tokenizer) for e in raw.prompt_logprobs]
        return RequestOutput(
            request_id=raw.request_id,
            prompt=info.prompt,
            prompt_token_ids=raw.prompt_token_ids,
            prompt_logprobs=prompt_logprobs,
            outputs=completions,
            finished=raw.finished,
            lora_request=info.lora_request,
            num_cached_tokens=raw.num_cached_tokens,
        )


def _stop_reason(reason: Optional[str], params: SamplingParams) -> Any:
    # The engine reports a stop string as itself and a stop token id as its decimal text;
    # vLLM's stop_reason is the str or the int. Stop strings are matched first.
    if reason is None or reason in params.stop:
        return reason
    return int(reason)
