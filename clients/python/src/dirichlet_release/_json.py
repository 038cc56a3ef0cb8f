"""Strict readers of the service's JSON: a value of the wrong type is a `BadResponse`.

Each reader names what it was reading (``what``) in its message, never the value itself.
"""

from __future__ import annotations

import math
from typing import Any, List, Mapping, Optional, Sequence, Union

from ._errors import BadResponse


def get(doc: Mapping[str, Any], key: str, what: str) -> Any:
    """`doc[key]`, which must be there."""
    try:
        return doc[key]
    except KeyError:
        raise BadResponse(f"{what}: the service's answer has no `{key}`") from None


def obj(value: Any, what: str) -> Mapping[str, Any]:
    """A JSON object."""
    if not isinstance(value, dict):
        raise BadResponse(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def number(value: Any, what: str) -> float:
    """A finite number (never a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadResponse(f"{what}: expected a finite number, got {type(value).__name__}")
    return float(value)


def opt_number(doc: Mapping[str, Any], key: str, what: str) -> Optional[float]:
    """`doc[key]` as a finite number, or None when it is absent or null."""
    value = doc.get(key)
    return None if value is None else number(value, f"{what} {key}")


def integer(value: Any, what: str) -> int:
    """A whole number (never a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadResponse(f"{what}: expected an integer, got {type(value).__name__}")
    return value


def boolean(value: Any, what: str) -> bool:
    """A boolean (JSON true or false)."""
    if not isinstance(value, bool):
        raise BadResponse(f"{what}: expected true or false, got {type(value).__name__}")
    return value


def string(value: Any, what: str) -> str:
    """A string."""
    if not isinstance(value, str):
        raise BadResponse(f"{what}: expected a string, got {type(value).__name__}")
    return value


def opt_string(doc: Mapping[str, Any], key: str, what: str) -> Optional[str]:
    """`doc[key]` as a string, or None when it is absent or null."""
    value = doc.get(key)
    return None if value is None else string(value, f"{what} {key}")


def one_of(value: Any, allowed: Sequence[str], what: str) -> str:
    """A string among `allowed` (a value this client does not know is refused, not guessed at)."""
    text = string(value, what)
    if text not in allowed:
        raise BadResponse(f"{what}: unknown value {text!r}")
    return text


def numbers(value: Any, what: str) -> List[float]:
    """A list of finite numbers."""
    if not isinstance(value, list):
        raise BadResponse(f"{what}: expected a list of numbers, got {type(value).__name__}")
    return [number(v, what) for v in value]


def number_or_numbers(value: Any, what: str) -> Union[float, List[float]]:
    """One number (every cell) or a list of them (one per cell)."""
    if isinstance(value, list):
        return numbers(value, what)
    return number(value, what)


def strings(value: Any, what: str) -> List[str]:
    """A list of strings."""
    if not isinstance(value, list):
        raise BadResponse(f"{what}: expected a list of strings, got {type(value).__name__}")
    return [string(v, what) for v in value]
