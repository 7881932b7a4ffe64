"""`reame bench back-to-back`, `lone` and `metrics` without a server: their shapes, verdicts and tables."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("openai")  # reame.benchmarks needs the test or bench extra

from reame.benchmarks import back_to_back, lone, metrics  # after the skip
from reame.benchmarks.common import Setup, Timing
from reame.benchmarks.server import Server


def _setup(threads: int = 1) -> Setup:
    return Setup(Path("m.gguf"), None, Path("exam"), Path("out"), threads, False, 4096, Path("tmp"))


def _timing(ttft_s: float, cached: int = 0) -> Timing:
    return Timing(ttft_s, ttft_s + 0.1, 8, 50.0, cached, 500, "text")


def test_both_dispatch_scenarios_need_two_workers_or_threads_whatever_threads_says() -> None:
    assert back_to_back.workers(_setup(1)) == 2 and back_to_back.workers(_setup(4)) == 4
    assert lone.threads(_setup(1)) == 2 and lone.threads(_setup(3)) == 3


def test_back_to_back_judges_the_median_second_over_cold_and_counts_restores() -> None:
    pairs = [(_timing(10.0), _timing(0.2, 480)), (_timing(10.0), _timing(0.4, 480)), (_timing(10.0), _timing(3.0))]
    section = back_to_back.report(_setup(), pairs, 1)
    assert "TTFT 0.040 of the cold read's" in section.goal[0] and "met" in section.goal[0]
    assert "NOT" not in section.goal[0]
    assert section.notes == ["second questions that restored the document from the store (another worker took "
                             "them): 1 of 3"]
    assert "| 3 | 500 | 10.000 | 3.000 | 0.300 | 0 |" in section.tables[0]
    slow = back_to_back.report(_setup(), [(_timing(10.0), _timing(1.0))], 0)
    assert "NOT met" in slow.goal[0]


def test_lone_judges_the_median_ratio_of_the_lending_server_to_the_single_worker() -> None:
    section = lone.report(_setup(2), [_timing(1.0), _timing(1.3), _timing(0.9)], [_timing(1.0)] * 3)
    assert "TTFT 1.000 of 1 worker x 2 threads'" in section.goal[0] and "NOT met" not in section.goal[0]
    assert "2 workers x 1 thread TTFT s" in section.tables[0]
    assert "NOT met" in lone.report(_setup(2), [_timing(1.2)], [_timing(1.0)]).goal[0]
    with pytest.raises(ValueError):  # a round lost on one side only would pair the wrong requests
        lone.report(_setup(2), [_timing(1.0)], [])


def test_metrics_rows_and_goal_in_milliseconds() -> None:
    assert metrics.row("idle", [4.0, 2.0, 9.0, 3.0]) == ["idle", 4, 3.5, 9.0, 9.0]
    empty = metrics.row("none", [])  # a table of dashes, not a crash
    assert empty[1] == 0 and all(math.isnan(value) for value in empty[2:])  # type: ignore[arg-type]
    section = metrics.report(_setup(), [3.0] * 5, [40.0, 60.0, 150.0], 8, 2)
    assert "60.0 ms at the median, 150.0 ms at p90" in section.goal[0] and "NOT met" not in section.goal[0]
    assert "| 8 streams running | 3 | 60.0 | 150.0 | 150.0 |" in section.tables[0]
    assert "NOT met" in metrics.report(_setup(), [3.0], [120.0], 8, 2).goal[0]


def test_restores_are_the_worker_logs_restore_lines(tmp_path: Path) -> None:
    server = Server(proc=None, port=0, tmp=tmp_path)  # type: ignore[arg-type]  # only its log is read
    assert server.restores() == []
    (tmp_path / "serve.log").write_text(
        "12:00 INFO reame.worker.prefix_cache: restored 1765 of 1778 prompt tokens from cache entry ab12: wait 2 ms\n"
        "12:00 INFO reame.worker.prefix_cache: not restoring cache entry cd34: another model\n"
        "12:01 INFO reame.gateway: POST /v1/chat/completions 200\n")
    assert server.restores() == ["restored 1765 of 1778 prompt tokens from cache entry ab12: wait 2 ms"]
