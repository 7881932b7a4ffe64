"""The answer cache, gateway side: a deterministic request asked before is answered from the store.

Why the gateway and not the worker or the dispatcher: a hit must never occupy a
worker nor wait in the dispatcher's queue, and the gateway is where the request is
complete (compressed, scoped, validated) and where its reply is read anyway. So
before a Generate goes to the dispatcher, :meth:`AnswerCache.open` asks the
cachekeeper (one AnswerLookup, a short timeout; silence is a miss); a hit becomes a
:class:`ReplayCall` that hands the stored Deltas and Done to the very same
response code (JSON body, SSE chunks, tool calls, logprobs), so a replay has the
shape of the original. On a miss the real call records what the worker sends and,
at its Done, sends the whole answer to the cachekeeper (AnswerPut, not awaited).

Eligible: temperature 0, or a seed (any temperature), not a warm request, and
neither ``reame.answer_cache`` nor ``reame.cache`` false. The key hashes the model
(the fingerprints its workers report, through the dispatcher's Status, and the
configuration that can change the text: context, batch, KV type, speculative
settings, threads), the
cache scope (the API key's under ``per_key``, and the salt), the prompt or messages
*after* compression (with the model and its chat template, that text determines the
prompt tokens), the sampling parameters (seed, stop, max_tokens, logit_bias,
penalties...), the grammar (response_format, tools), the tools the template lists and logprobs.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Final

import msgspec

from reame.gateway.upstream.client import Call
from reame.shared import protocol
from reame.shared.config import Config
from reame.shared.protocol import Delta, Done, Generate, SamplingParams
from reame.shared.upstream import Upstream

log = logging.getLogger(__name__)

HIT: Final = "hit"
MISS: Final = "miss"
# How long a lookup may delay a request when the cachekeeper is slow: a hit answers
# in a few milliseconds, and a miss still has a whole generation ahead of it.
LOOKUP_TIMEOUT_S: Final = 0.25
# A recorded answer may still be on its way when the call's socket closes.
PUT_LINGER_MS: Final = 1000
_PERSON: Final = b"reame-answer"

Reply = list[Delta | Done]


def eligible(request: Generate, answer_cache: bool = True) -> bool:
    """Tell whether ``request``'s output is fully determined and may be cached."""
    sampling = request.sampling
    deterministic = sampling.temperature == 0 or sampling.seed is not None
    return deterministic and answer_cache and request.cache and not request.warm


def model_identity(config: Config, status: protocol.Status | None) -> bytes | None:
    """Hash what about the model and the configuration can change a reply's text; None while it is unknown.

    The model is named by the fingerprints its workers announced (Ready.fingerprint and
    draft_fingerprint, which the dispatcher reports in ``status``): the gateway loads no
    model. None when the dispatcher did not answer, no worker is attached, or the workers
    disagree (another model file while they restart): then nothing is looked up or stored.
    """
    prints = {(w.fingerprint, w.draft_fingerprint) for w in status.worker_states} if status is not None else set()
    if len(prints) != 1:
        return None
    fingerprint, draft_fingerprint = prints.pop()
    if not fingerprint:
        return None
    h = hashlib.blake2b(digest_size=32, person=_PERSON)
    h.update(fingerprint)
    if draft_fingerprint:  # the draft model picks the draft lengths, which can tip a near tie
        h.update(draft_fingerprint)
    m, s = config.model, config.speculative
    settings = (m.n_ctx, m.n_batch, m.special_tokens_in_prompt, config.memory.kv_type, config.workers.threads,
                s.mode.value, s.draft_min, s.draft_max)
    h.update(msgspec.msgpack.encode(settings))
    return h.digest()


def answer_key(identity: bytes, request: Generate) -> str:
    """Return the answer key of an eligible request (64 hex digits)."""
    # Through the builtins and back: a float field given as an int (temperature 0)
    # becomes the float the same request sent as 0.0 has.
    sampling = msgspec.convert(msgspec.to_builtins(request.sampling), SamplingParams)
    fields = (
        protocol.PROTOCOL_VERSION, identity, request.cache_scope, request.prompt, request.messages, sampling,
        request.grammar, request.logprobs, None if request.speculative is None else request.speculative.value,
        request.tools,  # the template lists them: they are part of the prompt
        request.chunks,  # a prompt read in chunks is another KV state (worker.chunk_plan)
    )
    return hashlib.blake2b(msgspec.msgpack.encode(fields), digest_size=32, person=_PERSON).hexdigest()


def encode_reply(reply: Reply) -> bytes:
    """Return the stored form of a reply: the msgpack list of its encoded messages."""
    return msgspec.msgpack.encode([protocol.encode(message) for message in reply])


