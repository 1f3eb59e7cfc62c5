"""SamplingParams: vLLM's per-request decoding settings, names and defaults."""

import copy
import dataclasses
import enum
import json as _json
from typing import Any, Dict, List, Optional, Union

from . import _quiver
from ._checks import check_bool, check_float, check_int, check_int_list, unsupported

_GREEDY_EPS = 1e-5  # vLLM's threshold below which a temperature means greedy

_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


@dataclasses.dataclass
class StructuredOutputsParams:
    """What the output must match, as vllm.sampling_params.StructuredOutputsParams: one of
    json (a JSON schema, as a dict or its text), regex, choice (the output is exactly one of
    these strings) or json_object (any JSON object). grammar, structural_tag and
    whitespace_pattern are refused by SamplingParams, and so are the disable_* options other
    than their defaults, except disable_fallback (quiver has one backend, so it never falls
    back)."""

    json: Optional[Union[str, Dict[str, Any]]] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: Optional[str] = None
    structural_tag: Optional[str] = None

    def __post_init__(self) -> None:
        given = [k for k in _CONSTRAINTS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"{type(self).__name__}: give only one kind of constraint, got {', '.join(given)}")

    def _fields(self) -> Dict[str, Any]:
        """The request-body form the C++ parser reads (None fields left out)."""
        fields = dataclasses.fields(StructuredOutputsParams)
        return {f.name: getattr(self, f.name) for f in fields if getattr(self, f.name) is not None}


@dataclasses.dataclass
class GuidedDecodingParams(StructuredOutputsParams):
    """vLLM's name for StructuredOutputsParams before 0.12 (SamplingParams(guided_decoding=...)),
    with its backend field: None or "auto" only, quiver having one backend."""

    backend: Optional[str] = None
    backend_was_auto: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        unsupported("GuidedDecodingParams", "backend", self.backend if self.backend != "auto" else None, None)


def _structured(o: str, structured_outputs: Any, guided_decoding: Any) -> Optional[StructuredOutputsParams]:
    if structured_outputs is not None and guided_decoding is not None:
        raise ValueError(f"{o}: give structured_outputs or guided_decoding, not both")
    field = "structured_outputs" if structured_outputs is not None else "guided_decoding"
    value = structured_outputs if structured_outputs is not None else guided_decoding
    if value is None:
        return None
    if isinstance(value, dict):
        value = StructuredOutputsParams(**value)
    if not isinstance(value, StructuredOutputsParams):
        raise TypeError(f"{o}.{field} must be a StructuredOutputsParams, got {type(value).__name__}")
    if not any(getattr(value, k) is not None for k in _CONSTRAINTS):
        raise ValueError(f"{o}.{field}: set one of json, regex, choice, json_object")
    return value


def _structured_body(params: StructuredOutputsParams) -> str:
    try:
        return _json.dumps({"structured_outputs": params._fields()})
    except (TypeError, ValueError) as e:
        raise TypeError(f"SamplingParams.structured_outputs: {e}") from None


