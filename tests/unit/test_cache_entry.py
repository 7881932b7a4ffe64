"""Entry files round-trip, and every kind of damage is caught as CorruptEntry."""

from __future__ import annotations

import os
import random
import struct
import zlib
from pathlib import Path

import pytest

from reame.cachekeeper import entry
from reame.cachekeeper.entry import EntryReader
from reame.shared import kv_entry
from reame.shared.kv_entry import CorruptEntry, EntryHeader, encode_payload
from tests.unit.entries import decode, write_file

FP = b"fingerprint"
TOKENS = list(range(100, 137))


def kv_like(size: int, seed: int = 0) -> bytes:
    """Return bytes shaped like f16 values: noisy low bytes, a few distinct high bytes."""
    rng = random.Random(seed)
    return bytes(rng.randrange(256) if i % 2 == 0 else rng.choice((0x2C, 0x30, 0xAC, 0xB0)) for i in range(size))


def make(raw: bytes, planes: bool = True, tokens: list[int] = TOKENS) -> tuple[EntryHeader, bytes]:
    payload = encode_payload(raw, level=1, planes=planes)
    return EntryHeader.build(FP, "f16", tokens, 8, payload, created=12.5), payload.data


def read_all(path: Path, chunk_bytes: int = kv_entry.CHUNK_BYTES) -> bytes | bytearray:
    with EntryReader(path) as reader:
        return decode(reader.header, reader.chunks(chunk_bytes))


@pytest.mark.parametrize("planes", [False, True])
@pytest.mark.parametrize("size", [0, 1, 4001, 20000])
def test_round_trip(tmp_path: Path, planes: bool, size: int) -> None:
    raw = kv_like(size)
    header, data = make(raw, planes)
    path = tmp_path / f"{header.key()}.kv"
    assert write_file(path, header, data) == path.stat().st_size == header.file_size
    assert entry.read_header(path) == header
    assert read_all(path, chunk_bytes=1000) == raw
    assert header.n_tokens == len(TOKENS) and header.planes is planes and len(header.blocks) == len(TOKENS) // 8
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind


def test_byte_planes_shrink_f16_shaped_data() -> None:
    raw = kv_like(40000)
    assert len(encode_payload(raw, planes=True).data) < len(encode_payload(raw, planes=False).data)


def test_read_header_does_not_read_the_payload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    header, data = make(random.Random(1).randbytes(200_000))
    path = tmp_path / "e.kv"
    write_file(path, header, data)
    read = 0
    real_pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        nonlocal read
        read += size
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    assert entry.read_header(path) == header
    assert read < 2000


def test_every_flipped_byte_is_caught(tmp_path: Path) -> None:
    header, data = make(kv_like(3000))
    good = tmp_path / "good.kv"
    write_file(good, header, data)
    original = good.read_bytes()
    bad = tmp_path / "bad.kv"
    for position in range(len(original)):
        damaged = bytearray(original)
        damaged[position] ^= 1 << (position % 8)
        bad.write_bytes(damaged)
        with pytest.raises(CorruptEntry):
            read_all(bad, chunk_bytes=512)


def test_every_truncation_and_any_trailing_byte_is_caught(tmp_path: Path) -> None:
    header, data = make(kv_like(2000))
    good = tmp_path / "good.kv"
    write_file(good, header, data)
    original = good.read_bytes()
    bad = tmp_path / "bad.kv"
    for length in range(len(original)):
        bad.write_bytes(original[:length])
        with pytest.raises(CorruptEntry, match="truncated"):
            read_all(bad)
    bad.write_bytes(original + b"\0")
    with pytest.raises(CorruptEntry, match="trailing"):
        entry.read_header(bad)


def test_wrong_magic_and_unknown_version_are_named(tmp_path: Path) -> None:
    header, data = make(kv_like(100))
    path = tmp_path / "e.kv"
    write_file(path, header, data)
    original = path.read_bytes()
    path.write_bytes(b"NOTREAME" + original[8:])
    with pytest.raises(CorruptEntry, match="magic"):
        entry.read_header(path)
    # A well-formed file of a future version: valid checksum, unknown version number.
    _, _, flags, header_len, _ = struct.unpack_from("<8sHHII", original)
    body = original[20 : 20 + header_len]
    covered = struct.pack("<8sHHI", kv_entry.MAGIC, 2, flags, header_len)
    path.write_bytes(covered + struct.pack("<I", zlib.crc32(body, zlib.crc32(covered))) + original[20:])
    with pytest.raises(CorruptEntry, match="version 2"):
        entry.read_header(path)


def test_decoder_checks_length_and_checksum() -> None:
    header, data = make(kv_like(5000), planes=True)
    assert decode(header, [data[:100], data[100:]]) == kv_like(5000)
    with pytest.raises(CorruptEntry, match="truncated"):
        decode(header, [data[:-1]])
    with pytest.raises(CorruptEntry, match="longer"):
        decode(header, [data, b"x"])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    with pytest.raises(CorruptEntry, match="checksum"):
        decode(header, [flipped])


def test_payload_that_lies_about_its_raw_length_is_caught() -> None:
    _header, data = make(kv_like(5000))
    liar = EntryHeader.build(FP, "f16", TOKENS, 8, kv_entry.Payload(data, 4999, zlib.crc32(data), 1, False), 1.0)
    with pytest.raises(CorruptEntry, match="decompresses to 5000"):
        decode(liar, [data])


def test_writer_refuses_a_payload_that_does_not_match_its_header(tmp_path: Path) -> None:
    header, data = make(kv_like(3000))
    path = tmp_path / "e.kv"
    short = entry.EntryWriter(path, header)
    short.write(data[:-1])
    with pytest.raises(CorruptEntry, match="declares"):
        short.commit()
    long = entry.EntryWriter(path, header)
    with pytest.raises(CorruptEntry, match="longer"):
        long.write(data + b"x")
    long.abort()
    wrong = entry.EntryWriter(path, header)
    wrong.write(bytes(len(data)))
    with pytest.raises(CorruptEntry, match="checksum"):
        wrong.commit()
    assert list(tmp_path.iterdir()) == []


def test_abort_leaves_nothing_and_nothing_is_visible_before_commit(tmp_path: Path) -> None:
    header, data = make(kv_like(3000))
    path = tmp_path / "e.kv"
    writer = entry.EntryWriter(path, header)
    writer.write(data)
    assert not path.exists() and writer.temp_path.exists()
    writer.abort()
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_bad_parameters_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="level"):
        encode_payload(b"x", level=99)
    payload = encode_payload(b"x")
    with pytest.raises(ValueError, match="kv_type"):
        EntryHeader.build(FP, "", TOKENS, 8, payload, 1.0)
    with pytest.raises(ValueError, match="block_tokens"):
        EntryHeader.build(FP, "f16", TOKENS, 0, payload, 1.0)
