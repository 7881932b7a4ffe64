"""Parsers of configuration values: text -> typed value, or ValueError saying what was expected.

shared.config declares each key with one of these (``key(integer(1, 65535), "8080")``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final, TypeVar

from reame.shared.modes import choices

_Mode = TypeVar("_Mode", bound=enum.StrEnum)


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """Return a parser of integers within ``lo`` and ``hi`` (None: unbounded)."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("an integer") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"from {lo}" + (f" to {hi}" if hi is not None else " up")
            raise ValueError(f"an integer {bounds}")
        return value

    return parse


def number(lo: float | None = None, hi: float | None = None) -> Callable[[str], float]:
    """Return a parser of finite numbers within ``lo`` and ``hi`` (None: unbounded)."""
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError("a number") from None
        if value != value or (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"from {lo}" + (f" to {hi}" if hi is not None else " up")
            raise ValueError(f"a number {bounds}")
        return value

    return parse


def mode(modes: type[_Mode]) -> Callable[[str], _Mode]:
    """Return a parser of one of ``modes``' values (case-insensitive)."""
    def parse(text: str) -> _Mode:
        try:
            return modes(text.strip().lower())
        except ValueError:
            raise ValueError("one of " + choices(modes)) from None

    return parse


def choice(*options: str) -> Callable[[str], str]:
    """Return a parser of one of ``options`` (case-insensitive)."""
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError("one of " + ", ".join(options))
        return value

    return parse


SIZE_UNITS: Final = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
                      "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def size(text: str) -> int:
    """Parse a byte size such as ``20GB``, ``512MiB`` or ``1000000``."""
    value = text.strip().upper().replace(" ", "")
    number = value.rstrip("KMGTIB")
    unit = value[len(number):]
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    if unit not in SIZE_UNITS or not amount >= 0:
        raise ValueError("a size in bytes such as 20GB, 512MiB or 1000000")
    return int(amount * SIZE_UNITS[unit])


def boolean(text: str) -> bool:
    """Parse true/yes/on/1 or false/no/off/0."""
    value = text.strip().lower()
    if value in ("true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0"):
        return False
    raise ValueError("true or false")


def text(text: str) -> str:
    """Return the text without surrounding whitespace."""
    return text.strip()


def address(text: str) -> str:
    """Parse an empty address or a ZeroMQ ipc:// or tcp:// one."""
    value = text.strip()
    if value and not value.startswith(("ipc://", "tcp://")):
        raise ValueError("empty, or a ZeroMQ address starting with ipc:// or tcp://")
    return value
