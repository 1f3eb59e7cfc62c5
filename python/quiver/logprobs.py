"""Logprob: one entry of a logprobs dict (token id -> Logprob), as vLLM reports them."""

from dataclasses import dataclass
from typing import Dict, List, Optional


@dataclass
class Logprob:
    """The log-probability of a token under the model's raw distribution.

    rank is 1 for the most likely token; decoded_token is the token's text."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# One dict per position, as vLLM's SampleLogprobs / PromptLogprobs.
SampleLogprobs = List[Dict[int, Logprob]]
PromptLogprobs = List[Optional[Dict[int, Logprob]]]
