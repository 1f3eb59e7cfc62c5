"""Tokenizer: a tokenizer the engine uses — the model folder's tokenizer.json and chat
template, or a LoRA adapter's own — with the Hugging Face method names vLLM's
get_tokenizer() users call."""

import json
from typing import Any, Dict, List, Optional, Sequence, Union


class Tokenizer:
    """encode / decode / apply_chat_template, computed by the C++ tokenizer the engine uses
    for the same requests, so ids and text are exactly those of the requests.

    `native` is the engine's tokenizer handle, or None when the model has no tokenizer.json
    (every method then raises ValueError with `missing`)."""

    def __init__(self, native: Any, missing: str = "the model has no tokenizer") -> None:
        self._native = native
        self._missing = missing
        self.identity = None if native is None else native.identity  # the same for the same tokenizer
        self._token_text: Dict[int, str] = {}

    def _tok(self) -> Any:
        if self._native is None:
            raise ValueError(self._missing)
        return self._native

    @property
    def vocab_size(self) -> int:
        """Token ids it knows, added tokens included."""
        return self._tok().vocab_size

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a str, got {type(text).__name__}")
        return self._tok().encode(text, add_special_tokens)

    def decode(self, token_ids: List[int], skip_special_tokens: bool = False) -> str:
        return self._tok().decode(list(token_ids), skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """One token decoded alone (logprob entries), cached: the vocabulary never changes."""
        text = self._token_text.get(token_id)
        if text is None:
            text = self.decode([token_id])
            self._token_text[token_id] = text
        return text

    def apply_chat_template(self, conversation: List[Dict[str, Any]], *, tokenize: bool = True,
                            add_generation_prompt: bool = False, continue_final_message: bool = False,
                            chat_template: Optional[str] = None,
                            tools: Optional[List[Dict[str, Any]]] = None,
                            documents: Optional[List[Dict[str, Any]]] = None,
                            **kwargs: Any) -> Union[str, List[int]]:
        """The rendered conversation (tokenize=False) or its ids, as transformers returns
        them: the template writes the special tokens, so none are added again. tools,
        documents and any other keyword reach the template as variables, as in transformers;
        a message's content may be OpenAI's list of text parts, joined by newlines as the
        server joins them. continue_final_message ends the text inside the final message, so
        that generation continues it (transformers' rule for finding it)."""
        if not isinstance(conversation, (list, tuple)) or not all(isinstance(m, dict) for m in conversation):
            raise TypeError("apply_chat_template: conversation must be a list of dicts")
        if continue_final_message and add_generation_prompt:
            raise ValueError("apply_chat_template: continue_final_message and add_generation_prompt are not "
                             "compatible (continue the final message, or prompt a new one)")
        variables = dict(kwargs)
        if tools is not None:
            variables["tools"] = tools
        if documents is not None:
            variables["documents"] = documents
        text = self._render(conversation, add_generation_prompt, continue_final_message, chat_template, variables,
                            tool_arguments_as_objects=False)
        return self._tok().encode(text, False) if tokenize else text

    def _render(self, conversation: Sequence[Dict[str, Any]], add_generation_prompt: bool,
                continue_final_message: bool, chat_template: Optional[str], variables: Dict[str, Any],
                tool_arguments_as_objects: bool) -> str:
        """The template's text. tool_arguments_as_objects: an assistant's tool call arguments,
        sent as JSON strings, reach the template as objects (vLLM's chat, not transformers')."""
        return self._tok().apply_chat_template(json.dumps(list(conversation)), add_generation_prompt,
                                               chat_template or "", json.dumps(variables), continue_final_message,
                                               tool_arguments_as_objects)
