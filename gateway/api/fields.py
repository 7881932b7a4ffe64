"""Typed readers of a JSON request's fields: each returns the value or raises a 400 naming the field.

Pure, like gateway.api.validation. Booleans are not numbers; numbers must be finite; an
integral float (16.0) is the integer 16, since JSON has one number type.
"""

from __future__ import annotations

import math
from typing import Any

from reame.gateway.http.errors import invalid


def json_object(value: object, where: str | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        what = where or "the request body"
        raise invalid(where, f"{what} must be a JSON object", "invalid_type")
    return value


def text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise invalid(where, f"{where} must be a string", "invalid_type")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # JSON allows lone surrogates (\ud800); the wire does not
        raise invalid(where, f"{where} is not valid Unicode (lone surrogate)") from None
    return value


def is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    # Python ints are exact at any size (and math.isfinite overflows on huge ones).
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def number(fields: dict[str, Any], name: str, lo: float, hi: float, default: float) -> float:
    value = fields.get(name)
    if value is None:
        return default
    if not is_number(value):
        raise invalid(name, f"{name} must be a number", "invalid_type")
    number = float(value) if abs(value) < 1e308 else math.inf  # a huge int would overflow float()
    if not (lo <= number <= hi and math.isfinite(number)):
        bounds = f"at least {lo:g}" if hi == math.inf else f"from {lo:g} to {hi:g}"
        raise invalid(name, f"{name} must be {bounds}")
    return number


def integer(fields: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type; 16.0 is the integer 16
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid(name, f"{name} must be an integer", "invalid_type")
    if not lo <= value <= hi:
        raise invalid(name, f"{name} must be an integer from {lo} to {hi}")
    return value


def boolean(fields: dict[str, Any], name: str, where: str | None = None) -> bool | None:
    value = fields.get(name)
    if value is not None and not isinstance(value, bool):
        where = where or name
        raise invalid(where, f"{where} must be a boolean", "invalid_type")
    return value
