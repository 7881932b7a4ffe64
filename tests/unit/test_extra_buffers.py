"""worker.extra_buffers: where the probe dies of a signal, models load without extra buffers."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reame.worker import extra_buffers

MODEL = Path("/models/m.gguf")


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(extra_buffers, "build_has_amx", lambda: True)
    extra_buffers.usable.cache_clear()
    yield
    extra_buffers.usable.cache_clear()


def probe_ends(monkeypatch: pytest.MonkeyPatch, returncode: int | None) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(command)
        if returncode is None:
            raise subprocess.TimeoutExpired(command, kwargs["timeout"])
        return subprocess.CompletedProcess(command, returncode, b"", b"")

    monkeypatch.setattr(extra_buffers.subprocess, "run", run)
    return calls


def test_a_probe_killed_by_a_signal_turns_extra_buffers_off_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = probe_ends(monkeypatch, -11)
    with caplog.at_level(logging.WARNING):
        assert not extra_buffers.usable(MODEL)
    assert calls[0][-1] == str(MODEL)
    assert "AMX" in caplog.text and "signal 11" in caplog.text and "memory.repack = false" in caplog.text


def test_a_probe_that_succeeds_or_fails_on_its_own_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    probe_ends(monkeypatch, 0)
    assert extra_buffers.usable(MODEL)
    extra_buffers.usable.cache_clear()
    probe_ends(monkeypatch, 1)  # a file llama.cpp cannot load: the real load says so
    assert extra_buffers.usable(MODEL)


def test_a_probe_that_hangs_turns_them_off(monkeypatch: pytest.MonkeyPatch) -> None:
    probe_ends(monkeypatch, None)
    assert not extra_buffers.usable(MODEL)


def test_the_probe_runs_once_per_file(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = probe_ends(monkeypatch, 0)
    extra_buffers.usable(MODEL)
    extra_buffers.usable(MODEL)
    assert len(calls) == 1


def test_builds_without_amx_are_not_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = probe_ends(monkeypatch, -11)
    monkeypatch.setattr(extra_buffers, "build_has_amx", lambda: False)
    assert extra_buffers.usable(MODEL)
    assert calls == []


def test_llama_cpp_loads_without_extra_buffers_where_they_crash_and_is_patched_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(extra_buffers.raw, "llama_model_default_params", extra_buffers.raw.llama_model_default_params)
    probe_ends(monkeypatch, -11)
    extra_buffers.llama_cpp_like_reame(MODEL)
    patched = extra_buffers.raw.llama_model_default_params
    extra_buffers.llama_cpp_like_reame(MODEL)
    assert extra_buffers.raw.llama_model_default_params is patched
    assert not patched().use_extra_bufts


def test_llama_cpp_is_left_alone_where_they_work(monkeypatch: pytest.MonkeyPatch) -> None:
    original = extra_buffers.raw.llama_model_default_params
    probe_ends(monkeypatch, 0)
    extra_buffers.llama_cpp_like_reame(MODEL)
    assert extra_buffers.raw.llama_model_default_params is original
