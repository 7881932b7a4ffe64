"""Server-sent events framing for streamed completions, as OpenAI sends them."""

from __future__ import annotations

from typing import Any, Final

from reame.gateway.api.responses import dumps
from reame.gateway.http.errors import APIError

CONTENT_TYPE: Final = "text/event-stream"
DONE: Final = b"data: [DONE]\n\n"


def event(payload: Any) -> bytes:
    """Frame one JSON payload as an SSE ``data:`` event.

    The JSON is on one line (``json.dumps`` escapes newlines inside strings), so a
    single ``data:`` field is always enough.
    """
    return b"data: " + dumps(payload) + b"\n\n"


def error_event(error: APIError) -> bytes:
    """Frame an error that happened after the stream started (the status is already sent)."""
    return event({"error": error.to_dict()})
