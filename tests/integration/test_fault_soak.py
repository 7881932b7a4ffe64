"""Fault suite, scenario 10: mixed traffic with faults injected at random, for a while.

``REAME_SOAK_SECONDS`` sets the length (`make test`: 15 s; ``make soak``: 1800 s). The processes
that live through it (supervisor, dispatcher, gateway) keep flat memory and file
descriptors, and the cache stays under its cap.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import PROMPTS, Outcome, Tally, answer, chat, freeze, open_fds, processes, rss_kib, stream, thaw
from tests.harness import Server, cache_stats, cmdline, start_server

pytestmark = [pytest.mark.integration, pytest.mark.faults]

SECONDS = float(os.environ.get("REAME_SOAK_SECONDS", "15"))


@pytest.fixture()
def own_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path, cache_max_size="40MB")
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(p) for p in left]}"


def survivors(server: Server) -> dict[str, int]:
    """The long-lived processes: role -> pid (the gateway's master)."""
    found = {"supervisor": server.proc.pid}
    for role in ("dispatcher", "gateway"):
        pids = processes(server, role)
        if pids:
            found[role] = min(pids)
    return found


def measure(server: Server) -> dict[str, tuple[int, int]]:
    return {role: (rss_kib(pid), open_fds(pid)) for role, pid in survivors(server).items()}


def test_soak_with_random_faults(own_server: Server) -> None:
    tally = Tally(f"10. soak {SECONDS:g} s, random faults")
    documents = [f"Reference sheet {i}.\n" + "\n".join(
        f"Line {j} of sheet {i}: the value of item {j} is {i * 100 + j} units." for j in range(30)) for i in range(6)]
    references = {p: answer(own_server, p) for p in PROMPTS[:4]}
    before = measure(own_server)
    stop_at = time.monotonic() + SECONDS
    problems: list[str] = []
    rng = random.Random(10)

    def traffic(index: int) -> None:
        local = random.Random(index)
        while time.monotonic() < stop_at:
            if local.random() < 0.5:
                prompt = local.choice(list(references))
                outcome = Outcome()
                stream(own_server, chat(prompt), outcome, timeout=300)
                tally.count(sent=1)
                if outcome.kind == "completed":
                    tally.count(answered=1, wrong=int(outcome.text != references[prompt]))
                elif outcome.kind in ("error", "status"):
                    tally.count(errors=1)
                else:
                    tally.count(lost=1)
                    problems.append(f"{outcome.kind}: {outcome.message}")
            else:
                status, _, _ = own_server.post_json("/v1/chat/completions", {
                    "model": "m", "max_tokens": 8, "temperature": 0,
                    "messages": [{"role": "system", "content": local.choice(documents)},
                                 {"role": "user", "content": "Which item is worth the most?"}]})
                tally.count(sent=1, answered=int(status == 200), errors=int(status != 200))

    threads = [threading.Thread(target=traffic, args=(n,), daemon=True) for n in range(4)]
    for thread in threads:
        thread.start()
    faults: dict[str, int] = {}
    while time.monotonic() < stop_at:
        time.sleep(rng.uniform(3.0, 8.0))
        fault = rng.choice(["kill worker", "freeze worker", "kill cachekeeper"])
        pids = processes(own_server, "worker" if "worker" in fault else "cachekeeper")
        if not pids:
            continue
        pid = rng.choice(pids)
        if fault == "freeze worker":
            freeze(pid)
            time.sleep(rng.uniform(1.0, 5.0))
            thaw(pid)
        else:
            os.kill(pid, signal.SIGKILL)
        faults[fault] = faults.get(fault, 0) + 1
        tally.count(faults=1)
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads), "a client hung"
    own_server.wait_ready(workers=2, timeout=180)
    # Settle (replaced workers reattach, saves finish), then measure again.
    for prompt in references:
        assert answer(own_server, prompt) == references[prompt]
    after = measure(own_server)
    stats = cache_stats(own_server)
    tally.notes.update(faults=faults, before_rss_kib_fds=before, after_rss_kib_fds=after,
                       cache_bytes=stats["bytes"], cache_max_bytes=stats["max_bytes"], problems=problems[:5])
    tally.write()
    assert not problems, problems[:5]
    assert tally.wrong == 0
    assert stats["bytes"] <= stats["max_bytes"]
    for role, (rss, fds) in after.items():
        if role in before and before[role][0]:
            # Generous bounds: a leak over a 30-minute soak shows far beyond them.
            assert fds <= before[role][1] + 64, (role, before[role], after[role])
            assert rss <= 2 * before[role][0] + 64 * 1024, (role, before[role], after[role])