class RequestOutputKind(enum.IntEnum):
    """What LLMEngine.step() reports of a request, as vLLM's: CUMULATIVE (everything so far),
    DELTA (what this step added: text, token ids and logprobs; cumulative_logprob stays the
    running total) or FINAL_ONLY (nothing until it finishes). LLM.generate always returns
    whole outputs."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class SamplingParams:
    """How one request samples: the fields and defaults of vllm.SamplingParams.

    Ranges are checked when the object is built (ValueError naming the field); token ids
    are checked against the vocabulary when the request is added. Fields vLLM has and
    quiver does not implement are accepted only at their neutral value."""

    def __init__(
        self,
        *,
        n: int = 1,
        best_of: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: Optional[int] = None,
        stop: Optional[Union[str, List[str]]] = None,
        stop_token_ids: Optional[List[int]] = None,
        bad_words: Optional[List[str]] = None,
        ignore_eos: bool = False,
        max_tokens: Optional[int] = 16,
        min_tokens: int = 0,
        logprobs: Optional[int] = None,
        prompt_logprobs: Optional[int] = None,
        detokenize: bool = True,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        logits_processors: Optional[list] = None,
        include_stop_str_in_output: bool = False,
        truncate_prompt_tokens: Optional[int] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        allowed_token_ids: Optional[List[int]] = None,
        structured_outputs: Optional[StructuredOutputsParams] = None,
        guided_decoding: Optional[StructuredOutputsParams] = None,
        output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
    ) -> None:
        o = "SamplingParams"
        check_int(o, "n", n, minimum=1)
        check_int(o, "best_of", best_of, optional=True)
        if best_of is not None and best_of != n:
            raise ValueError(f"{o}.best_of={best_of} is not supported by quiver (only None or n)")
        self.n = n
        self.best_of = best_of
        self.presence_penalty = check_float(o, "presence_penalty", presence_penalty)
        self.frequency_penalty = check_float(o, "frequency_penalty", frequency_penalty)
        self.repetition_penalty = check_float(o, "repetition_penalty", repetition_penalty)
        self.temperature = check_float(o, "temperature", temperature)
        self.top_p = check_float(o, "top_p", top_p)
        check_int(o, "top_k", top_k)
        self.top_k = top_k
        self.min_p = check_float(o, "min_p", min_p)
        check_int(o, "seed", seed, optional=True)
        if seed is not None and not 0 <= seed < 2**64:
            raise ValueError(f"{o}.seed must be in [0, 2**64), got {seed}")
        self.seed = seed
        if isinstance(stop, str):
            stop = [stop]
        if stop is not None and (not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop)):
            raise TypeError(f"{o}.stop must be a str or a list of str, got {stop!r}")
        self.stop: List[str] = list(stop or [])
        self.stop_token_ids: List[int] = check_int_list(o, "stop_token_ids", stop_token_ids)
        if bad_words is not None and (not isinstance(bad_words, (list, tuple))
                                      or not all(isinstance(w, str) for w in bad_words)):
            raise TypeError(f"{o}.bad_words must be a list of str, got {bad_words!r}")
        self.bad_words: List[str] = list(bad_words or [])
        check_bool(o, "ignore_eos", ignore_eos)
        self.ignore_eos = ignore_eos
        check_int(o, "max_tokens", max_tokens, optional=True, minimum=1)
        self.max_tokens = max_tokens
        check_int(o, "min_tokens", min_tokens, minimum=0)
        self.min_tokens = min_tokens
        check_int(o, "logprobs", logprobs, optional=True, minimum=0)
        check_int(o, "prompt_logprobs", prompt_logprobs, optional=True, minimum=0)
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        check_bool(o, "detokenize", detokenize)
        self.detokenize = detokenize
        check_bool(o, "skip_special_tokens", skip_special_tokens)
        self.skip_special_tokens = skip_special_tokens
        check_bool(o, "spaces_between_special_tokens", spaces_between_special_tokens)
        self.spaces_between_special_tokens = spaces_between_special_tokens
        unsupported(o, "logits_processors", logits_processors or None, None)
        self.logits_processors = None
        check_bool(o, "include_stop_str_in_output", include_stop_str_in_output)
        self.include_stop_str_in_output = include_stop_str_in_output
        check_int(o, "truncate_prompt_tokens", truncate_prompt_tokens, optional=True)
        self.truncate_prompt_tokens = truncate_prompt_tokens
        self.logit_bias = _check_logit_bias(logit_bias)
        if allowed_token_ids is not None and not allowed_token_ids:
            raise ValueError(f"{o}.allowed_token_ids must not be empty (None allows every token)")
        self.allowed_token_ids: Optional[List[int]] = (
            None if allowed_token_ids is None else check_int_list(o, "allowed_token_ids", allowed_token_ids))
        if not isinstance(output_kind, RequestOutputKind):
            raise TypeError(f"{o}.output_kind must be a RequestOutputKind, got {output_kind!r}")
        self.output_kind = output_kind
        if self.stop and not self.detokenize:
            raise ValueError(f"{o}.stop strings need detokenize=True")
        # _to_native reads the constraint through the server's parser: its refusals name the field.
        self.structured_outputs = _structured(o, structured_outputs, guided_decoding)
        self._to_native(max_tokens=self.max_tokens or 1).validate()
        if self.temperature < _GREEDY_EPS:
            # Greedy: vLLM turns the truncation knobs off so they cannot change the argmax.
            self.temperature, self.top_p, self.top_k, self.min_p = 0.0, 1.0, 0, 0.0

    @property
    def sampling_type(self) -> str:
        if self.temperature == 0.0:
            return "greedy"
        return "random_seed" if self.seed is not None else "random"

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)

    def _to_native(self, max_tokens: int) -> Any:
        """The C++ engine's SamplingParams; max_tokens resolved by the caller when None."""
        p = _quiver.SamplingParams()
        p.n = self.n
        p.temperature = self.temperature
        p.top_p = self.top_p
        p.top_k = self.top_k
        p.min_p = self.min_p
        p.seed = self.seed
        p.presence_penalty = self.presence_penalty
        p.frequency_penalty = self.frequency_penalty
        p.repetition_penalty = self.repetition_penalty
        p.logit_bias = sorted(self.logit_bias.items()) if self.logit_bias else []
        p.max_tokens = max_tokens
        p.min_tokens = self.min_tokens
        p.stop = self.stop
        p.stop_token_ids = self.stop_token_ids
        p.include_stop_str_in_output = self.include_stop_str_in_output
        p.ignore_eos = self.ignore_eos
        p.logprobs = -1 if self.logprobs is None else self.logprobs
        p.prompt_logprobs = -1 if self.prompt_logprobs is None else self.prompt_logprobs
        p.skip_special_tokens = self.skip_special_tokens
        p.spaces_between_special_tokens = self.spaces_between_special_tokens
        p.allowed_token_ids = self.allowed_token_ids or []
        p.bad_words = self.bad_words
        p.truncate_prompt_tokens = self.truncate_prompt_tokens
        if self.structured_outputs is not None:
            p.structured_outputs = _quiver.structured_spec(_structured_body(self.structured_outputs))
        return p

    @property
    def guided_decoding(self) -> Optional[StructuredOutputsParams]:
        """vLLM's older name for structured_outputs."""
        return self.structured_outputs

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, SamplingParams) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return (
            f"SamplingParams(n={self.n}, presence_penalty={self.presence_penalty}, "
            f"frequency_penalty={self.frequency_penalty}, repetition_penalty={self.repetition_penalty}, "
            f"temperature={self.temperature}, top_p={self.top_p}, top_k={self.top_k}, min_p={self.min_p}, "
            f"seed={self.seed}, stop={self.stop}, stop_token_ids={self.stop_token_ids}, "
            f"bad_words={self.bad_words}, include_stop_str_in_output={self.include_stop_str_in_output}, "
            f"ignore_eos={self.ignore_eos}, max_tokens={self.max_tokens}, min_tokens={self.min_tokens}, "
            f"logprobs={self.logprobs}, prompt_logprobs={self.prompt_logprobs}, "
            f"skip_special_tokens={self.skip_special_tokens}, "
            f"spaces_between_special_tokens={self.spaces_between_special_tokens}, "
            f"truncate_prompt_tokens={self.truncate_prompt_tokens}, logit_bias={self.logit_bias}, "
            f"allowed_token_ids={self.allowed_token_ids}, "
            f"structured_outputs={self.structured_outputs})"
        )


