"""The read timeout bounds a silent client, never a request that is still being answered."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness import start_server

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 0.5
DOCUMENT = "\n\n".join(
    f"Entry {i}. The parcel for flat {i} waits at the desk until {i % 12 + 8}:00." for i in range(20)
)  # about 400 tokens: seconds to answer on one core, far past READ_TIMEOUT_S


def test_an_answer_that_takes_longer_than_the_read_timeout_still_arrives(tmp_path: Path) -> None:
    server = start_server(tmp_path, workers=1, server_read_timeout=str(READ_TIMEOUT_S))
    try:
        started = time.monotonic()
        status, _, body = server.post_json("/v1/chat/completions", {
            "model": "m", "temperature": 0, "max_tokens": 32,
            "messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": "Flat 7?"}],
        })
        took = time.monotonic() - started
        assert status == 200, body
        assert body["choices"][0]["message"]["content"]
        if took <= READ_TIMEOUT_S:
            pytest.skip(f"answered in {took:.2f} s, inside the read timeout: nothing was tested")
        # The status as the request log writes it: a bare "499" also matches a timestamp's milliseconds.
        assert "POST /v1/chat/completions 499" not in server.log()
        assert "POST /v1/chat/completions 200" in server.log()
    finally:
        server.stop()
