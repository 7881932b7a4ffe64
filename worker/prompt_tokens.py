"""Turn a request's text into prompt tokens: clients' text is never read as special tokens.

A chat prompt is the template's markup around the clients' contents
(worker.chat_template.render_segments). Only the markup's special-token text
(``<|im_start|>``) becomes special tokens; a user who writes ``<|im_end|>`` gets the
tokens of that text, so no one can forge a turn from inside a message. A raw
completions prompt is read with its special tokens when ``model.special_tokens_in_prompt``
is on (people send pre-templated prompts there), as plain text otherwise.

Special-token text is found with shared.token_text (linear), and the plain runs
between special tokens are tokenized with llama.cpp's ``parse_special`` off (linear
too); that is what llama.cpp does inside one call, so for text without forged
special tokens the ids are the same as tokenizing the whole prompt at once. Long
runs are tokenized in chunks, cut where a byte-level BPE pre-tokenizer cuts anyway
(between a letter and a space followed by a letter), and ``check`` runs between
chunks, so a cancelled request or a passed deadline stops tokenizing too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from reame.shared.chunking import pieces
from reame.shared.token_text import SpecialSplitter, chunks
from reame.worker.chat_template import Segments
from reame.worker.chunk_plan import MIN_CHUNK_TOKENS, Span, chunk_spans


class Vocabulary(Protocol):
    """What tokenizing needs from worker.model.Model."""

    @property
    def byte_level(self) -> bool: ...

    def tokenize(self, text: str, add_special: bool, parse_special: bool = False) -> list[int]: ...

    def special_tokens(self, user_defined_only: bool = False) -> dict[str, int]: ...

    def framing(self) -> tuple[list[int], list[int]]: ...


class PromptTokenizer:
    """Tokenize chat segments and raw prompts for one model."""

    def __init__(self, vocab: Vocabulary, special_in_prompt: bool) -> None:
        self._vocab = vocab
        self._splitter = SpecialSplitter(vocab.special_tokens())
        # llama.cpp reads user-defined tokens (added words) even in plain text, with the
        # same quadratic pass: they are split off here too, which changes no id.
        self._added = SpecialSplitter(vocab.special_tokens(user_defined_only=True))
        self._special_in_prompt = special_in_prompt

    def chat(self, segments: Segments, check: Callable[[], None]) -> list[int]:
        """Return the tokens of a rendered chat: specials only from the template's markup."""
        parts: list[str | int] = []
        for text, from_client in segments:
            parts.extend([text] if from_client else self._splitter.split(text))
        return self._tokens(parts, check)

    def chat_chunks(
        self, segments: Segments, replies: frozenset[str], parts: frozenset[str], check: Callable[[], None],
        *, question_last: bool = True,
    ) -> tuple[list[int], tuple[Span, ...]]:
        """Return the tokens of a rendered chat read in chunks (worker.chunk_plan), and the chunks' spans.

        Each client text is cut into pieces (shared.chunking), but the model's own
        ``replies``, never chunks, and the text ``parts`` of a content sent in parts, a
        piece each; a piece of MIN_CHUNK_TOKENS or more is tokenized on its own, so its
        tokens do not depend on its neighbours. With ``question_last`` the last client
        piece (the question, which every request changes, and auto's excerpts before it)
        is read in context: read alone and stored it would only cost its link and a
        store entry no later prompt finds. A warm, which ends with its documents, has
        none. No chunk: no spans, and the tokens are :meth:`chat`'s.
        """
        runs: list[tuple[list[int], bool]] = []
        run: list[str | int] = []
        last = max((i for i, (text, from_client) in enumerate(segments) if from_client and text not in replies),
                   default=-1) if question_last else -1
        for index, (text, from_client) in enumerate(segments):
            if not from_client:
                run.extend(self._splitter.split(text))
                continue
            if text in replies:
                run.append(text)
                continue
            cut = [text] if text in parts else pieces(text)
            question = cut.pop() if index == last and cut else ""  # an empty message has no piece
            for piece in cut:
                tokens = self._plain(piece, check)
                if len(tokens) < MIN_CHUNK_TOKENS:
                    run.append(piece)
                    continue
                if run:
                    runs.append((self._tokens(run, check), False))
                    run = []
                runs.append((tokens, True))
            if question:
                run.append(question)
        runs.append((self._tokens(run, check), False))
        spans = chunk_spans([(len(tokens), candidate) for tokens, candidate in runs])
        if not spans:
            return self.chat(segments, check), ()
        return [token for tokens, _ in runs for token in tokens], spans

    def prompt(self, text: str, check: Callable[[], None]) -> list[int]:
        """Return the tokens of a raw prompt, with the vocabulary's BOS/EOS."""
        head, tail = self._vocab.framing()
        parts: list[str | int] = list(self._splitter.split(text)) if self._special_in_prompt else [text]
        return head + self._tokens(parts, check) + tail

    def _tokens(self, parts: list[str | int], check: Callable[[], None]) -> list[int]:
        tokens: list[int] = []
        run: list[str] = []
        for part in [*parts, -1]:  # -1: flush the last run
            if isinstance(part, str):
                run.append(part)
                continue
            if run:
                tokens += self._plain("".join(run), check)
                run = []
            if part >= 0:
                tokens.append(part)
        return tokens

    def _plain(self, text: str, check: Callable[[], None]) -> list[int]:
        """Tokenize text with no special tokens in it, checking ``check`` between chunks."""
        tokens: list[int] = []
        for part in self._added.split(text):
            if isinstance(part, int):
                tokens.append(part)
            elif not self._vocab.byte_level:
                # Other vocabularies may join text across a space: one call, checked before it.
                check()
                tokens += self._vocab.tokenize(part, add_special=False)
            else:
                for piece in chunks(part):
                    check()
                    tokens += self._vocab.tokenize(piece, add_special=False)
        return tokens
