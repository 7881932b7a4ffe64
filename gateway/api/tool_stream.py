"""A streamed chat answer that may call functions (gateway.api.tools).

Whether a reply calls functions is known only once its calls are complete, so the
Deltas are read to the end first; each call is then streamed as OpenAI streams one (a
chunk with the call's index, id, type and name, then one with its arguments), after
the text the reply began with, if any; plain text is one content chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from reame.gateway.api import responses
from reame.gateway.api.responses import Usage
from reame.gateway.api.streams import ChatStream, Meta, next_message
from reame.gateway.api.tool_calls import parse_reply
from reame.gateway.api.tools import Tools
from reame.gateway.http import sse
from reame.gateway.http.requestlog import RequestLog
from reame.gateway.upstream.client import Call
from reame.shared.protocol import Delta, Done, FinishReason


class ToolStream(ChatStream):
    """``chat.completion.chunk`` events for a request that offers tools."""

    def __init__(self, call: Call, first: Delta | Done, meta: Meta, record: RequestLog, tools: Tools) -> None:
        self._tools = tools
        super().__init__(call, first, meta, record)

    def _body(self, first: Delta | Done) -> Iterator[bytes]:
        m = self.meta
        parts = []
        message = first
        while isinstance(message, Delta):
            parts.append(message.text)
            message = next_message(self._call, self._record)
        self._usage += Usage.from_done(message, self._call.saved_tokens, self._call.compression)
        text = "".join(parts)
        t = self._tools
        reply = parse_reply(text, t.format, t.names) if message.finish_reason == FinishReason.STOP else None
        if reply is None:
            yield self._event({"role": "assistant", "content": text})
            yield self._event({}, message.finish_reason.value)
        elif t.legacy:  # `functions` asked: the legacy function_call delta
            yield self._event({"role": "assistant", "content": reply.content})
            function = reply.calls[0]["function"]
            yield self._event({"function_call": {"name": function["name"], "arguments": ""}})
            yield self._event({"function_call": {"arguments": function["arguments"]}})
            yield self._event({}, "function_call")
        else:
            yield self._event({"role": "assistant", "content": reply.content})
            for index, call in enumerate(reply.calls):
                function = call["function"]
                head = {"index": index, "id": call["id"], "type": "function",
                        "function": {"name": function["name"], "arguments": ""}}
                yield self._event({"tool_calls": [head]})
                yield self._event({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]})
            yield self._event({}, "tool_calls")
        if m.include_usage:
            yield sse.event(
                responses.usage_chunk("chat.completion.chunk", m.response_id, m.created, m.model, self._usage)
            )

    def _event(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        m = self.meta
        return sse.event(
            responses.chat_chunk(m.response_id, m.created, m.model, delta, finish_reason, m.include_usage)
        )
