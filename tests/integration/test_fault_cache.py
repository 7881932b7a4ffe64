"""Fault suite, scenarios 3, 5 and 6: the cachekeeper killed, cache files corrupted, the cap reached.

One worker, so that asking about the documents in turn makes every question after the
first restore its document from the store (the worker holds only its last prompt).
Every answer is greedy and compared with the same request with the cache off.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults import LONG_RUN, Tally, processes, scale
from tests.harness import Server, cache_stats, cmdline, start_server, wait_for_entries
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]

DEADLINE_S = 180.0
# Documents per scenario in `make test`: more than the 24 MB disk holds (about three entries).
SHORT_TOPICS = 4
TOPICS = ["harbour", "orchard", "railway", "library", "brewery", "glacier", "market", "observatory",
          "vineyard", "lighthouse", "quarry", "museum"]


def document(topic: str) -> str:
    """About 400 tokens (over cache.min_tokens), different from the first token on."""
    lines = [f"Notes on the {topic}, part {i}: the {topic} keeps its own records of visitors, staff and weather."
             for i in range(12)]
    return f"{topic.title()} handbook.\n" + "\n".join(lines)


def ask(server: Server, topic: str, cache: bool = True) -> tuple[int, str, int]:
    """Status, greedy answer and cached tokens of a question about ``topic``'s document."""
    status, _, body = server.post_json("/v1/chat/completions", {
        "model": "m",
        "messages": [{"role": "system", "content": document(topic)},
                     {"role": "user", "content": f"What does the {topic} keep records of?"}],
        "temperature": 0, "max_tokens": 12, "reame": {"cache": cache},
    })
    if status != 200:
        return status, "", 0
    return status, body["choices"][0]["message"]["content"], body["usage"]["prompt_tokens_details"]["cached_tokens"]


def entry_names(server: Server) -> set[str]:
    return {p.name for p in server.cache_dir.glob("*.kv")}


def cache_cli(server: Server, command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REAME_SERVER_PORT": str(server.port), "REAME_SERVER_RUN_DIR": str(server.run_dir),
           "REAME_CACHE_DIR": str(server.cache_dir)}
    return subprocess.run([sys.executable, "-P", "-m", "reame.supervisor", "cache", command],
                          capture_output=True, text=True, timeout=600, env=env)


def keeper(server: Server) -> int | None:
    found = processes(server, "cachekeeper")
    return found[0] if found else None


def cache_on(server: Server) -> bool:
    return (server.ready() or {}).get("cache") == "on"


@pytest.fixture()
def one_worker(tmp_path: Path) -> Iterator[Server]:
    # Both cores for the one worker: these loops read many documents.
    running = start_server(tmp_path, workers=1, workers_threads="2")
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(p) for p in left]}"


def references(server: Server, topics: list[str]) -> dict[str, str]:
    found = {}
    for topic in topics:
        status, text, _ = ask(server, topic, cache=False)
        assert status == 200
        found[topic] = text
    return found


def test_cachekeeper_killed_repeatedly_during_writes_loses_nothing_committed(one_worker: Server) -> None:
    tally = Tally("3. cachekeeper SIGKILL (during writes)")
    topics = TOPICS[: scale(SHORT_TOPICS, 12)]
    expected = references(one_worker, topics)
    rng = random.Random(17)
    for round_ in range(scale(2, 10)):
        # New entries on their way to the disk (each reply is followed by a save)...
        for topic in topics[round_ % len(topics):][:2] + rng.sample(topics, 2):
            status, text, _ = ask(one_worker, topic)
            tally.count(sent=1, answered=int(status == 200), wrong=int(status == 200 and text != expected[topic]))
        committed = entry_names(one_worker)
        pid = keeper(one_worker)
        assert pid is not None
        time.sleep(rng.uniform(0.0, 0.5))  # kill at a random point of the saves; not a timing assertion
        committed = entry_names(one_worker)  # renamed into place: committed
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        tally.count(faults=1)
        # ...and requests answered while it is gone.
        for topic in rng.sample(topics, 2):
            status, text, _ = ask(one_worker, topic)
            tally.count(sent=1, answered=int(status == 200), wrong=int(status == 200 and text != expected[topic]))
        wait_for(lambda: keeper(one_worker) not in (None, pid) and cache_on(one_worker), DEADLINE_S,  # noqa: B023
                 interval=0.1, what="a new cachekeeper")
        tally.recovery_s.append(time.monotonic() - killed_at)
        tally.count(lost=len(committed - entry_names(one_worker)))
    # The index matches the files, and no entry is torn.
    stats = cache_stats(one_worker)
    verify = cache_cli(one_worker, "verify")
    tally.notes.update(entries=stats["entries"], files=len(entry_names(one_worker)), verify_exit=verify.returncode,
                       torn=stats["corrupt"])
    tally.write()
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert stats["entries"] == len(entry_names(one_worker))
    assert tally.wrong == 0 and tally.lost == 0
    assert tally.answered == tally.sent


