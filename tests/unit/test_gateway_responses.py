"""Pure pieces of the gateway: SSE framing, OpenAI object builders, the error table."""

from __future__ import annotations

import json

import pytest

from reame.gateway.api import responses
from reame.gateway.api.responses import Choice, Usage
from reame.gateway.http import errors, sse
from reame.gateway.http.errors import APIError
from reame.shared.protocol import Done, Error, ErrorCode, FinishReason


def test_sse_event_is_one_data_line_ending_in_a_blank_line() -> None:
    frame = sse.event({"text": "two\nlines\r\n", "é": "ü"})
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    body = frame[len(b"data: "):-2]
    assert b"\n" not in body and b"\r" not in body
    assert json.loads(body) == {"text": "two\nlines\r\n", "é": "ü"}


def test_sse_done_and_error_frames() -> None:
    assert sse.DONE == b"data: [DONE]\n\n"
    err = APIError(503, "gone", type=errors.UNAVAILABLE, code="worker_lost", retry=True)
    frame = sse.error_event(err)
    assert json.loads(frame[6:]) == {
        "error": {"message": "gone", "type": "unavailable_error", "param": None, "code": "worker_lost"}
    }


def test_usage_sums_and_serialises() -> None:
    done = Done("r", FinishReason.STOP, prompt_tokens=10, completion_tokens=3, cached_tokens=4,
                draft_tokens=6, accepted_draft_tokens=2)
    total = Usage.from_done(done, saved_tokens=20) + Usage(1, 2, 0, 1)
    assert total.to_dict() == {
        "prompt_tokens": 11,
        "completion_tokens": 5,
        "total_tokens": 16,
        "prompt_tokens_details": {"cached_tokens": 4},
        "reame": {"uncompressed_prompt_tokens": 31, "read_tokens": 7, "draft_tokens": 6, "accepted_draft_tokens": 2},
    }


def test_usage_says_which_compression_answered_and_what_was_read() -> None:
    done = Done("r", FinishReason.STOP, prompt_tokens=300, completion_tokens=3, cached_tokens=256)
    usage = Usage.from_done(done, saved_tokens=40, compression="auto")
    # Several choices or prompts keep the mode, whichever part carries it.
    total = (usage + Usage(completion_tokens=2)).to_dict()["reame"]
    assert total["compression"] == "auto"
    assert total["read_tokens"] == 300 - 256
    assert total["uncompressed_prompt_tokens"] == 340
    assert "compression" not in Usage.from_done(done).to_dict()["reame"]


def test_uncompressed_tokens_default_to_the_prompt_tokens() -> None:
    done = Done("r", FinishReason.STOP, prompt_tokens=10, completion_tokens=3)
    assert Usage.from_done(done).to_dict()["reame"]["uncompressed_prompt_tokens"] == 10


def test_uncompressed_tokens_add_what_compression_saved() -> None:
    done = Done("r", FinishReason.STOP, prompt_tokens=10, completion_tokens=3)
    assert Usage.from_done(done, saved_tokens=90).to_dict()["reame"]["uncompressed_prompt_tokens"] == 100


def test_chat_completion_shape() -> None:
    body = responses.chat_completion("chatcmpl-1", 1700, "m", "hi", "length", Usage(3, 1, 0))
    assert body == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "logprobs": None,
             "finish_reason": "length"}
        ],
        "usage": Usage(3, 1, 0).to_dict(),
    }


def test_chat_chunks_have_usage_null_only_when_usage_is_streamed() -> None:
    plain = responses.chat_chunk("c", 1, "m", {"content": "x"})
    assert "usage" not in plain
    assert plain["object"] == "chat.completion.chunk"
    assert plain["choices"] == [{"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}]
    with_usage = responses.chat_chunk("c", 1, "m", {}, "stop", include_usage=True)
    assert with_usage["usage"] is None and with_usage["choices"][0]["finish_reason"] == "stop"
    last = responses.usage_chunk("chat.completion.chunk", "c", 1, "m", Usage(2, 3, 1))
    assert last["choices"] == [] and last["usage"]["total_tokens"] == 5 and last["id"] == "c"


def test_text_completion_and_chunk_shapes() -> None:
    body = responses.text_completion(
        "cmpl-1", 5, "m", [Choice(0, "a", "stop"), Choice(1, "b", "length")], Usage(4, 2, 0)
    )
    assert body["object"] == "text_completion"
    assert body["choices"] == [
        {"index": 0, "text": "a", "logprobs": None, "finish_reason": "stop"},
        {"index": 1, "text": "b", "logprobs": None, "finish_reason": "length"},
    ]
    chunk = responses.text_chunk("cmpl-1", 5, "m", 1, "t", include_usage=True)
    assert chunk["choices"] == [{"index": 1, "text": "t", "logprobs": None, "finish_reason": None}]
    assert chunk["usage"] is None and chunk["object"] == "text_completion"


def test_models_and_ids() -> None:
    assert responses.model_list("m", 9) == {
        "object": "list",
        "data": [{"id": "m", "object": "model", "created": 9, "owned_by": "reame"}],
    }
    first, second = responses.new_id("chatcmpl-"), responses.new_id("chatcmpl-")
    assert first.startswith("chatcmpl-") and first != second


def test_every_protocol_error_code_has_an_http_mapping() -> None:
    assert set(errors.PROTOCOL_ERRORS) == set(ErrorCode)


@pytest.mark.parametrize(
    ("code", "status", "retry"),
    [
        (ErrorCode.INVALID_REQUEST, 400, False),
        (ErrorCode.CONTEXT_LENGTH_EXCEEDED, 400, False),
        (ErrorCode.OVERLOADED, 429, True),
        (ErrorCode.NO_WORKERS, 503, True),
        (ErrorCode.WORKER_LOST, 503, True),
        (ErrorCode.TIMEOUT, 504, False),
        (ErrorCode.CANCELLED, 503, True),
        (ErrorCode.SHUTTING_DOWN, 503, True),
        (ErrorCode.INTERNAL, 500, False),
    ],
)
def test_protocol_error_mapping(code: ErrorCode, status: int, retry: bool) -> None:
    err = errors.from_protocol(Error("r", code, "why", param="messages"))
    assert (err.status, err.retry, err.code) == (status, retry, code.value)
    assert err.to_dict() == {"message": "why", "type": err.type, "param": "messages", "code": code.value}
    assert (err.type == "invalid_request_error") == (status == 400)


def test_context_length_error_keeps_openais_code() -> None:
    err = errors.from_protocol(Error("r", ErrorCode.CONTEXT_LENGTH_EXCEEDED, "too long"))
    assert err.code == "context_length_exceeded" and err.type == "invalid_request_error"

def test_usage_counts_the_chunks_of_a_chunked_prompt_and_sums_them() -> None:
    done = Done("r", FinishReason.STOP, prompt_tokens=900, completion_tokens=3, cached_tokens=700,
                chunks_in_memory=1, chunks_from_store=5, chunks_read=2, link_tokens=112)
    total = (Usage.from_done(done) + Usage.from_done(done)).to_dict()["reame"]
    assert total["chunks"] == {"in_memory": 2, "from_store": 10, "read": 4, "link_tokens": 224}
    assert "chunks" not in Usage.from_done(Done("r", FinishReason.STOP, 9, 1)).to_dict()["reame"]
