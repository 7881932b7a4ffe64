"""`reame status`: the screen drawn from what each process said."""

from __future__ import annotations

from reame.shared import protocol as p
from reame.supervisor.status import Snapshot, render

STATUS = p.Status(
    workers=2, idle_workers=1, queued=3, running=1, full_prefills=4, reused_from_memory=5, reused_from_store=6,
    affinity_waits=7, worker_states=[
        p.WorkerState("w-0 (pid 10)", busy=True, served=12, held_chars=5000, held_prefix="a1b2c3d4e5f6"),
        p.WorkerState("w-1 (pid 11)", busy=False, served=3),
    ], warms_started=3, warms_finished=1, warms_preempted=2,
)
REPORT = p.CacheReport("", entries=9, bytes=2_500_000, max_bytes=20_000_000_000, hits=3, misses=1, evictions=2,
                       corrupt=0, bytes_read=0, bytes_written=0)
METRICS = {
    "reame_requests_total{endpoint=/v1/chat/completions,status=200}": 15.0,
    "reame_requests_total{endpoint=/v1/chat/completions,status=429}": 1.0,
    "reame_prompt_tokens_total": 9000.0,
    "reame_cached_prompt_tokens_total{source=memory}": 1200.0,
    "reame_cached_prompt_tokens_total{source=store}": 800.0,
    "reame_compression_saved_tokens_total{mode=lossless}": 40.0,
    "reame_compression_saved_tokens_total{mode=facts}": 60.0,
}


def test_one_screen_says_it_all() -> None:
    screen = render(Snapshot(STATUS, REPORT, True, METRICS))
    assert "workers: 2 attached, 1 busy, 1 idle" in screen
    assert "w-0 (pid 10)" in screen and "busy" in screen and "served 12" in screen and "#a1b2c3d4e5f6" in screen
    assert "holds nothing" in screen
    assert "requests: 1 running, 3 queued" in screen
    assert "background warms: 3 started, 1 finished, 2 pre-empted" in screen
    assert "9 entries, 2.5 MB of 20.0 GB, hit rate 75% (3/4)" in screen
    assert "16 requests, 9000 prompt tokens" in screen
    assert "thanks to the cache: 2000 (1200 from memory, 800 from the store)" in screen
    assert "tokens saved by compression: 100" in screen


def test_what_does_not_answer_is_named() -> None:
    screen = render(Snapshot(None, None, True, None))
    assert "dispatcher: not answering" in screen
    assert "cache: not answering" in screen and "gateway: /metrics not answering" in screen
    assert "cache: disabled" in render(Snapshot(STATUS, None, False, METRICS))


def test_chunks_are_counted_once_chunk_mode_has_served() -> None:
    assert "chunks:" not in render(Snapshot(STATUS, REPORT, True, METRICS))
    chunked = {**METRICS, "reame_chunks_total{source=memory}": 2.0, "reame_chunks_total{source=store}": 30.0,
               "reame_chunks_total{source=read}": 8.0, "reame_chunk_link_tokens_total": 608.0}
    screen = render(Snapshot(STATUS, REPORT, True, chunked))
    assert "chunks: 2 in memory, 30 from the store, 8 read alone; 608 link tokens read in context" in screen