def decode_reply(data: bytes, request_id: str) -> Reply | None:
    """Return a stored reply as ``request_id``'s messages, its Done marked a hit; None if unusable."""
    try:
        messages = [protocol.decode(item) for item in msgspec.msgpack.decode(data, type=list[bytes])]
    except (msgspec.MsgspecError, protocol.ProtocolError) as err:
        log.warning("ignoring a stored answer: %s", err)
        return None
    done = messages[-1] if messages else None
    deltas = messages[:-1]
    if not isinstance(done, Done) or not all(isinstance(d, Delta) for d in deltas):
        log.warning("ignoring a stored answer: not Deltas then a Done")
        return None
    reply: Reply = [msgspec.structs.replace(d, request_id=request_id) for d in deltas if isinstance(d, Delta)]
    # Nothing was read, queued or decoded for it: every prompt token came from the cache.
    reply.append(msgspec.structs.replace(
        done, request_id=request_id, cached_tokens=done.prompt_tokens, restored_tokens=0, prompt_ms=0.0,
        generation_ms=0.0, queue_ms=0.0, draft_tokens=0, accepted_draft_tokens=0, answer_cache=HIT,
    ))
    return reply


class ReplayCall(Call):
    """A stored reply served as a Call: no socket, no worker, the same messages in the same order."""

    def __init__(self, request: Generate, reply: Reply) -> None:  # no super(): there is no socket
        self.request = request
        self.finished = False
        self.saved_tokens = 0
        self.compression = ""
        self.observer = None
        self._reply = list(reply)

    def next(self) -> Delta | Done:
        if self.finished:
            raise RuntimeError("next() on a finished call")
        message = self._reply.pop(0)
        self.finished = isinstance(message, Done)
        return message

    def close(self) -> None:
        self.finished = True


class AnswerCache:
    """Look answers up at the cachekeeper and store new ones; one per gateway process."""

    def __init__(
        self, config: Config, address: str | None, upstream: Upstream, *,
        identity: Callable[[Config], bytes | None],  # model_identity, with the dispatcher's Status
    ) -> None:
        # None: off (cache.answers or cache.enabled false, or no cachekeeper at all)
        self.address = address if config.cache.answers else None
        self._config = config
        self._upstream = upstream  # the gateway's round trips, a socket of its own per question
        self._identity_of = identity
        self._identity: bytes | None = None
        self._lock = threading.Lock()
        self.timeout_s = min(LOOKUP_TIMEOUT_S, config.cache.timeout)

    def open(self, request: Generate, key: str | None, dispatch: Callable[[], Call]) -> Call:
        """Return a replay of the answer stored under ``key`` (gateway.api.plan), else ``dispatch()`` recording it."""
        if key is None or self.address is None:
            return dispatch()
        reply = self.lookup(key, request.request_id)
        if reply is not None:
            return ReplayCall(request, reply)
        call = dispatch()
        recorded: Reply = []

        def record(message: Delta | Done) -> Delta | Done:
            recorded.append(message)
            if isinstance(message, Done):
                self.save(key, recorded)
                return msgspec.structs.replace(message, answer_cache=MISS)
            return message

        call.observer = record
        return call

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def key(self, request: Generate, answer_cache: bool = True) -> str | None:
        """The request's answer key; None when the cache is off or the request not eligible."""
        if self.address is None or not eligible(request, answer_cache):
            return None
        identity = self.identity()
        return None if identity is None else answer_key(identity, request)

    def identity(self, status: protocol.Status | None = None) -> bytes | None:
        """The model's identity, from ``status`` when the request's plan asked one, else asked for; then kept.

        It is asked for (a StatusQuery) until a worker reported its fingerprint.
        """
        with self._lock:
            if self._identity is None and self.address is not None:
                self._identity = (self._identity_of(self._config) if status is None
                                  else model_identity(self._config, status))
                if self._identity is None:
                    log.debug("no answer cache for this request: the workers' model fingerprint is not known yet")
            return self._identity

    def lookup(self, key: str, request_id: str) -> Reply | None:
        """Ask the cachekeeper for ``key``'s answer; None on a miss, a bad answer or silence."""
        address = self.address
        if address is None:
            return None
        lookup_id = f"answer-{secrets.token_hex(4)}"

        def answered(message: protocol.Message) -> protocol.AnswerFound | protocol.CacheMiss | None:
            if isinstance(message, (protocol.AnswerFound, protocol.CacheMiss)) and message.request_id == lookup_id:
                return message
            return None

        # skip_absent: no cachekeeper listens without its socket file: a miss without waiting
        found = self._upstream.ask(
            address, protocol.AnswerLookup(lookup_id, key), answered, self.timeout_s, skip_absent=True
        )
        return decode_reply(found.data, request_id) if isinstance(found, protocol.AnswerFound) else None

    def save(self, key: str, reply: Reply) -> None:
        """Send a finished answer to the cachekeeper; nobody waits for it to be stored."""
        address = self.address
        if address is None:
            return
        put = protocol.AnswerPut(f"answer-{secrets.token_hex(4)}", key, encode_reply(reply))
        self._upstream.tell(address, put, linger_ms=PUT_LINGER_MS, skip_absent=True)
