"""The bound on a request's top log-probabilities, kept by both sides of the protocol.

The gateway refuses a ``top_logprobs`` above it (gateway.api.logprobs) and the worker
never computes more than it for a Generate that asks for more (worker.logprobs).
"""

from __future__ import annotations

from typing import Final

MAX_TOP: Final = 20  # OpenAI's bound on top_logprobs
