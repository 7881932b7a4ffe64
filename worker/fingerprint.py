"""Name a model and the layout of its KV state, so stored states are only restored where they fit.

The fingerprint hashes the GGUF file's content, not its path: the same file under
another name or on another machine shares its cache entries, and a changed file
does not. Hashing a whole 1.1 GB model would take seconds at every worker start,
so only what tells models apart is read: the file size, the first few MiB (the
GGUF header, the metadata and the tensor infos live there, so any other model,
quantization or vocabulary differs in them) and evenly spaced samples of the
tensor data. Then what shapes the saved state besides the weights: the KV cache
type, flash attention (it changes the V layout in the state), and the
llama-cpp-python version (the state format may change between releases).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Final

import llama_cpp

HEAD_BYTES: Final = 4 << 20
SAMPLE_BYTES: Final = 64 << 10
SAMPLES: Final = 32
DIGEST_BYTES: Final = 32
_PERSON: Final = b"reame-model"


def model_fingerprint(
    path: Path, kv_type: str, flash_attn: bool, version: str = llama_cpp.__version__
) -> bytes:
    """Return the fingerprint of the model at ``path`` with this KV layout; OSError if unreadable."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=_PERSON)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        h.update(f"size={size}\n".encode())
        h.update(os.pread(fd, min(HEAD_BYTES, size), 0))
        for offset in sample_offsets(size):
            h.update(os.pread(fd, SAMPLE_BYTES, offset))
    finally:
        os.close(fd)
    h.update(f"\nkv_type={kv_type}\nflash_attn={int(flash_attn)}\nllama_cpp={version}\n".encode())
    return h.digest()


def sample_offsets(size: int) -> list[int]:
    """Return where the samples of the data after the head start, evenly spaced to the file's end."""
    rest = size - HEAD_BYTES
    if rest <= 0:
        return []
    if rest <= SAMPLES * SAMPLE_BYTES:
        # A small tail is read whole, sample by sample.
        return list(range(HEAD_BYTES, size, SAMPLE_BYTES))
    span = rest - SAMPLE_BYTES  # the last sample ends at the end of the file
    return [HEAD_BYTES + span * i // (SAMPLES - 1) for i in range(SAMPLES)]


def short(fingerprint: bytes) -> str:
    """Return the first hex digits of a fingerprint, for logs."""
    return fingerprint.hex()[:12]
