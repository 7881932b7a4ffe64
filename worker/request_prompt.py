"""Turn a Generate into prompt tokens: the chat template, the tokenizer, chunks, the context budget.

Clients' text never becomes special tokens in a chat (worker.prompt_tokens);
tokenizing checks for cancel and the deadline between pieces. In chunk mode
(Generate.chunks) a chat's texts are cut into chunks (worker.chunk_plan), unless
the model's cache cannot move positions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, NamedTuple

from reame.shared.chunking import split_at
from reame.shared.protocol import ErrorCode, Generate
from reame.worker.chat_template import ChatTemplate, ChatTemplateError
from reame.worker.chunk_plan import Span
from reame.worker.chunked_prefill import ChunkReuse
from reame.worker.model import Model
from reame.worker.prompt_tokens import PromptTokenizer

log = logging.getLogger(__name__)

NO_TEMPLATE: Final = (
    "this model has no chat template (tokenizer.chat_template in its GGUF file); "
    "use the completions endpoint with a raw prompt"
)


class RequestFailed(Exception):
    """End the current request with an Error message."""

    def __init__(self, code: ErrorCode, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


class Prompt(NamedTuple):
    tokens: list[int]
    what: str  # the request parameter they came from
    stops: list[str]
    spans: tuple[Span, ...] = ()  # chunk mode: the chunks (worker.chunk_plan)
    chunks: ChunkReuse | None = None  # chunk mode, once prefilled: what it reused and read


def load_template(model: Model) -> tuple[ChatTemplate | None, str]:
    """Compile the model's chat template; on failure return None and the reason."""
    source = model.chat_template()
    if source is None:
        return None, NO_TEMPLATE
    try:
        return ChatTemplate(source, model.token_text(model.bos), model.token_text(model.eos)), ""
    except ChatTemplateError as err:
        return None, str(err)


class PromptReader:
    """Read requests' prompts for one model."""

    def __init__(self, model: Model, special_in_prompt: bool) -> None:
        self._model = model
        self.tokens = PromptTokenizer(model, special_in_prompt)
        self.can_chunk = model.can_shift
        if not self.can_chunk:
            log.warning("this model's KV cache cannot move positions: chunk mode falls back to prefix reuse")
        self._template, self._template_problem = load_template(model)
        if self._template is None:
            log.warning("chat requests will fail: %s", self._template_problem)

    def read(self, request: Generate, check: Callable[[], None]) -> Prompt:
        """Return the prompt tokens, the parameter they came from, the stop strings, and chunks."""
        stops = list(request.sampling.stop)
        if (request.prompt is None) == (request.messages is None):
            raise RequestFailed(ErrorCode.INVALID_REQUEST, "exactly one of prompt and messages must be given")
        tokens: list[int] = []
        spans: tuple[Span, ...] = ()
        what = "prompt"
        if request.messages is not None:
            if self._template is None:
                raise RequestFailed(ErrorCode.INVALID_REQUEST, self._template_problem, "messages")
            if not request.messages:
                raise RequestFailed(ErrorCode.INVALID_REQUEST, "messages must not be empty", "messages")
            try:
                segments = self._template.render_segments(request.messages, request.tools)
            except ChatTemplateError as err:
                raise RequestFailed(ErrorCode.INVALID_REQUEST, str(err), "messages") from err
            # The template writes its own special tokens (BOS included, if it wants one),
            # as llama-cpp-python's chat handler assumes.
            if request.chunks and self.can_chunk:
                replies = frozenset(m.content for m in request.messages if m.role == "assistant")
                # A content sent in several text parts names its documents' boundaries itself.
                parts = frozenset(part for m in request.messages if m.breaks and m.role != "assistant"
                                  for part in split_at(m.content, m.breaks))
                tokens, spans = self.tokens.chat_chunks(segments, replies, parts, check, question_last=not request.warm)
            else:
                tokens = self.tokens.chat(segments, check)
            if self._template.eos_token:
                # Like llama-cpp-python: the EOS text also ends a chat answer when the
                # model spells it out as ordinary tokens.
                stops.append(self._template.eos_token)
            what = "messages"
        elif request.prompt is not None:
            tokens = self.tokens.prompt(request.prompt, check)
        if not tokens:
            if self._model.bos < 0:
                raise RequestFailed(ErrorCode.INVALID_REQUEST, f"the {what} is empty", what)
            tokens = [self._model.bos]  # something to compute the first logits from
        return Prompt(tokens, what, stops, spans)


def budget(n_ctx: int, n_prompt: int, max_tokens: int | None, what: str) -> int:
    """Return how many tokens may be generated; refuse what cannot fit the context."""
    if n_prompt >= n_ctx:
        raise RequestFailed(
            ErrorCode.CONTEXT_LENGTH_EXCEEDED,
            f"This model's maximum context length is {n_ctx} tokens, but the {what} "
            f"has {n_prompt} tokens, which leaves no room for the completion. "
            f"Please reduce the length of the {what}.",
            what,
        )
    if max_tokens is None:
        return n_ctx - n_prompt
    if n_prompt + max_tokens > n_ctx:
        raise RequestFailed(
            ErrorCode.CONTEXT_LENGTH_EXCEEDED,
            f"This model's maximum context length is {n_ctx} tokens, but the request needs "
            f"{n_prompt + max_tokens} tokens ({n_prompt} in the {what}, {max_tokens} for the "
            f"completion). Please reduce the length of the {what} or max_tokens.",
            what,
        )
    return max(max_tokens, 0)
