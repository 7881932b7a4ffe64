"""Every wire message round-trips, and bad payloads become ProtocolError."""

from __future__ import annotations

import msgpack
import pytest

from reame.shared import config
from reame.shared import protocol as p
from reame.shared.modes import SpeculativeMode

SAMPLING = p.SamplingParams(
    temperature=0.0, top_p=0.9, top_k=5, min_p=0.1, seed=7, max_tokens=12, stop=["\n", "END"],
    presence_penalty=0.5, frequency_penalty=-0.5, repeat_penalty=1.1, repeat_last_n=32,
    logit_bias=[(42, -100.0), (7, 2.5)],
)

MESSAGES: list[p.Message] = [
    p.Ready(worker_id="w0-1", pid=1, model="m", n_ctx=4096),
    p.Ready(worker_id="w0-1", pid=1, model="m", n_ctx=4096, threads=2, host="vm-1"),
    p.Ready(worker_id="w0-1", pid=1, model="m", n_ctx=4096, fingerprint=b"\x01" * 32, draft_fingerprint=b"\x02" * 32),
    p.Heartbeat(),
    p.Disconnect(),
    p.Generate(request_id="r1", sampling=SAMPLING, deadline=1.5, prompt="hi"),
    p.Generate(
        request_id="r2", sampling=p.SamplingParams(), deadline=2.0,
        messages=[p.ChatMessage("system", "be brief"), p.ChatMessage("user", "hi", name="ann")],
    ),
    p.Generate(
        request_id="r5", sampling=p.SamplingParams(), deadline=2.0,
        messages=[
            p.ChatMessage("assistant", "", tool_calls=(p.ToolCall("add", '{"a": 1}', id="call_1"),)),
            p.ChatMessage("tool", "2", tool_call_id="call_1"),
        ],
        tools=[p.ToolFunction("add", '{"type": "object", "properties": {"a": {"type": "integer"}}}', "Adds.")],
    ),
    p.Generate(request_id="r3", sampling=p.SamplingParams(), deadline=2.0, prompt="hi", cache_scope="ab" * 16),
    p.Generate(request_id="r4", sampling=p.SamplingParams(), deadline=2.0, prompt="hi", grammar='root ::= "{}"'),
    p.Delta(request_id="r1", text="héllo 🎉", tokens=2),
    p.Delta(
        request_id="r1", text="hi", tokens=1,
        logprobs=[p.TokenLogprob(b"hi", -0.5, [(b"hi", -0.5), (b"\xe2", -2.0)])],
    ),
    p.Done(request_id="r1", finish_reason=p.FinishReason.LENGTH, prompt_tokens=3, completion_tokens=4,
           cached_tokens=2, restored_tokens=1, prompt_ms=1.25, generation_ms=9.5, queue_ms=3.5),
    p.Error(request_id="r1", code=p.ErrorCode.CONTEXT_LENGTH_EXCEEDED, message="too long", param="messages"),
    p.Cancel(request_id="r1"),
    p.StatusQuery(),
    p.Status(workers=2, idle_workers=1, queued=0, running=1),
    p.Status(workers=1, idle_workers=0, queued=0, running=1, worker_states=[
        p.WorkerState("w-0 (pid 7)", busy=True, served=3, held_chars=4096, held_prefix="a1b2c3d4e5f6"),
    ]),
    p.Status(workers=1, idle_workers=1, queued=0, running=0, worker_states=[
        p.WorkerState("w-0 (pid 7)", busy=False, served=0, fingerprint=b"\x01" * 32, draft_fingerprint=b""),
    ]),
    p.Status(workers=2, idle_workers=1, queued=0, running=1, full_prefills=3, reused_from_memory=2,
             reused_from_store=1, affinity_waits=4),
    p.Threads(threads=2),
    p.CacheLookup(request_id="c1", fingerprint="ab12", blocks=[b"\x00" * 16, b"\xff" * 16]),
    p.CacheMiss(request_id="c1"),
    p.CacheHit(request_id="c1", key="ff" * 16, header=b"REAMEKV\0...", matched_tokens=128),
    p.CacheChunk(request_id="c1", data=bytes(range(256)), last=True),
    p.CachePut(request_id="c2", fingerprint="ab12", kv_type="f16", tokens=[1, 2, 3], raw_len=99),
    p.CacheStored(request_id="c2", stored=False, reason="too_big"),
    p.CacheCorrupt(key="ff" * 16, reason="payload checksum mismatch"),
    p.CacheAdmin(request_id="a1", command=p.CacheCommand.VERIFY),
    p.CacheReport(request_id="a1", entries=3, bytes=10, max_bytes=20, hits=1, misses=2, evictions=0,
                  corrupt=1, bytes_read=5, bytes_written=6, removed=["ff" * 16]),
    p.AnswerLookup(request_id="q1", key="ab" * 32),
    p.AnswerFound(request_id="q1", data=b"\x92\xc4\x01a"),
    p.AnswerPut(request_id="q2", key="ab" * 32, data=b"\x90"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(message: p.Message) -> None:
    assert p.decode(p.encode(message)) == message


def test_every_kind_has_a_round_trip_case() -> None:
    assert {m.KIND for m in MESSAGES} == set(p.Kind)


def _payload(version: object, kind: object, body: object) -> bytes:
    packed: bytes = msgpack.packb([version, kind, body])
    return packed


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb({"a": 1}), "array"),
        (_payload(99, int(p.Kind.CANCEL), {"request_id": "x"}), "version"),
        (_payload(p.PROTOCOL_VERSION, 200, {}), "unknown message kind"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.CANCEL), {}), "Cancel: Object missing required field `request_id`"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.CANCEL), {"request_id": 5}),
         r"Expected `str`, got `int` - at `\$.request_id`"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.CANCEL), {"request_id": "x", "evil": 1}), "unknown field `evil`"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.CANCEL), ["x"]), "Expected `object`, got `array`"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.DELTA), {"request_id": "x", "text": "t", "tokens": True}),
         "Expected `int`, got `bool`"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.ERROR), {"request_id": "x", "code": "nope", "message": ""}),
         "Invalid enum value 'nope'"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.GENERATE),
                  {"request_id": "x", "deadline": 1.0, "sampling": {"logit_bias": [[1]]}}),
         "Expected `array` of length 2, got 1"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.GENERATE),
                  {"request_id": "x", "deadline": "soon", "sampling": {}}), "Expected `float`, got `str`"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.GENERATE),
                  {"request_id": "x", "deadline": 1.0, "sampling": {}, "speculative": "fast"}),
         "Invalid enum value 'fast'"),
        (_payload(p.PROTOCOL_VERSION, int(p.Kind.CACHE_CHUNK), {"request_id": "x", "data": "text", "last": True}),
         "Expected `bytes`, got `str`"),
    ],
)
def test_bad_payloads_are_protocol_errors(payload: bytes, fragment: str) -> None:
    with pytest.raises(p.ProtocolError, match=fragment):
        p.decode(payload)


