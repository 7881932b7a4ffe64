"""Hand generated tokens to the client one by one: end of generation, stop strings, max_tokens.

Both decode loops (plain and speculative) emit through :class:`Output`, so the
Deltas a client sees and the finish reason do not depend on how the tokens were
found: a speculative step that yields five tokens emits them as five plain steps
would have.
"""

from __future__ import annotations

from collections.abc import Callable

from reame.shared.protocol import Delta, FinishReason, Message, TokenLogprob
from reame.worker.stops import TextStream


class Output:
    """The text of one request as it is generated; :meth:`take` each token, then :meth:`close`."""

    def __init__(
        self,
        request_id: str,
        budget: int,
        stream: TextStream,
        piece: Callable[[int], bytes],
        is_eog: Callable[[int], bool],
        send: Callable[[Message], None],
        logprob: Callable[[], TokenLogprob | None] | None = None,
    ) -> None:
        """``logprob`` returns the entry of the token being taken (worker.logprobs), if asked for."""
        self._request_id = request_id
        self._logprob = logprob
        self._logprobs: list[TokenLogprob] = []  # the entries of the pending tokens
        self._budget = budget
        self._stream = stream
        self._piece = piece
        self._is_eog = is_eog
        self._send = send
        self.produced = 0  # completion tokens (an end-of-generation token is not one)
        self._pending = 0  # tokens whose text has not been sent yet
        self.finish = FinishReason.LENGTH
        self.ended = budget <= 0

    @property
    def remaining(self) -> int:
        """Return how many more tokens may be produced."""
        return self._budget - self.produced

    def take(self, token: int) -> bool:
        """Emit ``token``; return False once nothing may follow it (it need not be evaluated)."""
        if self.ended:
            return False
        if self._is_eog(token):
            self.finish = FinishReason.STOP
            self.ended = True
            return False
        self.produced += 1
        self._pending += 1
        if self._logprob is not None and (found := self._logprob()) is not None:
            self._logprobs.append(found)
        text = self._stream.push(self._piece(token))
        if text:
            self._emit(text)
        if self._stream.stopped:
            self.finish = FinishReason.STOP
            self.ended = True
        elif self.produced == self._budget:
            self.ended = True
        return not self.ended

    def close(self) -> None:
        """Send the text still held back (a partial stop string, an unfinished character)."""
        self.ended = True
        tail = self._stream.finish()
        if tail:
            self._emit(tail)

    def _emit(self, text: str) -> None:
        self._send(Delta(self._request_id, text, self._pending, self._logprobs))
        self._pending = 0
        self._logprobs = []
