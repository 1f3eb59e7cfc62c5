"""Argument checks shared by the public classes: a wrong type is a TypeError and a value
out of range a ValueError, both naming the class and the field."""

from typing import Any, Optional


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_int(owner: str, field: str, value: Any, *, optional: bool = False,
              minimum: Optional[int] = None) -> None:
    if value is None and optional:
        return
    # bool is an int subclass in Python, but True as a count is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{field} must be an int{' or None' if optional else ''}, "
                        f"got {_type_name(value)} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}.{field} must be at least {minimum}, got {value}")


def check_float(owner: str, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}.{field} must be a number, got {_type_name(value)} {value!r}")
    return float(value)


def check_bool(owner: str, field: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, bool):
        raise TypeError(f"{owner}.{field} must be True or False{' or None' if optional else ''}, "
                        f"got {_type_name(value)} {value!r}")


def check_str(owner: str, field: str, value: Any, *, optional: bool = False,
              choices: Optional[tuple] = None) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise TypeError(f"{owner}.{field} must be a str{' or None' if optional else ''}, "
                        f"got {_type_name(value)} {value!r}")
    if choices is not None and value not in choices:
        raise ValueError(f"{owner}.{field} must be one of {', '.join(choices)}; got {value!r}")


def check_int_list(owner: str, field: str, value: Any) -> list:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner}.{field} must be a list of ints, got {_type_name(value)}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{owner}.{field} must be a list of ints, found {_type_name(v)} {v!r}")
    return list(value)


def unsupported(owner: str, field: str, value: Any, allowed: Any) -> None:
    """Refuses a vLLM field quiver accepts only at its neutral value."""
    if value != allowed:
        raise ValueError(f"{owner}.{field}={value!r} is not supported by quiver (only {allowed!r})")
