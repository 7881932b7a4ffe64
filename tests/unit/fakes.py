"""Fakes shared by several unit test modules: a dispatcher, a model's logits, a KV cache.

Fixtures built on them live in conftest.py; test modules import classes from here, never
from one another.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import falcon
import numpy as np
import numpy.typing as npt
import zmq

from reame.gateway.app import create_app
from reame.gateway.upstream.client import Dispatcher
from reame.shared import config, protocol
from reame.shared.kv_entry import EntryHeader, encode_payload
from reame.shared.protocol import Delta, Done, Error, ErrorCode, FinishReason, Heartbeat
from reame.worker.cache_client import Fetched
from reame.worker.model import DecodeError

# ---- a dispatcher for the gateway's DEALERs ---------------------------------------------

RETRY_AFTER = "7"
MAX_BODY = 2048
CONFIG = config.load(
    environ={
        "REAME_MODEL_ALIAS": "test-model",
        "REAME_SERVER_RETRY_AFTER": RETRY_AFTER,
        "REAME_SERVER_MAX_BODY_BYTES": str(MAX_BODY),
    }
)
WAIT_S = 30.0  # upper bound for things that should happen at once; generous for a busy machine
# How long the gateway waits for the fake before calling it dead: the fake always answers or
# heartbeats (every 20 ms), so this is only an upper bound for a busy machine.
LIVENESS_S = 10.0


class FakeDispatcher:
    """A ROUTER socket that plays the dispatcher for the gateway's DEALERs."""

    def __init__(self, context: zmq.Context[Any], workers: int = 1) -> None:
        self.context = context
        self.address = f"inproc://fake-dispatcher-{uuid.uuid4().hex}"
        self.workers = workers
        self.received: list[protocol.Message] = []
        self.cancelled = threading.Event()
        self.prefix_read = False  # StatusQuery.prefix: say that all of it is read (gateway.api.plan)
        self._held: dict[str, bytes] = {}  # request id -> identity, heartbeated until cancelled
        self._stop = threading.Event()
        self._socket = context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(self.address)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        self._socket.close(linger=0)

    def generates(self) -> list[protocol.Generate]:
        return [m for m in self.received if isinstance(m, protocol.Generate)]

    @staticmethod
    def script(request: protocol.Generate) -> tuple[list[protocol.Message | bytes], bool]:
        """Return the replies to send, and whether to hold the request open afterwards."""
        rid = request.request_id
        text = request.prompt if request.prompt is not None else (request.messages or [])[-1].content
        done = Done(rid, FinishReason.STOP, prompt_tokens=5, completion_tokens=2, cached_tokens=1)
        if text == "overloaded":
            return [Error(rid, ErrorCode.OVERLOADED, "queue full")], False
        if text == "too long":
            return [Error(rid, ErrorCode.CONTEXT_LENGTH_EXCEEDED, "4097 tokens > 4096", "messages")], False
        if text == "late error":
            return [Delta(rid, "x", 1), Error(rid, ErrorCode.WORKER_LOST, "worker died")], False
        if text == "hold":
            return [Delta(rid, "tick", 1)], True
        if text == "silent":
            return [], False
        if text == "queued":
            return [Heartbeat(), b"not msgpack", Delta("someone-else", "?", 1), Heartbeat(),
                    Delta(rid, "ok", 1), done], False
        if text == "empty":
            return [Done(rid, FinishReason.LENGTH, 3, 0)], False
        if text.startswith("p"):  # completion prompts p0, p1...: answer naming the prompt
            return [Delta(rid, f"<{text}>", 1), Done(rid, FinishReason.LENGTH, 1, 1)], False
        return [Delta(rid, "Hel", 1), Delta(rid, "", 0), Delta(rid, "lo", 1), done], False

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._socket.poll(20):
                for identity in self._held.values():
                    self._socket.send_multipart([identity, protocol.encode(Heartbeat())])
                continue
            identity, payload = self._socket.recv_multipart()
            message = protocol.decode(payload)
            self.received.append(message)
            if isinstance(message, protocol.Generate):
                replies, hold = self.script(message)
                for reply in replies:
                    frame = reply if isinstance(reply, bytes) else protocol.encode(reply)
                    self._socket.send_multipart([identity, frame])
                if hold:
                    self._held[message.request_id] = identity
            elif isinstance(message, protocol.Cancel):
                self._held.pop(message.request_id, None)
                self.cancelled.set()
            elif isinstance(message, protocol.StatusQuery):
                read = message.prefix[-1][1] if message.prefix and self.prefix_read else 0
                status = protocol.Status(
                    workers=self.workers, idle_workers=self.workers, queued=0, running=0, prefix_chars=read
                )
                self._socket.send_multipart([identity, protocol.encode(status)])


