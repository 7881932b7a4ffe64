"""What the whole test run shares: the count of servers and model loads, printed at its end."""

from __future__ import annotations

import os

import pytest

# llama.cpp in this process (the in-process references) and in what it starts (the bench's
# peer) waits at its thread barriers as the workers do (worker/__main__.py): on a busy
# machine spinning threads made a smoke run of seconds take many minutes. libgomp reads
# this when llama.cpp is loaded, after this file.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from reame.benchmarks.server import STARTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many `reame serve` the run started: each costs its workers' model loads and start-up."""
    if STARTS.servers:
        terminalreporter.write_line(
            f"reame serve started {STARTS.servers} times, with {STARTS.workers} workers (a model load each)"
        )
