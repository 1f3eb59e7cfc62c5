"""Beam search over the engine, as vLLM's LLM.beam_search: every step asks the engine for one
token of each live beam with its 2 * beam_width likeliest continuations (the prefix cache
keeps a beam's earlier tokens), and keeps each prompt's best beam_width by score."""

import dataclasses
from typing import Any, Dict, List, Optional, Set, Union

from .logprobs import Logprob
from .lora.request import LoRARequest


@dataclasses.dataclass
class BeamSearchSequence:
    """One beam: tokens (the prompt's, then the generated), one logprobs dict per generated
    token (the step's candidates), and cum_logprob, their chosen tokens' sum. text is the
    decode of all its tokens, special tokens kept, as vLLM; finish_reason is "stop" for a
    beam that ended at EOS, "length" for one that reached max_tokens."""

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
    """vLLM's score: the cumulative logprob over the length (prompt included, a final EOS
    not) to the power length_penalty."""
    eos = eos_token_id if isinstance(eos_token_id, set) else {eos_token_id}
    length = len(tokens) - (1 if tokens and tokens[-1] in eos else 0)
    return cumulative_logprob / (length ** length_penalty)


class BeamSearchInstance:
    """One prompt's search: its live beams and those that ended at EOS."""

    def __init__(self, prompt_tokens: List[int], lora_request: Optional[LoRARequest], cache_salt: Optional[str],
                 tokenizer: Any) -> None:
        self.beams = [BeamSearchSequence(tokens=list(prompt_tokens), logprobs=[], lora_request=lora_request)]
        self.completed: List[BeamSearchSequence] = []
        self.cache_salt = cache_salt
        self.tokenizer = tokenizer

    def extend(self, beam: BeamSearchSequence, candidates: Dict[int, Logprob], eos: Set[int],
               ignore_eos: bool) -> List[BeamSearchSequence]:
        """The beam grown by each candidate; those ending at EOS go to completed."""
        grown = []
        for token, entry in candidates.items():
            new = BeamSearchSequence(tokens=beam.tokens + [token], logprobs=beam.logprobs + [candidates],
                                     lora_request=beam.lora_request, cum_logprob=beam.cum_logprob + entry.logprob)
            if token in eos and not ignore_eos:
                new.finish_reason, new.stop_reason = "stop", None
                self.completed.append(new)
            else:
                grown.append(new)
        return grown

    @staticmethod
    def best(beams: List[BeamSearchSequence], beam_width: int, eos: Set[int],
             length_penalty: float) -> List[BeamSearchSequence]:
        """The beam_width best by score, best first."""
        return sorted(beams, reverse=True,
                      key=lambda b: get_beam_search_score(b.tokens, b.cum_logprob, eos, length_penalty))[:beam_width]

    def output(self, beam_width: int, eos: Set[int], length_penalty: float) -> BeamSearchOutput:
        for beam in self.beams:
            beam.finish_reason = "length"
        best = self.best(self.completed + self.beams, beam_width, eos, length_penalty)
        for beam in best:  # a model without tokenizer.json has token ids only
            beam.text = self.tokenizer.decode(beam.tokens) if self.tokenizer.identity is not None else None
        return BeamSearchOutput(sequences=best)
