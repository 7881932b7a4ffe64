"""memory.use_mmap and memory.use_mlock: llama.cpp's load mode, and a failed lock logged with its fix."""

from __future__ import annotations

import logging
from pathlib import Path

import llama_cpp
import pytest

from reame.worker.model import check_locked, load_mode, locked_bytes


def test_load_modes() -> None:
    assert load_mode(True, False) == llama_cpp.LLAMA_LOAD_MODE_MMAP
    assert load_mode(True, True) == llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
    assert load_mode(False, True) == llama_cpp.LLAMA_LOAD_MODE_MLOCK
    assert load_mode(False, False) == llama_cpp.LLAMA_LOAD_MODE_NONE


def test_locked_bytes_reads_vmlck(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmLck:\t    2048 kB\nVmRSS:\t 10 kB\n")
    assert locked_bytes(status) == 2048 * 1024
    assert locked_bytes(tmp_path / "missing") is None
    assert isinstance(locked_bytes(), int)  # this kernel says


def test_a_failed_lock_is_a_warning_naming_the_fix(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x" * 10_000)
    with caplog.at_level(logging.WARNING):
        assert check_locked(model, 10_000)
        assert check_locked(model, None)  # nothing to go by: no false alarm
        assert not check_locked(model, 0)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "LimitMEMLOCK=infinity" in message and "ulimit -l" in message and "use_mlock = false" in message
