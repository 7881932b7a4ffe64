"""Compression counted with the model's own vocabulary (the GGUF file is loaded, vocab_only).

The rest of the gateway's compression, with estimated counts, is tested in
tests/unit/test_compress_gateway.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
import zmq

from reame.gateway.api import plan as plans
from reame.gateway.api.validation import Options
from reame.gateway.app import create_app
from reame.gateway.compress.compressor import Compressor, Savings
from reame.gateway.compress.messages import Result
from reame.gateway.compress.tokenizer import Tokenizer
from reame.gateway.upstream.client import Dispatcher
from reame.shared import config, protocol
from reame.shared.model_file import model_path
from reame.shared.modes import CompressMode
from reame.supervisor import cli
from tests.unit.fakes import LIVENESS_S, FakeDispatcher

pytestmark = pytest.mark.integration

FILLER = "We love our wonderful customers and our friendly team is simply the best in town!"
DOCUMENT = "## Prices\n\nEach loaf costs £3.10. " + FILLER + "\n\nWe do not deliver on Sundays. " + FILLER
COMPRESSED = "## Prices\n\nEach loaf costs £3.10.\n\nWe do not deliver on Sundays."


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    loaded = Tokenizer(model_path(config.load(environ={})))
    loaded.load()
    return loaded


@pytest.fixture
def fake() -> Iterator[FakeDispatcher]:
    context: zmq.Context[Any] = zmq.Context()
    dispatcher = FakeDispatcher(context)
    yield dispatcher
    dispatcher.stop()
    context.destroy(linger=0)


@pytest.fixture
def client(fake: FakeDispatcher) -> falcon.testing.TestClient:
    cfg = config.load(environ={"REAME_COMPRESS_MIN_TOKENS": "10", "REAME_MODEL_ALIAS": "m"})
    dispatcher = Dispatcher(fake.address, liveness_s=LIVENESS_S, context=fake.context)
    return falcon.testing.TestClient(create_app(cfg, dispatcher))


def test_the_vocabulary_counts_tokens_like_the_model(tokenizer: Tokenizer) -> None:
    assert tokenizer.count("") == 0
    assert tokenizer.count("Hello world") == 2  # SmolLM2's BPE: "Hello", " world"
    # Message contents are plain text to the worker (worker.prompt_tokens): so they are here.
    assert tokenizer.count("<|im_start|>") == 7
    assert 0 < tokenizer.count(DOCUMENT) < len(DOCUMENT)


def test_the_vocabulary_bounds_tokens_from_below(tokenizer: Tokenizer) -> None:
    """gateway.http.bounds refuses on this bound: it must never exceed the real count."""
    longest = tokenizer.max_token_bytes()
    assert longest is not None and longest >= len("<|im_start|>")
    for text in ("", "Hello world", DOCUMENT, " " * 5000, "-" * 5000, "東京 🚀 " * 300):
        at_least = tokenizer.min_tokens(len(text.encode()))
        assert at_least is not None and at_least <= tokenizer.count(text)
    assert tokenizer.train_context() == 8192  # SmolLM2's, for model.n_ctx = 0


def test_the_compressor_uses_the_configured_mode_unless_asked(tokenizer: Tokenizer) -> None:
    cfg = config.load(environ={"REAME_COMPRESS_MIN_TOKENS": "10", "REAME_COMPRESS_MODE": "off"})
    savings = Savings()
    compressor = Compressor(cfg, tokenizer, savings)

    def compress(mode: CompressMode | None) -> Result:
        ask = plans.Ask("r", protocol.SamplingParams(), 0.0, "", messages=messages, options=Options(compress=mode))
        compressed = plans.draft(ask, compressor).compressed
        savings.add(compressed)  # as the gateway counts what it sends
        return compressed

    messages = [protocol.ChatMessage("system", DOCUMENT)]
    assert compress(None).messages == messages
    result = compress(CompressMode.FACTS)
    assert result.messages is not None and FILLER not in result.messages[0].content
    assert result.saved_tokens == tokenizer.count(DOCUMENT) - tokenizer.count(result.messages[0].content)
    assert savings.snapshot().saved_tokens == result.saved_tokens


def test_a_chat_request_is_sent_compressed_and_reports_what_it_saved(
    client: falcon.testing.TestClient, fake: FakeDispatcher, tokenizer: Tokenizer
) -> None:
    body = {"messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": "hello"}],
            "reame": {"compress": "facts"}}
    result = client.simulate_post("/v1/chat/completions", json=body)
    assert result.status_code == 200, result.text
    (sent,) = fake.generates()
    assert sent.messages is not None
    compressed = sent.messages[0].content
    assert compressed == COMPRESSED
    saved = tokenizer.count(DOCUMENT) - tokenizer.count(compressed)
    usage = result.json["usage"]
    assert usage["prompt_tokens"] == 5  # what the (fake) worker read
    assert usage["reame"]["uncompressed_prompt_tokens"] == 5 + saved


def test_the_command_prints_statistics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tokenizer: Tokenizer
) -> None:
    document = tmp_path / "doc.txt"
    document.write_text(DOCUMENT, encoding="utf-8")
    assert cli.main(["compress", str(document), "--mode", "facts", "--stats"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["mode"] == "facts" and stats["tokens_before"] == tokenizer.count(DOCUMENT)
    assert 0 < stats["tokens_after"] < stats["tokens_before"] and stats["seconds"] >= 0
