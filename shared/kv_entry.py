"""The KV cache entry format: header, payload encoding and checksums, shared by the
cachekeeper (which stores entries) and the worker (which receives them as
``CacheHit.header`` plus ``CacheChunk``s and restores them).

Layout of an entry, on disk and on the wire::

    fixed header  struct "<8sHHII": magic b"REAMEKV\\0", format version, flags (0),
                  header length, CRC-32 of the fixed fields before it and of the header
    header        msgpack map, see EntryHeader
    payload       the zstd-compressed KV state, payload_len bytes, CRC-32 in the header

Every way an entry can go bad (truncation, a flipped bit, wrong magic or version)
surfaces as CorruptEntry with a reason. Files are the cachekeeper's business
(``cachekeeper/entry.py``); nothing here touches the disk.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Sequence
from typing import Any, Final

import msgpack
import zstandard

from reame.shared import prefix

MAGIC: Final = b"REAMEKV\0"
FORMAT_VERSION: Final = 1
CODEC: Final = "zstd"
# Payloads travel (and are read from disk) in pieces of this size.
CHUNK_BYTES: Final = 1 << 20
# An 8k-token header is about 40 KB; anything near this bound is damage, not data.
MAX_HEADER_BYTES: Final = 16 << 20
# zstd's levels as reame accepts them (cache.compression_level is checked against these).
MIN_LEVEL: Final = -7
MAX_LEVEL: Final = 19
_FIXED: Final = struct.Struct("<8sHHII")
_FIXED_CRC_COVERED: Final = struct.Struct("<8sHHI")
FIXED_HEADER_BYTES: Final = _FIXED.size

Buffer = bytes | bytearray | memoryview

# Checksums are CRC-32 (zlib.crc32), not BLAKE2b: on a 43.8 MB real KV payload here
# crc32 took 6.3 ms, blake2b 31 ms, sha256 22 ms. They guard against accidents (torn
# writes, bit rot), never an adversary, and CRC-32 catches every single-bit flip and
# every burst of up to 32 bits.


class CorruptEntry(Exception):
    """An entry file or payload stream that cannot be trusted; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class Payload:
    """A KV state compressed for storage, with what a reader needs to check it."""

    data: bytes
    raw_len: int
    checksum: int
    level: int
    planes: bool


# Byte planes (even bytes, then odd bytes: the low and high bytes of f16 values) let
# zstd see the slowly varying sign/exponent bytes together. On a real 1,900-token
# SmolLM2 state (43.8 MB f16, level 1) the payload shrinks from 0.923 to 0.854 of the
# raw size at no measurable cost (encode 56 vs 57 ms, decode 66 vs 66 ms: the smaller
# stream pays for the shuffle); level 3 gains 0.001 more. A q8_0 state still gains a
# little (0.958 -> 0.957). Hence on by default.
def encode_payload(raw: Buffer, *, level: int = 1, planes: bool = True) -> Payload:
    """Compress a raw KV state; ``planes`` splits even and odd bytes (f16 low/high) first."""
    if not MIN_LEVEL <= level <= MAX_LEVEL:
        raise ValueError(f"zstd level must be in [{MIN_LEVEL}, {MAX_LEVEL}], got {level}")
    view = memoryview(raw).cast("B")
    compressor = zstandard.ZstdCompressor(level=level)
    if planes:
        # Strided slicing of bytes is a C copy (6 ms per plane on 44 MB); a memoryview
        # stride is ten times slower, hence bytes first.
        data = raw if isinstance(raw, bytes) else bytes(view)
        stream = compressor.compressobj(size=len(data))
        parts = [stream.compress(data[0::2]), stream.compress(data[1::2]), stream.flush()]
        compressed = b"".join(parts)
    else:
        compressed = compressor.compress(view)
    return Payload(compressed, len(view), zlib.crc32(compressed), level, planes)


@dataclasses.dataclass(frozen=True, slots=True)
class EntryHeader:
    """What an entry holds: the model, the tokens its KV state covers, and its payload's shape."""

    fingerprint: str  # hex of the model fingerprint bytes
    kv_type: str  # "f16", "q8_0"...: a state is only restorable into the same cache type
    block_tokens: int
    tokens: tuple[int, ...]
    blocks: tuple[bytes, ...]  # prefix.block_hashes of tokens
    payload_len: int
    raw_len: int
    checksum: int
    level: int
    planes: bool
    created: float

    @classmethod
    def build(
        cls, fingerprint: bytes, kv_type: str, tokens: Sequence[int], block_tokens: int, payload: Payload,
        created: float,
    ) -> EntryHeader:
        """Describe ``payload`` as the KV state of ``tokens``, computing the block-hash chain."""
        if not kv_type:
            raise ValueError("kv_type must not be empty")
        blocks = prefix.block_hashes(fingerprint, tokens, block_tokens)
        return cls(
            fingerprint.hex(), kv_type, block_tokens, tuple(tokens), tuple(blocks), len(payload.data),
            payload.raw_len, payload.checksum, payload.level, payload.planes, float(created),
        )

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def key(self) -> str:
        """Return the entry key: the file name stem, derived from the model and tokens only."""
        return prefix.entry_key(bytes.fromhex(self.fingerprint), self.tokens)

    def encode(self) -> bytes:
        """Return the fixed header and msgpack header, ready to precede the payload."""
        body: bytes = msgpack.packb(
            {
                "fingerprint": self.fingerprint, "kv_type": self.kv_type, "block_tokens": self.block_tokens,
                "tokens": prefix.token_bytes(self.tokens), "blocks": b"".join(self.blocks),
                "payload_len": self.payload_len, "raw_len": self.raw_len, "checksum": self.checksum,
                "codec": CODEC, "level": self.level, "planes": self.planes, "created": self.created,
            },
            use_bin_type=True,
        )
        covered = _FIXED_CRC_COVERED.pack(MAGIC, FORMAT_VERSION, 0, len(body))
        return covered + struct.pack("<I", zlib.crc32(body, zlib.crc32(covered))) + body

    @property
    def file_size(self) -> int:
        """Return the size of the whole entry file on disk."""
        return len(self.encode()) + self.payload_len