def _check_logit_bias(logit_bias: Any) -> Optional[Dict[int, float]]:
    if logit_bias is None:
        return None
    if not isinstance(logit_bias, dict):
        raise TypeError(f"SamplingParams.logit_bias must be a dict of token id -> bias, got {type(logit_bias).__name__}")
    out = {}
    for k, v in logit_bias.items():
        # vLLM accepts the keys as ints or as their decimal strings (the OpenAI JSON form).
        try:
            key = int(k)
        except (TypeError, ValueError):
            raise TypeError(f"SamplingParams.logit_bias keys must be token ids, got {k!r}") from None
        out[key] = check_float("SamplingParams", "logit_bias", v)
    return out


@dataclasses.dataclass
class BeamSearchParams:
    """LLM.beam_search's settings, as vllm.sampling_params.BeamSearchParams: beam_width beams
    (each step keeps the best beam_width of their 2 * beam_width likeliest continuations, so
    at most half the engine's max_logprobs), up to max_tokens new tokens each; temperature
    applies to the step's sampling, the scores use the raw logprobs; length_penalty divides
    a beam's cumulative logprob by its length (prompt included, as vLLM) to that power."""

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False

    def __post_init__(self) -> None:
        o = "BeamSearchParams"
        check_int(o, "beam_width", self.beam_width, minimum=1)
        check_int(o, "max_tokens", self.max_tokens, minimum=1)
        check_bool(o, "ignore_eos", self.ignore_eos)
        self.temperature = check_float(o, "temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"{o}.temperature must be >= 0, got {self.temperature}")
        self.length_penalty = check_float(o, "length_penalty", self.length_penalty)
        check_bool(o, "include_stop_str_in_output", self.include_stop_str_in_output)
