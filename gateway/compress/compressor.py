"""The gateway's prompt compressor: the configured policy, the model's tokenizer, the savings counter.

Requests pick a mode with ``"reame": {"compress": MODE}``; otherwise ``compress.mode``
applies. What is compressed is decided in :mod:`gateway.compress.messages`. The tokens
saved are added to a process-wide counter (:data:`SAVINGS`) for the metrics endpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from reame.gateway.compress.messages import Policy, Result
from reame.gateway.compress.tokenizer import Tokenizer
from reame.shared.config import Config
from reame.shared.model_file import ModelFileError, model_path
from reame.shared.modes import CompressMode

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SavingsSnapshot:
    compressed: int  # prompts or messages that compression changed
    saved_tokens: int  # original minus compressed tokens, summed


class Savings:
    """Process-wide counts of what compression saved; safe to update from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._compressed = 0
        self._saved_tokens = 0

    def add(self, result: Result) -> None:
        """Account for one compressed request."""
        if result.saved_tokens == 0:
            return
        with self._lock:
            self._compressed += 1
            self._saved_tokens += result.saved_tokens

    def snapshot(self) -> SavingsSnapshot:
        with self._lock:
            return SavingsSnapshot(self._compressed, self._saved_tokens)


SAVINGS = Savings()


class Compressor:
    """The configured compression policy, counting tokens with the served model's vocabulary."""

    def __init__(self, config: Config, tokenizer: Tokenizer | None = None, savings: Savings = SAVINGS) -> None:
        self.settings = config.compress
        self.savings = savings
        if tokenizer is None:
            try:
                tokenizer = Tokenizer(model_path(config))
            except ModelFileError as err:
                log.warning("token counts for compression are estimates: %s", err)
                tokenizer = Tokenizer(None)
        self.tokenizer = tokenizer

    def policy(self, mode: CompressMode | None) -> Policy:
        """The policy for a request asking for ``mode`` (None: the configured one)."""
        s = self.settings
        return Policy(mode or s.mode, s.min_tokens, s.query_budget, self.tokenizer.count, s.excerpt_budget)
