"""The persistent KV cache through the whole stack: reuse, sharing, restarts, faults."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Server, cache_stats, cmdline, start_server, wait_for_entries
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

FACTS = [
    "The Harbour Street office opens at 8:30 and closes at 17:45 on weekdays.",
    "A standard bike rental costs 14 euros per day, or 60 euros per week.",
    "Deposits are not refunded if the frame is damaged.",
    "Electric bikes may only be rented by customers aged 18 or over.",
    "Late returns are charged 5 euros for every started hour after 19:00.",
    "Helmets are included free of charge, but locks cost 2 euros per day.",
    "Group bookings of more than 6 bikes need 48 hours notice.",
    "The support line is +44 20 7946 0321, open until 20:00.",
]
# About 600 tokens: over twice cache.min_tokens (256), several cache blocks (64 tokens), and
# read in a few seconds on one slow core (the tests read it a dozen times).
DOCUMENT = "Rental terms.\n" + "\n".join(
    f"Section {i}. {fact} This rule applies to every branch of the company in the region."
    for i, fact in enumerate(FACTS * 2)
)
QUESTIONS = [
    "When does the Harbour Street office close?",
    "How much is a weekly rental?",
    "What does a lock cost?",
    "What is the support phone number?",
]


def ask(server: Server, question: str, cache: bool = True) -> tuple[str, int, int]:
    """Return the greedy answer, prompt tokens and cached tokens."""
    status, _, body = server.post_json("/v1/chat/completions", {
        "model": "m",
        "messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": 24,
        "reame": {"cache": cache},
    })
    assert status == 200, body
    usage = body["usage"]
    return body["choices"][0]["message"]["content"], usage["prompt_tokens"], usage["prompt_tokens_details"][
        "cached_tokens"
    ]


def entry_files(server: Server) -> list[Path]:
    return sorted(server.cache_dir.glob("*.kv"))


@pytest.fixture()
def cache_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path)
    yield running
    assert not running.stop()


def test_new_question_reuses_the_document_with_identical_output(cache_server: Server) -> None:
    # Reference answers with the persistent cache off.
    reference = [ask(cache_server, q, cache=False)[0] for q in QUESTIONS[:2]]
    assert cache_stats(cache_server)["entries"] == 0
    first, prompt_tokens, cached = ask(cache_server, QUESTIONS[0])
    assert first == reference[0]
    wait_for_entries(cache_server, 1)
    second, prompt_tokens, cached = ask(cache_server, QUESTIONS[1])
    assert cached > prompt_tokens // 2, (cached, prompt_tokens)
    assert second == reference[1]


def test_a_second_worker_and_a_restart_reuse_the_stored_document(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        warm = server.post_json("/v1/cache/warm", {"messages": [{"role": "system", "content": DOCUMENT}]})
        assert warm[0] == 200, warm
        assert warm[2]["cached"] is True and warm[2]["object"] == "cache.warm"
        # Two unrelated requests, one after the other: the longest-idle worker takes each,
        # so both workers then hold something else and the document must come from the store.
        for prompt in ("Say one word.", "Say two words."):
            status, _, body = server.post_json(
                "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": prompt}],
                                         "max_tokens": 2, "reame": {"cache": False}},
            )
            assert status == 200, body
        answer, prompt_tokens, cached = ask(server, QUESTIONS[2])
        assert cached > prompt_tokens // 2
        assert "restored" in server.log()
    finally:
        assert not server.stop()
    restarted = start_server(tmp_path)
    try:
        again, _, cached_after_restart = ask(restarted, QUESTIONS[2])
        assert cached_after_restart > prompt_tokens // 2
        assert again == answer
        assert ask(restarted, QUESTIONS[2], cache=False)[0] == answer
    finally:
        assert not restarted.stop()


def test_a_corrupted_entry_is_detected_and_the_answer_is_unchanged(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        reference, _, _ = ask(server, QUESTIONS[3], cache=False)
        ask(server, QUESTIONS[0])
        wait_for_entries(server, 1)
    finally:
        assert not server.stop()
    (path,) = entry_files(server)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x5A  # one flipped byte in the middle of the payload
    path.write_bytes(bytes(data))
    restarted = start_server(tmp_path)
    try:
        answer, _, cached = ask(restarted, QUESTIONS[3])
        assert answer == reference
        assert cached == 0
        stats = cache_stats(restarted)
        assert stats["corrupt"] >= 1
    finally:
        assert not restarted.stop()


def test_requests_are_answered_while_the_cachekeeper_is_frozen_or_killed(cache_server: Server) -> None:
    keepers = [pid for pid in cache_server.children() if " -m reame.cachekeeper" in cmdline(pid)]
    assert len(keepers) == 1
    os.kill(keepers[0], signal.SIGSTOP)
    try:
        answer, _, cached = ask(cache_server, QUESTIONS[0])
        assert answer and cached == 0
        answer, _, _ = ask(cache_server, QUESTIONS[1])
        assert answer
    finally:
        # SIGKILL ends a stopped process too; no SIGCONT after it: by then the supervisor may
        # have reaped the process (ProcessLookupError, seen on a busy machine) or its pid be reused.
        os.kill(keepers[0], signal.SIGKILL)
    answer, _, _ = ask(cache_server, QUESTIONS[2])
    assert answer
    # The supervisor starts a new cachekeeper; the cache works again.
    def stored_again() -> bool:
        ask(cache_server, QUESTIONS[3])
        return bool(cache_stats(cache_server)["entries"] >= 1)

    wait_for(stored_again, interval=1.0, what="the new cachekeeper to store an entry")


def test_cache_cli_stats_verify_and_purge(cache_server: Server) -> None:
    ask(cache_server, QUESTIONS[0])
    stats = wait_for_entries(cache_server, 1)
    assert stats["bytes"] > 0 and stats["max_bytes"] == 20 * 10**9
    env = {**os.environ, "REAME_SERVER_PORT": str(cache_server.port),
           "REAME_SERVER_RUN_DIR": str(cache_server.run_dir), "REAME_CACHE_DIR": str(cache_server.cache_dir)}
    verify = subprocess.run([sys.executable, "-P", "-m", "reame.supervisor", "cache", "verify"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    purge = subprocess.run([sys.executable, "-P", "-m", "reame.supervisor", "cache", "purge"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert purge.returncode == 0, purge.stderr
    assert cache_stats(cache_server)["entries"] == 0
    assert not entry_files(cache_server)
