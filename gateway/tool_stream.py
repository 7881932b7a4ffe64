"""A streamed chat answer that may be a tool call (gateway.tools).

Whether a reply calls a function is known only once its JSON is complete, so the
Deltas are read to the end first; a call is then streamed as OpenAI streams one (a
chunk with the call's index, id, type and name, then one with its arguments), and
plain text as one content chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from reame.gateway import responses, sse
from reame.gateway.client import Call
from reame.gateway.requestlog import RequestLog
from reame.gateway.responses import Usage
from reame.gateway.streams import ChatStream, Meta, next_message
from reame.gateway.tools import Tools, parse_call
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
        calls = parse_call(text, self._tools) if message.finish_reason == FinishReason.STOP else None
        if calls is None:
            yield self._event({"role": "assistant", "content": text})
            yield self._event({}, message.finish_reason.value)
        elif self._tools.legacy:  # `functions` asked: the legacy function_call delta
            yield self._event({"role": "assistant", "content": None})
            function = calls[0]["function"]
            yield self._event({"function_call": {"name": function["name"], "arguments": ""}})
            yield self._event({"function_call": {"arguments": function["arguments"]}})
            yield self._event({}, "function_call")
        else:
            yield self._event({"role": "assistant", "content": None})
            for index, call in enumerate(calls):
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
