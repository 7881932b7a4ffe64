"""What the whole test run shares: the count of servers and model loads, printed at its end."""

from __future__ import annotations

import pytest

from reame.benchmarks.server import STARTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many `reame serve` the run started: each costs its workers' model loads and start-up."""
    if STARTS.servers:
        terminalreporter.write_line(
            f"reame serve started {STARTS.servers} times, with {STARTS.workers} workers (a model load each)"
        )
