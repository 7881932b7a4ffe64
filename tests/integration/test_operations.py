"""Operating reame as a service, through a real `reame serve` with two gunicorn processes.

/metrics counts across both gateway processes and the dispatcher and cachekeeper,
answers while 8 streams run, JSON log lines parse, every answer carries
x-request-id, HEAD works, `reame status` draws its screen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import Server, start_server
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

MODEL_LABEL = "model"
STREAMS = 8


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("operations"), workers=2, server_gateway_processes="2", logging_format="json",
    )
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {left}"


def scrape(server: Server) -> dict[str, float]:
    """GET /metrics, parsed with prometheus-client's parser; sample (labels but model) -> value."""
    status, headers, body = server.request("GET", "/metrics")
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain")
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != MODEL_LABEL)
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def served_chats(metrics: dict[str, float]) -> float:
    return metrics.get("reame_requests_total{endpoint=/v1/chat/completions,status=200}", 0.0)


def chat(server: Server, content: str, max_tokens: int = 8) -> None:
    client = server.client()
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], max_tokens=max_tokens, temperature=0,
    )


def test_metric_families_move_across_both_gateway_processes(served: Server) -> None:
    before = scrape(served)
    assert before["reame_dispatcher_up{}"] == 1.0 and before["reame_workers{}"] == 2.0
    assert before["reame_cache_up{}"] == 1.0 and "reame_cache_save_seconds_total{}" in before
    for i in range(6):
        chat(served, f"Say the number {i}.")
    # Each scrape is served by whichever gunicorn process accepts it: every one must count all six.
    for _ in range(6):
        after = scrape(served)
        assert served_chats(after) - served_chats(before) == 6.0
        assert after["reame_prompt_tokens_total{}"] > before.get("reame_prompt_tokens_total{}", 0.0)
        assert after["reame_completion_tokens_total{}"] > before.get("reame_completion_tokens_total{}", 0.0)
        assert after["reame_time_to_first_token_seconds_count{}"] - before.get(
            "reame_time_to_first_token_seconds_count{}", 0.0) == 6.0
        assert after["reame_queue_wait_seconds_count{}"] >= 6.0
        assert after["reame_request_seconds_count{endpoint=/v1/chat/completions}"] >= 6.0


def json_lines(server: Server) -> list[str]:
    return [line for line in server.log().splitlines() if line.startswith("{")]


def test_a_scrape_answers_while_8_streams_run(served: Server) -> None:
    started = threading.Barrier(STREAMS + 1)
    errors: list[BaseException] = []

    def stream(index: int) -> None:
        try:
            client = served.client()
            chunks = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"Count from 1 to 50, story {index}."}],
                max_tokens=48, temperature=0, stream=True,
            )
            started.wait()
            for _ in chunks:
                pass
        except BaseException as err:  # reported below, in the test's thread
            errors.append(err)
            started.abort()

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
    for thread in threads:
        thread.start()
    started.wait()  # every stream has its 200 and its first chunk on the way
    timings = []
    for _ in range(5):
        begin = time.monotonic()
        metrics = scrape(served)
        timings.append(time.monotonic() - begin)
        assert metrics["reame_dispatcher_up{}"] == 1.0
    for thread in threads:
        thread.join()
    assert not errors, errors
    print(f"\nscrape while {STREAMS} streams run: " + ", ".join(f"{t * 1000:.0f} ms" for t in timings))


def test_request_ids_head_and_json_logs(served: Server) -> None:
    client = served.client()
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2, extra_headers={"X-Request-Id": "ops-42"},
    )
    assert raw.headers["x-request-id"] == "ops-42"
    completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert completion._request_id == completion.id  # type: ignore[attr-defined]
    for path in ("/health", "/ready", "/v1/models", "/metrics"):
        status, headers, body = served.request("HEAD", path)
        assert (status, body) == (200, b"") and headers["X-Request-Id"]

    def logged() -> dict[str, object] | None:
        for line in json_lines(served):
            record = json.loads(line)  # every JSON line parses
            if record.get("x_request_id") == "ops-42":
                return dict(record)
        return None

    record = wait_for(logged, what="the JSON request line of ops-42")
    assert record["status"] == 200 and record["path"] == "/v1/chat/completions"
    assert isinstance(record["prompt_tokens"], int) and record["completion_tokens"] == 2
    assert record["compress"] == "lossless" and isinstance(record["ttft_s"], float)
    assert {"time", "level", "process", "pid", "logger", "message", "key", "cached_tokens"} <= set(record)


def test_reame_status_draws_one_screen(served: Server) -> None:
    chat(served, "One more, for the status screen.")
    env = {**os.environ, "REAME_SERVER_PORT": str(served.port), "REAME_SERVER_RUN_DIR": str(served.run_dir),
           "REAME_CACHE_DIR": str(served.cache_dir), "REAME_WORKERS_COUNT": "2"}
    result = subprocess.run([sys.executable, "-P", "-m", "reame.supervisor", "status"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=Path(served.tmp))
    assert result.returncode == 0, result.stdout + result.stderr
    screen = result.stdout
    assert "workers: 2 attached" in screen and "served" in screen and "holds" in screen
    assert "cache: " in screen and "hit rate" in screen
    assert "tokens saved by compression" in screen and "tokens not read again thanks to the cache" in screen
    as_json = subprocess.run([sys.executable, "-P", "-m", "reame.supervisor", "status", "--json"],
                             capture_output=True, text=True, timeout=120, env=env)
    parsed = json.loads(as_json.stdout)
    assert len(parsed["dispatcher"]["worker_states"]) == 2 and parsed["metrics"]