def _field(fields: dict[str, Any], name: str, kind: type[Any]) -> Any:
    value = fields.get(name)
    # bool is an int subclass: a flag must not pass for a count, nor a count for a flag.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CorruptEntry(f"header field {name!r} is missing or not {kind.__name__}")
    return value


def _header_from_map(fields: Any) -> EntryHeader:
    if not isinstance(fields, dict):
        raise CorruptEntry("header is not a map")
    if fields.get("codec") != CODEC:
        raise CorruptEntry(f"unknown codec {fields.get('codec')!r}")
    tokens_bin, blocks_bin = _field(fields, "tokens", bytes), _field(fields, "blocks", bytes)
    fingerprint = _field(fields, "fingerprint", str)
    block_tokens = _field(fields, "block_tokens", int)
    try:
        tokens = prefix.tokens_from_bytes(tokens_bin)
        expected = prefix.block_hashes(bytes.fromhex(fingerprint), tokens, block_tokens)
    except ValueError as err:
        raise CorruptEntry(f"bad header: {err}") from err
    if b"".join(expected) != blocks_bin:
        raise CorruptEntry("block hashes do not match the tokens")
    header = EntryHeader(
        fingerprint, _field(fields, "kv_type", str), block_tokens, tokens, tuple(expected),
        _field(fields, "payload_len", int), _field(fields, "raw_len", int), _field(fields, "checksum", int),
        _field(fields, "level", int), _field(fields, "planes", bool), _field(fields, "created", float),
    )
    if header.payload_len < 0 or header.raw_len < 0:
        raise CorruptEntry("negative payload length")
    return header


def parse_fixed_header(fixed: bytes) -> tuple[int, int]:
    """Check the fixed header's magic, version and flags; return the header's length and CRC."""
    magic, version, flags, header_len, header_crc = _FIXED.unpack(fixed)
    if magic != MAGIC:
        raise CorruptEntry(f"bad magic {magic!r}")
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"unsupported format version {version} (this reader knows {FORMAT_VERSION})")
    if flags != 0 or header_len > MAX_HEADER_BYTES:
        raise CorruptEntry(f"bad fixed header (flags {flags}, header length {header_len})")
    return int(header_len), int(header_crc)


def decode_header(data: bytes) -> EntryHeader:
    """Parse and check the bytes :meth:`EntryHeader.encode` produced; raise CorruptEntry if bad."""
    if len(data) < _FIXED.size:
        raise CorruptEntry(f"truncated fixed header: {len(data)} of {_FIXED.size} bytes")
    fixed = data[: _FIXED.size]
    header_len, header_crc = parse_fixed_header(fixed)
    if len(data) != _FIXED.size + header_len:
        raise CorruptEntry(f"header is {len(data) - _FIXED.size} bytes, the fixed header says {header_len}")
    body = data[_FIXED.size :]
    if zlib.crc32(body, zlib.crc32(fixed[: _FIXED_CRC_COVERED.size])) != header_crc:
        raise CorruptEntry("header checksum mismatch")
    try:
        fields = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as err:
        raise CorruptEntry(f"header is not valid msgpack: {err}") from err
    return _header_from_map(fields)


class PayloadDecoder:
    """Collect compressed chunks of one entry and return its raw KV state, checked."""

    def __init__(self, header: EntryHeader) -> None:
        self.header = header
        self._buffer = bytearray()
        self._crc = 0

    def feed(self, chunk: Buffer) -> None:
        if len(self._buffer) + len(chunk) > self.header.payload_len:
            raise CorruptEntry(f"payload longer than the declared {self.header.payload_len} bytes")
        self._buffer += chunk
        self._crc = zlib.crc32(chunk, self._crc)

    def finish(self) -> bytes | bytearray:
        """Check length and checksum, decompress, and undo the byte-plane split if any."""
        header = self.header
        if len(self._buffer) != header.payload_len:
            raise CorruptEntry(f"truncated payload: {len(self._buffer)} of {header.payload_len} bytes")
        if self._crc != header.checksum:
            raise CorruptEntry("payload checksum mismatch")
        try:
            raw = zstandard.ZstdDecompressor().decompress(self._buffer, max_output_size=header.raw_len)
        except zstandard.ZstdError as err:
            raise CorruptEntry(f"payload does not decompress: {err}") from err
        if len(raw) != header.raw_len:
            raise CorruptEntry(f"payload decompresses to {len(raw)} bytes, header says {header.raw_len}")
        if not header.planes:
            return raw
        # Assigning from memoryview halves avoids two 22 MB slice copies; returning the
        # bytearray as is avoids a third (44 MB: about 20 ms each here).
        joined = bytearray(len(raw))
        half = (len(raw) + 1) // 2
        planes = memoryview(raw)
        joined[0::2] = planes[:half]
        joined[1::2] = planes[half:]
        return joined

