"""worker.extra_buffers: where the probe dies, AMX is refused, or else extra buffers are off."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reame.worker import extra_buffers

MODEL = Path("/models/m.gguf")
CRASH = -11


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(extra_buffers, "build_has_amx", lambda: True)
    monkeypatch.setattr(extra_buffers, "refuse_amx", lambda: True)  # never on the test process itself
    monkeypatch.setattr(extra_buffers.raw, "llama_model_default_params", extra_buffers.raw.llama_model_default_params)
    extra_buffers.usable.cache_clear()
    yield
    extra_buffers.usable.cache_clear()


def probes_end(monkeypatch: pytest.MonkeyPatch, *returncodes: int | None) -> list[list[str]]:
    """Make the probes end with these return codes in turn (None: it hangs); return their commands."""
    calls: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(command)
        returncode = returncodes[len(calls) - 1]
        if returncode is None:
            raise subprocess.TimeoutExpired(command, kwargs["timeout"])
        return subprocess.CompletedProcess(command, returncode, b"", b"")

    monkeypatch.setattr(extra_buffers.subprocess, "run", run)
    return calls


def test_a_probe_that_survives_keeps_everything_and_runs_once_per_file(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = probes_end(monkeypatch, 0)
    assert extra_buffers.usable(MODEL) and extra_buffers.usable(MODEL)
    assert calls == [[calls[0][0], "-m", "reame.worker.extra_buffers", str(MODEL)]]


def test_a_probe_that_fails_on_its_own_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    probes_end(monkeypatch, 1)  # a file llama.cpp cannot load: the real load says so
    assert extra_buffers.usable(MODEL)


def test_where_amx_crashes_it_is_refused_and_the_repacked_layouts_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = probes_end(monkeypatch, CRASH, 0)
    with caplog.at_level(logging.WARNING):
        assert extra_buffers.usable(MODEL)
    assert extra_buffers.WITHOUT_AMX in calls[1]
    assert "AMX is refused" in caplog.text


@pytest.mark.parametrize("second", [CRASH, None])
def test_where_even_that_crashes_or_hangs_extra_buffers_are_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, second: int | None
) -> None:
    probes_end(monkeypatch, None if second is None else CRASH, second)
    with caplog.at_level(logging.WARNING):
        assert not extra_buffers.usable(MODEL)
    assert "memory.repack = false" in caplog.text


def test_where_seccomp_is_missing_extra_buffers_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    probes_end(monkeypatch, CRASH, 0)
    monkeypatch.setattr(extra_buffers, "refuse_amx", lambda: False)
    assert not extra_buffers.usable(MODEL)


def test_builds_without_amx_are_not_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = probes_end(monkeypatch, CRASH)
    monkeypatch.setattr(extra_buffers, "build_has_amx", lambda: False)
    assert extra_buffers.usable(MODEL)
    assert calls == []


def test_llama_cpp_loads_without_extra_buffers_where_they_crash_and_is_patched_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probes_end(monkeypatch, CRASH, CRASH)
    extra_buffers.llama_cpp_like_reame(MODEL)
    patched = extra_buffers.raw.llama_model_default_params
    extra_buffers.llama_cpp_like_reame(MODEL)
    assert extra_buffers.raw.llama_model_default_params is patched
    assert not patched().use_extra_bufts


def test_llama_cpp_is_left_alone_where_they_work(monkeypatch: pytest.MonkeyPatch) -> None:
    original = extra_buffers.raw.llama_model_default_params
    probes_end(monkeypatch, 0)
    extra_buffers.llama_cpp_like_reame(MODEL)
    assert extra_buffers.raw.llama_model_default_params is original
