"""The one error the gateway answers with, and the table from protocol error codes to HTTP.

Every error leaves the gateway in OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``; :class:`APIError` carries the
four fields plus the HTTP status and whether a ``Retry-After`` header goes with it.
Rendering (JSON body, SSE event, header value) is the caller's business.

Error types, chosen so that a client can tell "fix your request" from "try again":

- ``invalid_request_error``: 400, 404, 405, 413 (the client must change something);
- ``overloaded_error``: 429, the queue is full, retry after ``Retry-After`` seconds;
- ``unavailable_error``: 503, nothing can serve now, retry after ``Retry-After``;
- ``timeout_error``: 504, the request's deadline passed;
- ``server_error``: 500, a bug; never reached by client input.
"""

from __future__ import annotations

from typing import Final

from reame.shared import protocol
from reame.shared.protocol import ErrorCode

INVALID_REQUEST: Final = "invalid_request_error"
OVERLOADED: Final = "overloaded_error"
UNAVAILABLE: Final = "unavailable_error"
TIMEOUT: Final = "timeout_error"
SERVER_ERROR: Final = "server_error"


class APIError(Exception):
    """A failed request, as the client sees it."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
        retry: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        # Messages and params quote the client's text, which JSON allows to hold lone
        # surrogates ("\ud800" as an object key): those would make the error unencodable.
        self.message = _encodable(message)
        self.type = type
        self.param = None if param is None else _encodable(param)
        self.code = code
        self.retry = retry  # answer with a Retry-After header

    def to_dict(self) -> dict[str, str | None]:
        """Return the inner object of OpenAI's ``{"error": ...}`` body."""
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def __repr__(self) -> str:
        return f"APIError({self.status}, {self.message!r}, param={self.param!r}, code={self.code!r})"


# ErrorCode -> (HTTP status, error type, send Retry-After). CANCELLED normally reaches
# nobody (the client is gone); if a live client does get it, the dispatcher gave up on
# the request, so it is told to retry.
PROTOCOL_ERRORS: Final[dict[ErrorCode, tuple[int, str, bool]]] = {
    ErrorCode.INVALID_REQUEST: (400, INVALID_REQUEST, False),
    ErrorCode.CONTEXT_LENGTH_EXCEEDED: (400, INVALID_REQUEST, False),
    ErrorCode.OVERLOADED: (429, OVERLOADED, True),
    ErrorCode.NO_WORKERS: (503, UNAVAILABLE, True),
    ErrorCode.WORKER_LOST: (503, UNAVAILABLE, True),
    ErrorCode.TIMEOUT: (504, TIMEOUT, False),
    ErrorCode.CANCELLED: (503, UNAVAILABLE, True),
    ErrorCode.SHUTTING_DOWN: (503, UNAVAILABLE, True),
    ErrorCode.INTERNAL: (500, SERVER_ERROR, False),
}


def _encodable(text: str) -> str:
    """Return ``text`` with anything UTF-8 cannot carry (lone surrogates) written as ``\\udXXX``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def from_protocol(error: protocol.Error) -> APIError:
    """Translate an Error message from the dispatcher or a worker."""
    status, type_, retry = PROTOCOL_ERRORS[error.code]
    return APIError(status, error.message, type=type_, param=error.param, code=error.code.value, retry=retry)


def invalid(param: str | None, message: str, code: str = "invalid_value") -> APIError:
    """Return a 400 for a request field that is wrong, naming it in ``param``."""
    return APIError(400, message, param=param, code=code)


def dispatcher_unavailable(message: str) -> APIError:
    """Return the 503 for a dispatcher that cannot be reached or stopped answering."""
    return APIError(503, message, type=UNAVAILABLE, code="dispatcher_unavailable", retry=True)


def internal(message: str = "internal error; the gateway log has the details") -> APIError:
    """Return the 500 answered for a bug in the gateway itself."""
    return APIError(500, message, type=SERVER_ERROR, code=ErrorCode.INTERNAL.value)