def make_app(fake: FakeDispatcher, liveness_s: float = LIVENESS_S) -> falcon.App[falcon.Request, falcon.Response]:
    return create_app(CONFIG, Dispatcher(fake.address, liveness_s=liveness_s, context=fake.context))


def chat_body(content: str = "hello", **fields: Any) -> dict[str, Any]:
    return {"model": "whatever", "messages": [{"role": "user", "content": content}], **fields}


# ---- a target model over a tiny vocabulary, and its KV cache -----------------------------

VOCAB = 12
EOG = 11
ALPHABET = "abcdefghij "  # token i prints as ALPHABET[i]; EOG prints nothing
Logits = npt.NDArray[np.float32]
ModelFn = Callable[[Sequence[int]], Logits]


def fake_model(seed: int = 0, copy_bias: float = 4.0, eog_bias: float = -3.0) -> ModelFn:
    """Return deterministic logits of the next token given the whole history."""

    def logits(history: Sequence[int]) -> Logits:
        rng = np.random.default_rng([seed, *history[-2:]])
        values = rng.normal(0.0, 2.0, VOCAB)
        tail = tuple(history[-2:])
        for i in range(len(history) - 3, 0, -1):  # the latest earlier occurrence of the tail
            if tuple(history[i - 1 : i + 1]) == tail:
                values[history[i + 1]] += copy_bias
                break
        values[EOG] += eog_bias
        return values.astype(np.float32)

    return logits


class FakeKv:
    """A KV cache over a fake model: rows of logits for the last batch, a token list."""

    def __init__(self, model: ModelFn) -> None:
        self.model = model
        self._tokens: list[int] = []
        self._rows: list[Logits] = []
        self.decodes: list[int] = []  # batch sizes, in order

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self._tokens)

    def append(self, tokens: Sequence[int], logits_last: bool) -> None:
        self._tokens.extend(tokens)
        self.decodes.append(len(tokens))
        self._rows = [self.model(self._tokens)] if logits_last else []

    def evaluate(self, tokens: Sequence[int]) -> None:
        start = len(self._tokens)
        self._tokens.extend(tokens)
        self.decodes.append(len(tokens))
        self._rows = [self.model(self._tokens[: start + i + 1]) for i in range(len(tokens))]

    def logits(self, index: int) -> Logits:
        return self._rows[index]

    def truncate(self, length: int) -> bool:
        del self._tokens[length:]
        return True

    def reset(self) -> None:
        self._tokens.clear()


# ---- the calls worker.kv.KvCache makes on a Model --------------------------------------


