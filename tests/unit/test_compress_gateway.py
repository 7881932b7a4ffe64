"""Compression in the gateway: the reame.compress switch, usage, the saving counter, the CLI.

No vocabulary is loaded here (counts are estimates); what needs the model's own
tokenizer is in tests/integration/test_compress_tokenizer.py.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path
from typing import Any

import falcon.testing
import pytest

from reame.gateway.api.validation import parse_chat, parse_completion, parse_warm
from reame.gateway.app import create_app
from reame.gateway.compress.compressor import Savings
from reame.gateway.compress.messages import Result
from reame.gateway.compress.tokenizer import Tokenizer, TokenizerError
from reame.gateway.http.errors import APIError
from reame.gateway.upstream.client import Dispatcher
from reame.shared import config, protocol
from reame.supervisor import cli
from tests.unit.fakes import LIVENESS_S, FakeDispatcher

DEFAULTS = config.load(environ={}).sampling
# A model file that does not exist: the gateway then estimates token counts.
NO_VOCABULARY = {"REAME_MODEL_PATH": "/nonexistent/reame-unit-tests.gguf"}
FILLER = "We love our wonderful customers and our friendly team is simply the best in town!"
DOCUMENT = "## Prices\n\nEach loaf costs £3.10. " + FILLER + "\n\nWe do not deliver on Sundays. " + FILLER


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


# ---- reame.compress ------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["off", "lossless", "facts", "query"])
def test_every_mode_can_be_asked_for(mode: str) -> None:
    assert parse_chat(chat(reame={"compress": mode}), DEFAULTS).options.compress == mode
    body = {"prompt": "x", "reame": {"compress": mode}}
    assert parse_completion(body, DEFAULTS).options.compress == mode
    assert parse_warm(body).options.compress == mode


def test_no_mode_means_the_configured_one() -> None:
    assert parse_chat(chat(), DEFAULTS).options.compress is None
    assert parse_chat(chat(reame={"compress": None}), DEFAULTS).options.compress is None


@pytest.mark.parametrize("bad", ["zip", "FACTS", 1, True, ["facts"], {}])
def test_a_bad_mode_is_a_400_naming_reame_compress(bad: object) -> None:
    with pytest.raises(APIError) as caught:
        parse_chat(chat(reame={"compress": bad}), DEFAULTS)
    assert caught.value.status == 400 and caught.value.param == "reame.compress"
    assert "off, lossless, facts, query" in caught.value.message


def test_a_warm_request_takes_only_compress() -> None:
    with pytest.raises(APIError) as caught:
        parse_warm({"prompt": "x", "reame": {"cache": False}})
    assert caught.value.param == "reame.cache"


# ---- the tokenizer ---------------------------------------------------------------------

def test_without_a_vocabulary_counts_are_estimates(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert Tokenizer(None).count("12345678") == 2
    missing = Tokenizer(tmp_path / "missing.gguf")
    with caplog.at_level(logging.WARNING):
        assert missing.count("abcd") == 1
    assert "estimating" in caplog.text
    with pytest.raises(TokenizerError):
        missing.load()


# ---- the compressor and its counter ----------------------------------------------------

def test_the_saving_counter_adds_up_compressed_requests() -> None:
    savings = Savings()
    savings.add(Result(saved_tokens=0))
    savings.add(Result(saved_tokens=40))
    savings.add(Result(saved_tokens=2))
    assert (savings.snapshot().compressed, savings.snapshot().saved_tokens) == (2, 42)


# ---- through the app, against a fake dispatcher ---------------------------------------

@pytest.fixture
def client(fake: FakeDispatcher) -> falcon.testing.TestClient:
    cfg = config.load(environ={"REAME_COMPRESS_MIN_TOKENS": "10", "REAME_MODEL_ALIAS": "m", **NO_VOCABULARY})
    dispatcher = Dispatcher(fake.address, liveness_s=LIVENESS_S, context=fake.context)
    return falcon.testing.TestClient(create_app(cfg, dispatcher))


def test_streamed_and_completion_usage_report_the_saving_too(
    client: falcon.testing.TestClient, fake: FakeDispatcher
) -> None:
    body = {"messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": "hello"}],
            "reame": {"compress": "facts"}, "stream": True, "stream_options": {"include_usage": True}}
    text = client.simulate_post("/v1/chat/completions", json=body).text
    usage = json.loads(text.split("data: ")[-2])["usage"]
    assert usage["reame"]["uncompressed_prompt_tokens"] > usage["prompt_tokens"]
    prompt = {"prompt": "p" + DOCUMENT + "\n\nQuestion?", "reame": {"compress": "facts"}, "max_tokens": 2}
    done = client.simulate_post("/v1/completions", json=prompt).json
    assert done["usage"]["reame"]["uncompressed_prompt_tokens"] > done["usage"]["prompt_tokens"]
    sent = fake.generates()[-1].prompt
    assert sent == "p## Prices\n\nEach loaf costs £3.10.\n\nWe do not deliver on Sundays.\n\nQuestion?"


def test_compression_off_sends_the_document_unchanged(
    client: falcon.testing.TestClient, fake: FakeDispatcher
) -> None:
    body = {"messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": "hello"}],
            "reame": {"compress": "off"}}
    usage = client.simulate_post("/v1/chat/completions", json=body).json["usage"]
    sent = fake.generates()[0].messages
    assert sent == [protocol.ChatMessage("system", DOCUMENT), protocol.ChatMessage("user", "hello")]
    assert usage["reame"]["uncompressed_prompt_tokens"] == usage["prompt_tokens"]


def test_a_bad_mode_is_answered_400(client: falcon.testing.TestClient) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat(reame={"compress": "gzip"}))
    assert result.status_code == 400 and result.json["error"]["param"] == "reame.compress"


# ---- `reame compress` -------------------------------------------------------------------

@pytest.fixture
def document(tmp_path: Path) -> Path:
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT, encoding="utf-8")
    return path


def test_the_command_prints_the_compressed_text(document: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compress", str(document), "--mode", "facts"]) == 0
    assert capsys.readouterr().out == "## Prices\n\nEach loaf costs £3.10.\n\nWe do not deliver on Sundays.\n"


def test_the_command_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a  &amp;  b")))
    assert cli.main(["compress", "-", "--mode", "lossless"]) == 0
    assert capsys.readouterr().out == "a & b\n"


@pytest.mark.parametrize("name", ["missing.txt", "."])
def test_an_unreadable_file_is_a_usage_error(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compress", name]) == 2
    assert name in capsys.readouterr().err


def test_a_bad_mode_is_refused_by_the_command(document: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["compress", str(document), "--mode", "zip"])
    assert caught.value.code == 2
