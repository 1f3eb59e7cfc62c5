"""Tokenizer: the engine's tokenizer (the model folder's tokenizer.json and chat template)
with the Hugging Face method names vLLM's get_tokenizer() users call."""

import json
from typing import Any, Dict, List, Optional, Union


class Tokenizer:
    """encode / decode / apply_chat_template, computed by the C++ tokenizer the engine uses,
    so ids and text are exactly those of the requests."""

    def __init__(self, native_engine: Any) -> None:
        self._native = native_engine

    @property
    def vocab_size(self) -> int:
        return self._native.vocab_size

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a str, got {type(text).__name__}")
        return self._native.encode(text, add_special_tokens)

    def decode(self, token_ids: List[int], skip_special_tokens: bool = False) -> str:
        return self._native.decode(list(token_ids), skip_special_tokens)

    def apply_chat_template(self, conversation: List[Dict[str, Any]], *, tokenize: bool = True,
                            add_generation_prompt: bool = False,
                            chat_template: Optional[str] = None) -> Union[str, List[int]]:
        """The rendered conversation (tokenize=False) or its ids, as transformers returns
        them: the template writes the special tokens, so none are added again."""
        if not isinstance(conversation, (list, tuple)) or not all(isinstance(m, dict) for m in conversation):
            raise TypeError("apply_chat_template: conversation must be a list of dicts")
        text = self._native.apply_chat_template(json.dumps(list(conversation)), add_generation_prompt,
                                                chat_template or "")
        return self._native.encode(text, False) if tokenize else text
