"""``auto``'s first question: answered from ``query``'s short text while the document is read in the background.

``auto`` sends the document in its cache-stable ``facts`` form, then the lines
relevant to the question (gateway.compress.messages): once the document's KV state
is cached, a question reads only those lines. The first question about a document
would read all of it, so before sending, the gateway asks the dispatcher (one
StatusQuery with the document prefix's affinity links, shared.affinity) whether
a worker holds that prefix, is reading it for a user, or the store has it:

- read: the ``auto`` prompt is sent (``usage.reame.compression`` "auto");
- not read: the ``query`` prompt is sent instead, which holds only the relevant lines
  and is answered at once ("query"), and behind it, on the same socket, a background
  warm of the prefix (Generate.background): a worker reads it on idle cores, yielding
  to any user request at its next batch (dispatcher.background), and stores it, so
  the next question finds it read;
- not read, but a warm of it is queued or running (a question sent as soon as the
  previous answer came): the ``auto`` prompt, whose worker reads the document itself,
  resuming from what the warm stored, and stores it. Sending ``query`` again would
  pre-empt the warm at every question, and the document would never be read; the
  dispatcher drops the warm once the document is read;
- in chunk mode (Generate.chunks), read also when every piece of the documents was
  read in chunk mode, in whatever order and company (StatusQuery.chunks): the worker
  places them from the store. The warm is read in chunk mode too, so it stores pieces;
- no answer from the dispatcher: ``auto`` as is (the request would fail anyway).

The decision (:func:`decide`) is pure; :class:`Warming` gathers what it needs.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from reame.gateway.compress.messages import Result, compress_messages, compress_prompt
from reame.gateway.compression import Compressor
from reame.shared import affinity, protocol
from reame.shared.affinity import chunks_read, is_read
from reame.shared.modes import CompressMode
from reame.shared.protocol import ChatMessage, Generate, SamplingParams

log = logging.getLogger(__name__)

# The dispatcher answers a StatusQuery within a millisecond; one that does not gets ``auto``.
PROBE_TIMEOUT_S: Final = 0.25
WARM_SUFFIX: Final = "-warm"

# Dispatcher.status with a prefix's links and its pieces in chunk mode, under PROBE_TIMEOUT_S.
Probe = Callable[[Sequence[tuple[bytes, int]], Sequence[bytes]], protocol.Status | None]


class Decision(enum.Enum):
    AUTO = "auto"  # read, or being read in the background: send auto's prompt
    QUERY_AND_WARM = "query and warm"  # not read: query's prompt now, the document in the background


def decide(status: protocol.Status | None, prefix: affinity.Chain, chunks: Sequence[bytes] = ()) -> Decision:
    """Choose how to send a question whose auto prompt starts with ``prefix``, from the dispatcher's answer.

    ``chunks``: the prefix's pieces, when it is read in chunk mode.
    """
    if status is None or not prefix or is_read(status.prefix_chars, prefix[-1].chars) or status.prefix_warming:
        return Decision.AUTO
    if chunks_read(status.chunks_known, chunks):
        return Decision.AUTO
    return Decision.QUERY_AND_WARM


class Choice(NamedTuple):
    """What to send: the compressed request, its mode for usage.reame.compression, and a warm to send after it."""

    compressed: Result
    mode: str
    warm: Generate | None = None


class Warming:
    """Compress a request; for ``auto``, pick its prompt and warm as :func:`decide` says."""

    def __init__(self, compressor: Compressor, probe: Probe) -> None:
        self.compressor = compressor
        self.probe = probe

    def compress(
        self, request_id: str, deadline: float, *, prompt: str | None, messages: list[ChatMessage] | None,
        mode: CompressMode | None, warm: bool, cache: bool, scope: str, chunks: bool = False,
    ) -> Choice:
        """Compress the prompt or messages in ``mode`` (None: the configured one); see the module doc.

        ``chunks``: the request is read in chunk mode (Generate.chunks), and so is its warm.
        """
        compressor = self.compressor
        mode = mode or compressor.settings.mode
        result = self._compress(prompt, messages, mode, warm)
        if mode != CompressMode.AUTO or warm or (result.prefix_prompt is None and result.prefix_messages is None):
            compressor.savings.add(result)
            return Choice(result, mode)
        reader = Generate(
            request_id + WARM_SUFFIX, SamplingParams(max_tokens=0), deadline, prompt=result.prefix_prompt,
            messages=result.prefix_messages, cache=cache, warm=True, cache_scope=scope, background=True,
            chunks=chunks,
        )
        prefix = affinity.chain(reader)
        pieces = affinity.chunk_digests(reader) if chunks else ()
        decision = decide(self.probe([(link.digest, link.chars) for link in prefix], pieces), prefix, pieces)
        log.debug("request %s: %s (a document prefix of %d characters)", request_id, decision.value,
                  prefix[-1].chars if prefix else 0)
        if decision is Decision.AUTO:
            compressor.savings.add(result)
            return Choice(result, mode)
        result = self._compress(prompt, messages, CompressMode.QUERY, warm)
        compressor.savings.add(result)
        return Choice(result, CompressMode.QUERY, reader)

    def _compress(
        self, prompt: str | None, messages: list[ChatMessage] | None, mode: CompressMode, warm: bool
    ) -> Result:
        policy = self.compressor.policy(mode)
        if prompt is not None:
            return compress_prompt(prompt, policy, warm=warm)
        return compress_messages(messages or [], policy, warm=warm)
