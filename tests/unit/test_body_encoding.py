"""Content-Encoding of request bodies: gzip and deflate undone, bounded; anything else a 415."""

from __future__ import annotations

import gzip
import zlib

import pytest

from reame.gateway.http.body_encoding import BodyError, codings, decode

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hello"}]}'


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def test_no_encoding_and_identity_leave_the_body_as_is() -> None:
    assert decode(BODY, None, 1000) == BODY
    assert decode(BODY, "identity", 1000) == BODY


@pytest.mark.parametrize(("header", "encoded"), [
    ("gzip", gzip.compress(BODY)),
    ("x-gzip", gzip.compress(BODY)),
    ("GZip", gzip.compress(BODY)),
    ("deflate", zlib.compress(BODY)),
    ("deflate", raw_deflate(BODY)),  # what some clients send as "deflate"
    ("deflate, gzip", gzip.compress(zlib.compress(BODY))),  # applied in the order listed
])
def test_gzip_and_deflate_are_undone(header: str, encoded: bytes) -> None:
    assert decode(encoded, header, 1000) == BODY


def test_a_body_that_inflates_past_the_limit_is_413_without_inflating_it_all() -> None:
    bomb = gzip.compress(b"0" * 50_000_000)  # about 50 KB
    with pytest.raises(BodyError) as caught:
        decode(bomb, "gzip", 1_000_000)
    assert caught.value.status == 413
    assert "1000000" in caught.value.message


def test_exactly_the_limit_inflates() -> None:
    assert len(decode(gzip.compress(b" " * 1000), "gzip", 1000)) == 1000


@pytest.mark.parametrize("header", ["br", "zstd", "gzip, br", "compress"])
def test_an_unknown_encoding_is_415_naming_it(header: str) -> None:
    with pytest.raises(BodyError) as caught:
        decode(BODY, header, 1000)
    assert caught.value.status == 415
    assert repr(codings(header)[-1]) in caught.value.message or "'br'" in caught.value.message


def test_many_layers_are_refused() -> None:
    with pytest.raises(BodyError) as caught:
        decode(BODY, "gzip, gzip, gzip", 1000)
    assert caught.value.status == 415


@pytest.mark.parametrize(("header", "data", "says"), [
    ("gzip", BODY, "not valid gzip"),  # said gzip, sent plain
    ("gzip", gzip.compress(BODY)[:-12], "truncated"),
    ("gzip", gzip.compress(BODY) + b"junk", "after its gzip stream"),
    ("deflate", b"\x78\x9c" + b"\xff" * 10, "not valid deflate"),
])
def test_damaged_data_is_400(header: str, data: bytes, says: str) -> None:
    with pytest.raises(BodyError) as caught:
        decode(data, header, 1000)
    assert caught.value.status == 400
    assert says in caught.value.message