def test_int_is_accepted_where_a_float_is_expected() -> None:
    payload = _payload(p.PROTOCOL_VERSION, int(p.Kind.GENERATE),
                       {"request_id": "x", "deadline": 3, "sampling": {"temperature": 0}})
    message = p.decode(payload)
    assert isinstance(message, p.Generate)
    assert message.deadline == 3.0 and isinstance(message.deadline, float)
    assert message.sampling.temperature == 0.0


def test_the_bytes_are_the_plain_msgpack_of_the_fields() -> None:
    # The wire is [version, kind, {field: value}] in declaration order, as before msgspec.
    message = p.Generate(request_id="r1", sampling=SAMPLING, deadline=1.5, prompt="hi",
                         speculative=SpeculativeMode.LOOKUP)
    sampling = {
        "temperature": 0.0, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "seed": 7, "max_tokens": 12,
        "stop": ["\n", "END"], "presence_penalty": 0.5, "frequency_penalty": -0.5, "repeat_penalty": 1.1,
        "repeat_last_n": 32, "logit_bias": [[42, -100.0], [7, 2.5]],
    }
    body = {"request_id": "r1", "sampling": sampling, "deadline": 1.5, "prompt": "hi", "messages": None,
            "cache": True, "warm": False, "speculative": "lookup", "cache_scope": "", "grammar": None,
            "logprobs": None, "background": False, "tools": None, "chunks": False}
    assert p.encode(message) == _payload(p.PROTOCOL_VERSION, int(p.Kind.GENERATE), body)


def test_sampling_defaults_are_the_configured_ones() -> None:
    defaults = config.load(None, environ={}).sampling
    sent = p.SamplingParams()
    assert (sent.temperature, sent.top_p, sent.top_k, sent.min_p, sent.repeat_penalty, sent.repeat_last_n) == (
        defaults.temperature, defaults.top_p, defaults.top_k, defaults.min_p, defaults.repeat_penalty,
        defaults.repeat_last_n,
    )
