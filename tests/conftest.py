"""What the whole test run shares: the order of the tests, the bench's smoke run beside them, the count of
servers and model loads printed at its end."""

from __future__ import annotations

import os

import pytest

# llama.cpp in this process (the in-process references) and in what it starts (the bench's
# peer) waits at its thread barriers as the workers do (worker/__main__.py): on a busy
# machine spinning threads made a smoke run of seconds take many minutes. libgomp reads
# this when llama.cpp is loaded, after this file.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from reame.benchmarks.server import STARTS
from tests import bench_smoke

SMOKE_RUN: pytest.StashKey[bench_smoke.SmokeRun] = pytest.StashKey()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the unit tests first and the bench's smoke run's test last (tests/bench_smoke.py)."""
    items.sort(key=lambda item: (item.nodeid == bench_smoke.NODE, "/integration/" in item.nodeid))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the bench's smoke run now if its test is to run: it goes on beside the others."""
    if any(item.nodeid == bench_smoke.NODE for item in session.items):
        session.config.stash[SMOKE_RUN] = bench_smoke.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(SMOKE_RUN, None)
    if run is not None:
        run.close()


@pytest.fixture
def smoke_run(request: pytest.FixtureRequest) -> bench_smoke.SmokeRun:
    """The bench's smoke run started when the tests were collected."""
    run = request.config.stash.get(SMOKE_RUN, None)
    assert run is not None, "the smoke run starts only when its test is collected"
    return run


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many `reame serve` the run started: each costs its workers' model loads and start-up."""
    if STARTS.servers:
        terminalreporter.write_line(
            f"reame serve started {STARTS.servers} times, with {STARTS.workers} workers (a model load each)"
        )