class FakeModel:
    """Records the calls KvCache makes; decode can be told to fail."""

    def __init__(self, can_truncate: bool = True) -> None:
        self.can_truncate = can_truncate
        self.calls: list[tuple[object, ...]] = []
        self.fail = False
        self.held = 0  # positions in the fake KV cache
        self.alone = False  # its first positions were dropped: it holds a chunk read alone

    def decode(self, tokens: Sequence[int], start: int, logits_last: bool) -> None:
        self.calls.append(("decode", tuple(tokens), start, logits_last))
        if self.fail:
            raise DecodeError("boom")
        self.held = start + len(tokens)

    def truncate(self, length: int) -> bool:
        self.calls.append(("truncate", length))
        if self.can_truncate:
            self.held = min(self.held, length)
        return self.can_truncate

    def clear(self) -> None:
        self.calls.append(("clear",))
        self.held = 0
        self.alone = False

    # A fake state is b"state:<positions>", or b"chunk:<n>" for a chunk of n tokens read
    # alone; anything else is refused, as llama.cpp would.
    def save_state(self) -> bytearray:
        return bytearray(b"%s:%d" % (b"chunk" if self.alone else b"state", self.held))

    def restore_state(self, state: bytes | bytearray) -> bool:
        self.calls.append(("restore", bytes(state)))
        if not state.startswith(b"state:"):
            self.held = 3  # a failed restore may leave part of the state behind
            return False
        self.held = int(state[6:])
        self.alone = False
        return True

    def positions(self) -> int:
        return self.held

    def drop(self, start: int, end: int) -> bool:
        self.calls.append(("drop", start, end))
        self.alone = self.alone or start == 0
        return self.can_truncate

    # A fake chunk state is b"chunk:<n>": a chunk of n tokens read alone (worker.kv.KvCache.place).
    def place(self, state: bytes | bytearray, delta: int) -> bool:
        self.calls.append(("place", bytes(state), delta))
        if not state.startswith(b"chunk:"):
            return False
        self.held = delta + int(state[6:])
        return True


# ---- the cachekeeper as worker.prefix_cache.CacheService sees it ---------------------------

FINGERPRINT = b"f" * 32
BLOCK = 4


class FakeService:
    """Keeps one entry per token list; records what the prefix cache asks of it."""

    def __init__(self) -> None:
        self.available = True
        self.entries: dict[tuple[int, ...], tuple[EntryHeader, bytes]] = {}
        self.lookups = 0
        self.corrupt: list[str] = []
        self.saved: list[tuple[list[int], bytes, bool]] = []  # tokens, state, waited
        self.saved_under: list[bytes | None] = []  # the fingerprint of each save
        self.accept = True
        self.pending: list[Callable[[bool], None]] = []  # done callbacks of queued saves

    def finish_saves(self, stored: bool) -> None:
        """Answer the queued saves as the uploader thread would."""
        pending, self.pending = self.pending, []
        for done in pending:
            done(stored)

    def put(
        self, tokens: Sequence[int], state: bytes, kv_type: str = "f16", fingerprint: bytes = FINGERPRINT
    ) -> EntryHeader:
        header = EntryHeader.build(fingerprint, kv_type, tokens, BLOCK, encode_payload(state), 0.0)
        self.entries[tuple(tokens)] = (header, state)
        return header

    def lookup(
        self, fingerprint: bytes, blocks: Sequence[bytes], wanted: Callable[[EntryHeader], bool] | None = None
    ) -> Fetched | None:
        self.lookups += 1
        best = max(
            # As the cachekeeper's index does: only entries filed under this fingerprint.
            (e for e in self.entries.values() if e[0].fingerprint == fingerprint.hex()),
            key=lambda e: sum(1 for a, b in zip(e[0].blocks, blocks, strict=False) if a == b),
            default=None,
        )
        if best is None or not blocks or best[0].blocks[0] != blocks[0]:
            return None
        header, state = best
        if wanted is not None and not wanted(header):
            return None
        return Fetched(header.key(), header, state, 0.0, 0.0, 0.0)

    def report_corrupt(self, key: str, reason: str) -> None:
        self.corrupt.append(key)

    def save(
        self, tokens: Sequence[int], state: bytes | bytearray, done: Callable[[bool], None] | None = None,
        wait: float = 0.0, fingerprint: bytes | None = None,
    ) -> bool:
        self.saved.append((list(tokens), bytes(state), False))
        self.saved_under.append(fingerprint)
        if self.accept and done is not None:
            self.pending.append(done)
        return self.accept

    def save_and_wait(
        self, tokens: Sequence[int], state: bytes | bytearray, fingerprint: bytes | None = None
    ) -> bool:
        self.saved.append((list(tokens), bytes(state), True))
        self.saved_under.append(fingerprint)
        return self.accept
