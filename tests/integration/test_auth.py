"""API keys and the tenant-private cache through a real `reame serve`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.harness import Server, free_port, start_server, wait_for_entries

pytestmark = pytest.mark.integration

KEY_A = "sk-reame-test-a-5f1c0e9b7a2d"
KEY_B = "sk-reame-test-b-90d4e6a1c3f7"
# About 450 tokens: over cache.min_tokens (256), so it is stored.
DOCUMENT = "Warehouse handbook.\n" + "\n".join(
    f"Rule {i}. Pallets in aisle {i % 7} are stacked at most {2 + i % 3} high, "
    f"and forklifts there keep to {5 + i % 4} km/h; the night shift checks them at {20 + i % 3}:00."
    for i in range(14)
)


def ask(server: Server, headers: dict[str, str], question: str, **reame: str) -> tuple[int, int]:
    """Ask about DOCUMENT; return prompt tokens and cached tokens."""
    body = {
        "messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": question}],
        "temperature": 0, "max_tokens": 4, **({"reame": reame} if reame else {}),
    }
    status, _, answer = post(server, body, headers)
    assert status == 200, answer
    usage = answer["usage"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def post(server: Server, body: object, headers: dict[str, str]) -> tuple[int, dict[str, str], dict[str, Any]]:
    status, response_headers, raw = server.request(
        "POST", "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json", **headers}
    )
    return status, response_headers, json.loads(raw)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # One worker: it holds key A's document in memory when key B asks, the strongest case.
    running = start_server(tmp_path_factory.mktemp("auth"), workers=1, server_api_keys=f"{KEY_A},{KEY_B}")
    yield running
    assert not running.stop()


def test_requests_without_a_valid_key_are_refused(keyed: Server) -> None:
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"X-Api-Key": "sk-wrong"}):
        status, response_headers, body = post(keyed, {"messages": [{"role": "user", "content": "hi"}]}, headers)
        assert status == 401 and response_headers["Www-Authenticate"] == "Bearer"
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["code"] == (None if not headers else "invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        keyed.client(api_key="sk-wrong").models.list()
    assert keyed.request("GET", "/health")[0] == 200 and keyed.request("GET", "/ready")[0] == 200


def test_each_key_is_accepted_in_both_header_forms(keyed: Server) -> None:
    for key in (KEY_A, KEY_B):
        assert [m.id for m in keyed.client(api_key=key).models.list()]  # Authorization: Bearer
        assert keyed.request("GET", "/v1/models", headers={"X-Api-Key": key})[0] == 200
        reply = keyed.client(api_key=key).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Say hi."}], max_tokens=2, temperature=0
        )
        assert reply.choices[0].finish_reason in ("stop", "length")
    log = keyed.log()
    assert KEY_A not in log and KEY_B not in log
    assert f"key={hashlib.sha256(KEY_A.encode()).hexdigest()[:8]}" in log


def test_another_key_does_not_find_a_document_in_the_cache(keyed: Server) -> None:
    a, b = {"Authorization": f"Bearer {KEY_A}"}, {"X-Api-Key": KEY_B}
    entries = wait_for_entries(keyed, 0)["entries"]
    prompt_tokens, _ = ask(keyed, a, "How high are pallets stacked in aisle 3?")
    wait_for_entries(keyed, entries + 1)  # key A's document is stored, and still in the worker's memory
    # Key B reads it all: neither the worker's memory nor the store gives A's prefix away.
    assert ask(keyed, b, "How high are pallets stacked in aisle 3?") == (prompt_tokens, 0)
    wait_for_entries(keyed, entries + 2)  # B's own copy, under B's scope
    # Key A finds its own document again (from the store: the worker now holds B's prompt)...
    _, cached = ask(keyed, a, "How fast do forklifts go in aisle 2?")
    assert cached > prompt_tokens // 2, (cached, prompt_tokens)
    # ...and so does B, its own.
    _, cached = ask(keyed, b, "How fast do forklifts go in aisle 2?")
    assert cached > prompt_tokens // 2, (cached, prompt_tokens)
    # A salt narrows key A's scope: nothing read without it is found with it.
    assert ask(keyed, a, "When is the night check?", cache_salt="alice")[1] == 0


def test_a_public_address_without_a_key_refuses_to_start(tmp_path: Path) -> None:
    env = {**os.environ, "REAME_SERVER_HOST": "0.0.0.0", "REAME_SERVER_PORT": str(free_port()),
           "REAME_SERVER_RUN_DIR": str(tmp_path / "run"), "REAME_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("REAME_SERVER_API_KEYS", None)
    for module, code in (("reame.supervisor", 2), ("reame.gateway", 3)):
        argv = [sys.executable, "-P", "-m", module, *(["serve"] if module == "reame.supervisor" else [])]
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == code, result.stderr
        assert "server.api_keys" in result.stderr and "server.allow_unauthenticated" in result.stderr
    assert not (tmp_path / "run").exists()  # nothing was started
