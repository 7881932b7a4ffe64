"""A streamed chat answer with ``n`` > 1 choices (gateway.api.choices): each choice's chunks in turn.

OpenAI interleaves the choices of a stream; reame generates them one after the
other (the later ones reuse the prompt's KV state), so all of choice 0's chunks come
first, then choice 1's, each with its ``index``, as clients that assemble choices by
index expect. ``usage`` counts the prompt once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from reame.gateway.api import responses
from reame.gateway.api.choices import choice_usage
from reame.gateway.api.logprobs import choice_logprobs
from reame.gateway.api.streams import ChatStream, Meta, next_message
from reame.gateway.http import sse
from reame.gateway.http.requestlog import RequestLog
from reame.gateway.upstream.client import Call
from reame.shared.protocol import Delta, Done


class ChoicesStream(ChatStream):
    """``chat.completion.chunk`` events for ``n`` choices, one after the other."""

    def __init__(
        self, call: Call, first: Delta | Done, meta: Meta, record: RequestLog, n: int, open_call: Callable[[int], Call]
    ) -> None:
        self._n = n
        self._open_call = open_call
        super().__init__(call, first, meta, record)

    def _body(self, first: Delta | Done) -> Iterator[bytes]:
        m = self.meta
        call = self._call
        for index in range(self._n):
            if index > 0:
                call.close()
                call = self._call = self._open_call(index)
                first = next_message(call, self._record)
            yield self._event(index, {"role": "assistant", "content": ""})
            message = first
            while isinstance(message, Delta):
                if message.text:
                    entries = message.logprobs if m.logprobs else None
                    yield self._event(index, {"content": message.text}, None, choice_logprobs(entries))
                message = next_message(call, self._record)
            self._usage += choice_usage(message, call.saved_tokens, index, call.compression)
            yield self._event(index, {}, message.finish_reason.value)
        if m.include_usage:
            yield sse.event(
                responses.usage_chunk("chat.completion.chunk", m.response_id, m.created, m.model, self._usage)
            )

    def _event(
        self, index: int, delta: dict[str, Any], finish_reason: str | None = None, logprobs: Any = None
    ) -> bytes:
        m = self.meta
        chunk = responses.chat_chunk(m.response_id, m.created, m.model, delta, finish_reason, m.include_usage, logprobs)
        chunk["choices"][0]["index"] = index
        return sse.event(chunk)
