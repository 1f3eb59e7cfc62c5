"""Beam search results, as vllm.beam_search's: LLM.beam_search returns a BeamSearchOutput per
prompt. The search runs in the engine (LLMEngine::add_beam_search): each step scores every
live beam's 2 * beam_width likeliest next tokens as one-token requests batched with all
others, and keeps each prompt's best beam_width by score."""

import dataclasses
from typing import Dict, List, Optional, Set, Union

from .logprobs import Logprob
from .lora.request import LoRARequest


@dataclasses.dataclass
class BeamSearchSequence:
    """One beam: tokens (the prompt's, then the generated), one logprobs dict per generated
    token (it and its step's candidates), and cum_logprob, the generated tokens' sum. text
    is the decode of all its tokens, special tokens kept, as vLLM's LLM.beam_search gives it;
    finish_reason is "stop" for a beam that ended at EOS, "length" for one that reached
    max_tokens."""

    tokens: List[int]
    logprobs: List[Dict[int, Logprob]]
    lora_request: Optional[LoRARequest] = None
    cum_logprob: float = 0.0
    text: Optional[str] = None
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None


@dataclasses.dataclass
class BeamSearchOutput:
    """A prompt's best beams, best first."""

    sequences: List[BeamSearchSequence]


def get_beam_search_score(tokens: List[int], cumulative_logprob: float, eos_token_id: Union[int, Set[int]],
                          length_penalty: float = 1.0) -> float:
    """vLLM's score, the engine's too: the cumulative logprob over the length (prompt
    included, a final EOS not) to the power length_penalty."""
    eos = eos_token_id if isinstance(eos_token_id, set) else {eos_token_id}
    length = len(tokens) - (1 if tokens and tokens[-1] in eos else 0)
    return cumulative_logprob / (length ** length_penalty)
