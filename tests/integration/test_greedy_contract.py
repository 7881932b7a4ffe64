"""The README's contract: temperature 0 gives the same text for the same request on the same
machine, build and config, whatever the load, the worker, the cache or restarts.

Speculative lookup is on (the default), so each answer depends on which draft lengths the
workers choose from their step costs: measured under load, those would differ, and at a
near tie so would the text. Nothing here looks at a clock.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Server, start_server

pytestmark = pytest.mark.integration

MAX_TOKENS = 40
PARAGRAPH = (
    "The lighthouse stood on a rocky point at the edge of the bay, and for more than a century its keepers "
    "climbed the spiral stairs every evening to light the lamp."
)
# Over cache.min_tokens (256), so that a repeat is served from the KV cache.
DOCUMENT = "\n".join(f"Item {i}: the {color} box on shelf {i % 4 + 1} holds {i * 3 % 17 + 1} keys."
                     for i, color in enumerate(["red", "green", "blue", "white", "black"] * 5))
PROMPTS: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "Repeat this sentence exactly: " + PARAGRAPH}],
    [{"role": "user", "content": "Copy this list: one, two, three, four, five, six, seven, eight, nine, ten"}],
    [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": "Copy the lines about the red boxes."}],
    [{"role": "user", "content": "def add(a, b):\n    return a + b\n\nWrite the same function again."}],
]
# A core kept busy for at most this long, whatever happens to the test.
BUSY = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"
BUSY_BOUND_S = 600


def answers(server: Server, parallel: int = 1) -> list[str]:
    """The greedy answer to every prompt (``parallel`` at once, so that both workers serve)."""
    client = server.client(timeout=600)

    def ask(messages: list[dict[str, str]]) -> str:
        reply: Any = client.chat.completions.create(
            model="m", messages=messages, temperature=0, max_tokens=MAX_TOKENS,  # type: ignore[arg-type]
        )
        return str(reply.choices[0].message.content)

    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(ask, PROMPTS))


@contextmanager
def busy_cores(count: int = 1) -> Iterator[None]:
    """Keep ``count`` cores busy with bounded busy loops, stopped on the way out.

    One loop is load enough: step costs measured beside it would differ from the idle ones,
    and two loops on a 2-core machine made this the slowest test of the suite (up to 108 s).
    """
    loops = [subprocess.Popen([sys.executable, "-c", BUSY, str(BUSY_BOUND_S)]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_greedy_text_is_the_same_idle_busy_and_after_a_restart(tmp_path: Path) -> None:
    first = start_server(tmp_path / "first")
    try:
        idle = answers(first)
        with busy_cores():
            busy = answers(first, parallel=2)  # other workers, the KV cache warm, a core loaded
    finally:
        assert not first.stop()
    assert all(idle), idle
    assert busy == idle
    (costs,) = first.cache_dir.glob("speculative-costs-*.json")  # one measurement for both workers

    # A restart on the same cache while the machine is busy: the workers read the kept costs.
    with busy_cores():
        second = start_server(tmp_path / "second", cache_dir=str(first.cache_dir))
        try:
            again = answers(second)
        finally:
            assert not second.stop()
    assert again == idle
    log = second.log_path.read_text(errors="replace")
    assert log.count(f"speculative step costs from {costs}") == 2  # both workers, nothing measured
    assert "measured by this worker only" not in log
