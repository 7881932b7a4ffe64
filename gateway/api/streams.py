"""Streamed response bodies: SSE events produced as the dispatcher's Deltas arrive.

A stream is the WSGI response iterable itself (Falcon hands ``resp.stream`` to
gunicorn unchanged), so gunicorn writes each event as soon as it is produced and
calls :meth:`SSEStream.close` when the client hangs up; closing cancels the call
still running. Errors after the 200 went out become an ``{"error": ...}`` event,
then ``[DONE]``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Generator, Iterator
from typing import Final

from reame.gateway.api import responses
from reame.gateway.api.choices import choice_usage
from reame.gateway.api.logprobs import choice_logprobs, legacy
from reame.gateway.api.responses import Usage
from reame.gateway.http import errors, sse
from reame.gateway.http.errors import APIError
from reame.gateway.http.requestlog import RequestLog
from reame.gateway.upstream.client import Call, ClientGone
from reame.shared.protocol import Delta, Done, TokenLogprob

log = logging.getLogger(__name__)

# nginx's "client closed request", for the log line of a request nobody waits for.
CLIENT_GONE_STATUS: Final = 499


@dataclasses.dataclass(frozen=True)
class Meta:
    """What every chunk of one response repeats."""

    response_id: str
    created: int
    model: str
    include_usage: bool
    logprobs: bool = False  # chat: each content chunk carries its tokens' logprobs


def next_message(call: Call, record: RequestLog) -> Delta | Done:
    """Read the call's next message, accounting for it in the request log."""
    message = call.next()
    record.observe(message)
    return message


def collect(
    call: Call, first: Delta | Done, record: RequestLog, logprobs: list[TokenLogprob] | None = None
) -> tuple[str, Done]:
    """Read a call to its end: the whole text and the Done (and each token's logprobs into ``logprobs``)."""
    parts = []
    message = first
    while isinstance(message, Delta):
        parts.append(message.text)
        if logprobs is not None:
            logprobs.extend(message.logprobs)
        message = next_message(call, record)
    return "".join(parts), message


class SSEStream:
    """An SSE response body over one or more calls; iterate it, then close it."""

    def __init__(self, call: Call, first: Delta | Done, meta: Meta, record: RequestLog) -> None:
        self.meta = meta
        self._call = call
        self._record = record
        self._usage = Usage()
        self._finished = False
        self._delta: Delta | None = None
        self._events = self._run(first)

    def __iter__(self) -> SSEStream:
        return self

    def __next__(self) -> bytes:
        return next(self._events)

    def close(self) -> None:
        """Stop: cancel the call still running (the client is gone) and write the log line.

        A client gone mid-stream is logged (and counted) as 499, as one gone before
        its answer was sent: the 200 status line reached nobody who read the answer.
        """
        finished = self._finished
        if not finished:
            self._record.error = self._record.error or "client_gone"
        try:
            self._events.close()
        finally:
            self._close(200 if finished else CLIENT_GONE_STATUS)

    def _close(self, status: int) -> None:
        self._call.close()
        self._record.emit(status)

    def _run(self, first: Delta | Done) -> Generator[bytes, None, None]:
        try:
            yield from self._body(first)
        except ClientGone:
            self._record.error = "client_gone"
            self._finished = True
            self._close(CLIENT_GONE_STATUS)  # nobody to send the rest to
            return
        except APIError as err:
            self._record.fail(err)
            yield sse.error_event(err)
        except Exception:
            log.exception("bug while streaming %s", self.meta.response_id)
            bug = errors.internal()
            self._record.fail(bug)
            yield sse.error_event(bug)
        yield sse.DONE
        self._finished = True
        self._close(200)

    def _body(self, first: Delta | Done) -> Iterator[bytes]:
        """Yield the events of a complete answer (subclasses say which)."""
        raise NotImplementedError

    def _relay(
        self, call: Call, first: Delta | Done, chunk: Callable[[str], bytes], choice: int = 0
    ) -> Generator[bytes, None, Done]:
        """Yield one chunk per Delta with text; return the Done (``choice`` > 0: a prompt's later choice)."""
        self._call = call
        message = first
        while isinstance(message, Delta):
            if message.text:
                self._delta = message  # for a chunk that also carries the Delta's logprobs
                yield chunk(message.text)
            message = next_message(call, self._record)
        self._usage += choice_usage(message, call.saved_tokens, choice, call.compression)
        return message


class ChatStream(SSEStream):
    """``chat.completion.chunk`` events: role, content deltas, finish reason, usage."""

    def _body(self, first: Delta | Done) -> Iterator[bytes]:
        m = self.meta
        yield self._chunk({"role": "assistant", "content": ""})
        done = yield from self._relay(self._call, first, lambda text: self._chunk({"content": text}, logprobs=True))
        yield self._chunk({}, done.finish_reason.value)
        if m.include_usage:
            yield sse.event(
                responses.usage_chunk("chat.completion.chunk", m.response_id, m.created, m.model, self._usage)
            )

    def _chunk(self, delta: dict[str, str], finish_reason: str | None = None, logprobs: bool = False) -> bytes:
        m = self.meta
        entries = self._delta.logprobs if logprobs and m.logprobs and self._delta is not None else None
        return sse.event(responses.chat_chunk(
            m.response_id, m.created, m.model, delta, finish_reason, m.include_usage, choice_logprobs(entries)
        ))


class CompletionStream(SSEStream):
    """``text_completion`` events for one or more prompts, ``n`` choices each, in turn.

    ``prompts`` has each prompt ``n`` times over, so its index is the choice's index.
    """

    def __init__(
        self,
        call: Call,
        first: Delta | Done,
        meta: Meta,
        record: RequestLog,
        prompts: list[str],
        echo: bool,
        open_call: Callable[[int], Call],
        n: int = 1,
    ) -> None:
        self._prompts = prompts
        self._n = n
        self._echo = echo
        self._open_call = open_call
        self._offset = 0  # text_offset of the current choice's next token
        super().__init__(call, first, meta, record)

    def _body(self, first: Delta | Done) -> Iterator[bytes]:
        m = self.meta
        call = self._call
        for index, prompt in enumerate(self._prompts):
            if index > 0:
                call.close()
                call = self._open_call(index)
                self._call = call
                first = next_message(call, self._record)
            self._offset = 0  # text_offset of the choice's next token
            if self._echo and prompt:
                yield self._chunk(index, prompt)
            done = yield from self._relay(call, first, functools.partial(self._chunk, index), index % self._n)
            yield self._chunk(index, "", done.finish_reason.value)
        if m.include_usage:
            yield sse.event(responses.usage_chunk("text_completion", m.response_id, m.created, m.model, self._usage))

    def _chunk(self, index: int, text: str, finish_reason: str | None = None) -> bytes:
        m = self.meta
        logprobs = None
        if m.logprobs and text and self._delta is not None:  # echo is refused with logprobs
            logprobs = legacy(self._delta.logprobs, self._offset)
            self._offset += len(text)
        return sse.event(responses.text_chunk(
            m.response_id, m.created, m.model, index, text, finish_reason, m.include_usage, logprobs
        ))
