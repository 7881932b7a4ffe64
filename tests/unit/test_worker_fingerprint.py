"""The model fingerprint follows the file's content and the KV layout, not its path."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from reame.worker.fingerprint import HEAD_BYTES, SAMPLE_BYTES, SAMPLES, model_fingerprint, sample_offsets, short


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "a" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(random.Random(7).randbytes(HEAD_BYTES + 3 * SAMPLES * SAMPLE_BYTES + 12345))
    return path


def fingerprint(path: Path, kv_type: str = "f16", flash_attn: bool = False, version: str = "0.3.36") -> bytes:
    return model_fingerprint(path, kv_type, flash_attn, version)


def test_same_content_under_another_path_gives_the_same_fingerprint(model_file: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere.gguf"
    copy.write_bytes(model_file.read_bytes())
    assert fingerprint(copy) == fingerprint(model_file)
    assert len(fingerprint(copy)) == 32


def test_a_changed_metadata_byte_changes_it(model_file: Path) -> None:
    before = fingerprint(model_file)
    data = bytearray(model_file.read_bytes())
    data[1000] ^= 1
    model_file.write_bytes(bytes(data))
    assert fingerprint(model_file) != before


def test_a_changed_byte_in_a_sample_changes_it(model_file: Path) -> None:
    before = fingerprint(model_file)
    data = bytearray(model_file.read_bytes())
    data[sample_offsets(len(data))[5] + 17] ^= 0x80
    model_file.write_bytes(bytes(data))
    assert fingerprint(model_file) != before


def test_a_longer_file_changes_it(model_file: Path) -> None:
    before = fingerprint(model_file)
    with model_file.open("ab") as handle:
        handle.write(b"\0")
    assert fingerprint(model_file) != before


@pytest.mark.parametrize(
    ("kv_type", "flash_attn", "version"), [("q8_0", False, "0.3.36"), ("f16", True, "0.3.36"), ("f16", False, "0.3.37")]
)
def test_kv_layout_and_library_version_change_it(
    model_file: Path, kv_type: str, flash_attn: bool, version: str
) -> None:
    assert fingerprint(model_file, kv_type, flash_attn, version) != fingerprint(model_file)


def test_samples_are_evenly_spaced_and_end_at_the_end() -> None:
    size = HEAD_BYTES + 1000 * SAMPLE_BYTES + 77
    offsets = sample_offsets(size)
    assert len(offsets) == SAMPLES
    assert offsets[0] == HEAD_BYTES
    assert offsets[-1] + SAMPLE_BYTES == size
    gaps = {b - a for a, b in itertools.pairwise(offsets)}
    assert max(gaps) - min(gaps) <= 1


def test_small_files_are_read_whole() -> None:
    assert sample_offsets(HEAD_BYTES) == []
    assert sample_offsets(1000) == []
    assert sample_offsets(HEAD_BYTES + 3 * SAMPLE_BYTES) == [HEAD_BYTES + i * SAMPLE_BYTES for i in range(3)]


def test_a_tiny_file_has_a_fingerprint(tmp_path: Path) -> None:
    small = tmp_path / "tiny.gguf"
    small.write_bytes(b"GGUF")
    assert fingerprint(small) != fingerprint(small, "q4_0")
    assert short(fingerprint(small)) == fingerprint(small).hex()[:12]


def test_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        fingerprint(tmp_path / "nope.gguf")
