"""LoRARequest: which adapter a request runs with (vLLM's vllm.lora.request)."""

from typing import Any, Optional

from .._checks import check_int, check_str


class LoRARequest:
    """An adapter for a request: a name, a positive integer id and its PEFT folder.

    The adapter is read from lora_path the first time a request names it, then kept in
    the engine's host LRU (max_cpu_loras) and its device slots (max_loras); there is no
    registration step. Two requests are the same adapter when their names are equal."""

    __slots__ = ("lora_name", "lora_int_id", "lora_path", "base_model_name", "long_lora_max_len")

    def __init__(self, lora_name: str, lora_int_id: int, lora_path: str = "",
                 lora_local_path: Optional[str] = None, long_lora_max_len: Optional[int] = None,
                 base_model_name: Optional[str] = None) -> None:
        check_str("LoRARequest", "lora_name", lora_name)
        if not lora_name:
            raise ValueError("LoRARequest.lora_name must not be empty")
        check_int("LoRARequest", "lora_int_id", lora_int_id)
        if lora_int_id < 1:
            raise ValueError(f"LoRARequest.lora_int_id must be > 0, got {lora_int_id}")
        check_str("LoRARequest", "lora_path", lora_path)
        check_str("LoRARequest", "lora_local_path", lora_local_path, optional=True)
        check_int("LoRARequest", "long_lora_max_len", long_lora_max_len, optional=True)
        if long_lora_max_len is not None:
            raise ValueError("LoRARequest.long_lora_max_len is not supported by quiver")
        check_str("LoRARequest", "base_model_name", base_model_name, optional=True)
        self.lora_name = lora_name
        self.lora_int_id = lora_int_id
        # lora_local_path is vLLM's older spelling of lora_path.
        self.lora_path = lora_path or (lora_local_path or "")
        self.base_model_name = base_model_name
        self.long_lora_max_len = long_lora_max_len

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def path(self) -> str:
        return self.lora_path

    @property
    def local_path(self) -> str:
        return self.lora_path

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, LoRARequest) and self.lora_name == other.lora_name

    def __hash__(self) -> int:
        return hash(self.lora_name)

    def __repr__(self) -> str:
        return (f"LoRARequest(lora_name={self.lora_name!r}, lora_int_id={self.lora_int_id}, "
                f"lora_path={self.lora_path!r}, base_model_name={self.base_model_name!r})")
