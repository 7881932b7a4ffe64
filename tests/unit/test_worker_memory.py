"""memory.use_mmap, use_mlock and repack: llama.cpp's model parameters, and a failed lock logged with its fix."""

from __future__ import annotations

import logging
from pathlib import Path

import llama_cpp
import pytest

from reame.shared import config
from reame.worker import main as worker_main
from reame.worker.memory import check_locked, load_mode, locked_bytes, model_params


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


@pytest.mark.parametrize(("text", "repack"), [("", True), ("repack = true\n", True), ("repack = false\n", False)])
def test_memory_repack_maps_to_llama_cpp_extra_buffer_types(tmp_path: Path, text: str, repack: bool) -> None:
    path = tmp_path / "r.conf"
    path.write_text("[memory]\n" + text)
    memory = config.load(path, environ={}).memory
    assert memory.repack is repack
    params = model_params(memory.use_mmap, memory.use_mlock, memory.repack)
    assert params.use_extra_bufts is repack
    assert params.load_mode == llama_cpp.LLAMA_LOAD_MODE_MMAP  # repacking does not turn mapping off
    assert params.n_gpu_layers == 0


def test_the_worker_loads_its_model_with_memory_repack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    path = tmp_path / "r.conf"
    path.write_text(f"[model]\npath = {model}\n[memory]\nrepack = false\n")
    seen: dict[str, object] = {}

    def fake_model(*args: object, **kwargs: object) -> object:
        seen.update(kwargs)
        return object()

    monkeypatch.setattr(worker_main, "Model", fake_model)
    worker_main.load_model(config.load(path, environ={}))
    assert seen["repack"] is False and seen["use_mmap"] is True
