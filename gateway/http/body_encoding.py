"""Undo a request body's ``Content-Encoding`` (gzip, deflate), never past the body limit.

Clients that compress what they upload (``httpx`` with a transport that gzips, a
proxy, ``curl --data-binary @doc.json.gz -H 'Content-Encoding: gzip'``) send bytes
that are not JSON until inflated. A small body may inflate a thousandfold (a
"zip bomb": 1 MB of zeros gzips to 1 KB), so inflating stops one byte past the
limit: the request is then as large as a plain one that size, a 413. An encoding
reame cannot undo is a 415 naming it, as RFC 9110 (15.5.16) asks.

Pure: bytes in, bytes out or :class:`BodyError`; gateway.api.resources maps the errors.
"""

from __future__ import annotations

import zlib
from typing import Final

# zlib's wbits: 16 + 15 reads a gzip member, 15 a zlib stream; -15 raw deflate, which
# some clients (old IIS-era ones) send for "deflate" although RFC 9110 says zlib.
_GZIP: Final = 16 + zlib.MAX_WBITS
_ZLIB: Final = zlib.MAX_WBITS
_RAW: Final = -zlib.MAX_WBITS
SUPPORTED: Final = ("gzip", "x-gzip", "deflate", "identity")
# "gzip, gzip, gzip, ..." would inflate one layer after another: two layers is plenty.
MAX_LAYERS: Final = 2


class BodyError(Exception):
    """A body that cannot be decoded: ``status`` 400 (damaged), 413 (too large) or 415 (unknown encoding)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def codings(header: str | None) -> list[str]:
    """Return the content codings of a ``Content-Encoding`` header, in the order they were applied."""
    if not header:
        return []
    return [part.strip().lower() for part in header.split(",") if part.strip()]


def decode(data: bytes, header: str | None, max_bytes: int) -> bytes:
    """Return ``data`` with the codings of ``header`` undone; at most ``max_bytes`` (else 413)."""
    applied = [c for c in codings(header) if c != "identity"]
    unknown = [c for c in applied if c not in SUPPORTED]
    if unknown:
        raise BodyError(
            415, f"Content-Encoding {unknown[0]!r} is not supported; send the body as is, gzip or deflate",
            "unsupported_encoding",
        )
    if len(applied) > MAX_LAYERS:
        raise BodyError(415, f"Content-Encoding has {len(applied)} layers; at most {MAX_LAYERS}",
                        "unsupported_encoding")
    for coding in reversed(applied):  # the last one applied is undone first
        data = _inflate(data, coding, max_bytes)
    return data


def _inflate(data: bytes, coding: str, max_bytes: int) -> bytes:
    if coding == "deflate":
        # RFC 9110's "deflate" is a zlib stream; a raw deflate stream has no header to check.
        wbits = _ZLIB if len(data) >= 2 and (data[0] * 256 + data[1]) % 31 == 0 and data[0] & 0x0F == 8 else _RAW
    else:
        wbits = _GZIP
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, max_bytes + 1)
    except zlib.error as err:
        raise BodyError(400, f"the request body is not valid {coding} data: {err}", "invalid_body") from None
    if len(out) > max_bytes:
        raise BodyError(413, f"the request body inflates ({coding}) to more than {max_bytes} bytes",
                        "request_too_large")
    if not inflater.eof:
        raise BodyError(400, f"the request body's {coding} data is truncated", "invalid_body")
    if inflater.unused_data:
        raise BodyError(400, f"the request body has data after its {coding} stream", "invalid_body")
    return out