def corrupt(server: Server, how: str, victim: Path, other: Path) -> None:
    if how == "flip":
        flipped = bytearray(victim.read_bytes())
        for offset in (len(flipped) // 3, len(flipped) // 2, len(flipped) - 10):
            flipped[offset] ^= 0x5A
        victim.write_bytes(bytes(flipped))
    elif how == "truncate":
        data = victim.read_bytes()
        victim.write_bytes(data[: len(data) // 2])
    elif how == "delete":
        victim.unlink()
    elif how == "swap":
        data = other.read_bytes()
        other.write_bytes(victim.read_bytes())
        victim.write_bytes(data)
    elif how == "index":
        for path in server.cache_dir.glob("index.sqlite3*"):
            path.unlink()
        # The running cachekeeper keeps its open index; a new one rebuilds it from the files.
        pid = keeper(server)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: keeper(server) not in (None, pid) and cache_on(server), DEADLINE_S, interval=0.1,
                 what="a new cachekeeper")


def test_corrupted_cache_files_never_change_an_answer(one_worker: Server) -> None:
    tally = Tally("5. cache files corrupted while serving")
    kinds = ["flip", "truncate", "delete", "swap", "index"]
    # Each kind damages its own file (swap also the next one's): one document more than kinds.
    topics = TOPICS[: scale(len(kinds) + 1, 2 * len(kinds))]
    expected = references(one_worker, topics)
    rounds = scale(1, 4)
    for round_ in range(rounds):
        # Store every document, then corrupt pairs of them while serving.
        for topic in topics:
            status, text, _ = ask(one_worker, topic)
            tally.count(sent=1, answered=int(status == 200), wrong=int(text != expected[topic]))
        wait_for_entries(one_worker, len(topics), DEADLINE_S)
        corrupt_before = cache_stats(one_worker)["corrupt"]
        for topic in topics:
            status, text, cached = ask(one_worker, topic)
            assert cached > 0, f"{topic} did not come from the store"
        files = sorted(one_worker.cache_dir.glob("*.kv"), key=lambda p: p.stat().st_mtime)
        assert len(files) >= len(topics)
        rng = random.Random(round_)
        rng.shuffle(files)
        corrupt_after = corrupt_before
        for i, how in enumerate(kinds):
            if how == "index":  # the counter is the process's: read it before this kill restarts the cachekeeper
                corrupt_after = cache_stats(one_worker)["corrupt"]
            victim, other = (files[2 * i], files[2 * i + 1]) if LONG_RUN else (files[i], files[i + 1])
            corrupt(one_worker, how, victim, other)
            tally.count(faults=1)
            # Every document asked again, in an order that makes each one come from the store.
            for topic in rng.sample(topics, len(topics)):
                status, text, _ = ask(one_worker, topic)
                tally.count(sent=1, answered=int(status == 200), wrong=int(status == 200 and text != expected[topic]))
        tally.notes.setdefault("corrupt_counter_rise", []).append(corrupt_after - corrupt_before)
        verify = cache_cli(one_worker, "verify")
        tally.notes.setdefault("verify_exit_after", []).append(verify.returncode)
        # Bad entries are gone: what is left checks out, and the index matches the files.
        verify = cache_cli(one_worker, "verify")
        assert verify.returncode == 0, verify.stdout + verify.stderr
        stats = cache_stats(one_worker)
        assert stats["entries"] == len(entry_names(one_worker)), stats
        assert corrupt_after > corrupt_before
    tally.write()
    assert tally.wrong == 0
    assert tally.answered == tally.sent


def test_cap_reached_and_disk_full_keep_answering_under_the_cap(tmp_path: Path) -> None:
    """A cap of about three entries, and a disk that says it is full half of the time (cache.min_free)."""
    tally = Tally("6. cache cap reached")
    server = start_server(tmp_path, workers=1, workers_threads="2", cache_max_size="30MB")
    try:
        topics = TOPICS[: scale(6, 12)]  # compressed entries are 7-8 MB: four could fit the cap
        expected = references(server, topics)
        sizes: list[int] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                total = 0
                for path in server.cache_dir.glob("*.kv"):
                    with contextlib.suppress(OSError):  # evicted meanwhile
                        total += path.stat().st_size
                sizes.append(total)
                stop.wait(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        for _ in range(scale(1, 6)):  # six documents in a cap of about four: evictions in one round
            for topic in topics:
                status, text, _ = ask(server, topic)
                tally.count(sent=1, answered=int(status == 200), wrong=int(text != expected[topic]))
        stop.set()
        watcher.join()
        stats: dict[str, Any] = cache_stats(server)
        tally.notes.update(max_bytes=stats["max_bytes"], peak_bytes_on_disk=max(sizes),
                           evictions=stats.get("evictions"), refusals=stats.get("refusals"), entries=stats["entries"])
        tally.write()
        assert stats["evictions"] + (stats.get("refusals") or 0) > 0, stats
        assert max(sizes) <= stats["max_bytes"], (max(sizes), stats)
        assert tally.wrong == 0 and tally.answered == tally.sent
    finally:
        assert not server.stop()


def test_disk_full_refuses_entries_and_keeps_answering(tmp_path: Path) -> None:
    """The cache directory on a 24 MB tmpfs with cache.min_free = 0: writes fail with ENOSPC."""
    mount_point = tmp_path / "cache"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    tally = Tally("6. disk full (24 MB tmpfs)")
    try:
        server = start_server(tmp_path, workers=1, workers_threads="2", cache_min_free="0", cache_max_size="1GB")
        try:
            topics = TOPICS[: scale(SHORT_TOPICS, 12)]
            expected = references(server, topics)
            for _ in range(scale(1, 4)):
                for topic in topics:
                    status, text, _ = ask(server, topic)
                    tally.count(sent=1, answered=int(status == 200), wrong=int(text != expected[topic]))
            stats = cache_stats(server)
            verify = cache_cli(server, "verify")
            tally.notes.update(entries=stats["entries"], refusals=stats.get("refusals"),
                               evictions=stats.get("evictions"), verify_exit=verify.returncode,
                               keeper_starts=server.log().count("started cachekeeper"))
            tally.write()
            assert verify.returncode == 0, verify.stdout + verify.stderr
            assert stats["entries"] == len(entry_names(server))
            assert tally.wrong == 0 and tally.answered == tally.sent
        finally:
            assert not server.stop()
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
