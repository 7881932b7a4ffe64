"""Start-up failures of the worker process and its memory report."""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path

import pytest

from reame.shared.lifecycle import EXIT_BOOT_FAILURE, StopFlag
from reame.worker.main import index_argument, main, memory_summary


@pytest.fixture(autouse=True)
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep main() from replacing the test run's log handlers and signal handlers."""
    monkeypatch.setattr("reame.shared.logs.setup", lambda process, level, fmt="text": None)
    monkeypatch.setattr(StopFlag, "install", lambda self: None)
    for name in list(os.environ):
        if name.startswith("REAME_"):
            monkeypatch.delenv(name)


def test_arguments() -> None:
    parser = argparse.ArgumentParser()
    index_argument(parser)
    assert parser.parse_args(["--index", "3"]).index == 3
    assert parser.parse_args([]).index == 0


def test_bad_config_is_a_boot_failure(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("[model]\nn_ctx = lots\n")
    with caplog.at_level(logging.ERROR):
        assert main(["--config", str(conf)]) == EXIT_BOOT_FAILURE
    assert "n_ctx" in caplog.text


def test_missing_model_is_a_boot_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("REAME_MODEL_PATH", str(tmp_path / "nope.gguf"))
    with caplog.at_level(logging.ERROR):
        assert main([]) == EXIT_BOOT_FAILURE
    assert "nope.gguf" in caplog.text


def test_unloadable_model_is_a_boot_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a gguf file at all")
    monkeypatch.setenv("REAME_MODEL_PATH", str(fake))
    with caplog.at_level(logging.ERROR):
        assert main([]) == EXIT_BOOT_FAILURE
    assert "could not load" in caplog.text


def test_memory_summary_reads_proc() -> None:
    assert re.fullmatch(r"rss \d+ MiB \(\d+ MiB own, \d+ MiB shared file pages\)", memory_summary())
