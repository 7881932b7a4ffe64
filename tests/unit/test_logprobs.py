"""Logprobs: the worker's log-softmax and top-k, and the gateway's request parsing and OpenAI shape."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reame.gateway.api.logprobs import chat_logprobs, choice_logprobs
from reame.gateway.http.errors import APIError
from reame.shared.protocol import TokenLogprob
from reame.worker.logprobs import Recorder, entry, log_softmax


def piece(token: int) -> bytes:
    return f"t{token}".encode()


def test_log_softmax_sums_to_one_and_keeps_order() -> None:
    logits = np.array([1.0, 3.0, -2.0, 3.0], dtype=np.float32)
    logprobs = log_softmax(logits)
    assert math.isclose(float(np.exp(logprobs).sum()), 1.0, rel_tol=1e-9)
    assert logprobs[1] == logprobs[3] > logprobs[0] > logprobs[2]


def test_entry_gives_the_chosen_token_and_the_top_k_in_order() -> None:
    logits = np.array([0.0, 5.0, 2.0, 4.0, -1.0], dtype=np.float32)
    found = entry(logits, 2, 3, piece)
    assert found.piece == b"t2"
    assert found.logprob == pytest.approx(float(log_softmax(logits)[2]))
    assert [p for p, _ in found.top] == [b"t1", b"t3", b"t2"]
    assert entry(logits, 2, 0, piece).top == []


def test_the_recorder_keeps_the_last_choice() -> None:
    class Argmax:
        def choose(self, logits: np.typing.NDArray[np.float32]) -> int:
            return int(np.argmax(logits))

    recorder = Recorder(1, piece)
    chooser = recorder.wrap(Argmax())
    assert recorder.last() is None
    assert chooser.choose(np.array([0.0, 1.0], dtype=np.float32)) == 1
    last = recorder.last()
    assert last is not None and last.piece == b"t1" and last.top[0][0] == b"t1"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [({}, None), ({"logprobs": False}, None), ({"logprobs": True}, 0), ({"logprobs": True, "top_logprobs": 20}, 20)],
)
def test_chat_logprobs_fields(fields: dict[str, object], expected: int | None) -> None:
    assert chat_logprobs(fields) == expected


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"logprobs": "yes"}, "logprobs"), ({"top_logprobs": 1}, "top_logprobs"),
     ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
     ({"logprobs": True, "top_logprobs": True}, "top_logprobs")],
)
def test_bad_logprobs_fields_are_400(fields: dict[str, object], param: str) -> None:
    with pytest.raises(APIError) as caught:
        chat_logprobs(fields)
    assert caught.value.param == param


def test_openai_shape_keeps_the_exact_bytes_of_partial_characters() -> None:
    shaped = choice_logprobs([TokenLogprob(b"\xe2\x82", -0.25, [(b"\xe2\x82", -0.25), (b"a", -2.0)])])
    assert shaped is not None and shaped["refusal"] is None
    (first,) = shaped["content"]
    assert first["bytes"] == [0xE2, 0x82] and first["logprob"] == -0.25
    assert first["token"] == b"\xe2\x82".decode("utf-8", "replace")
    assert [t["token"] for t in first["top_logprobs"]] == [first["token"], "a"]
    assert choice_logprobs(None) is None
