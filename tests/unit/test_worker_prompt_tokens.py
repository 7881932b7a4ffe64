"""Prompt tokens from a fake vocabulary: which text may become special tokens, chunks, cancel checks."""

from __future__ import annotations

import itertools

import pytest

from reame.shared.token_text import SpecialSplitter, chunks
from reame.worker.chat_template import Segments
from reame.worker.prompt_tokens import PromptTokenizer

CONTROL = {"<|im_start|>": 1, "<|im_end|>": 2, "<|im": 3}
ADDED = {"<tool>": 7}  # a user-defined token: llama.cpp reads it even in plain text


class FakeVocab:
    """One token per character (its code point + 1000); records every tokenize call."""

    def __init__(self, byte_level: bool = True) -> None:
        self.byte_level = byte_level
        self.calls: list[str] = []

    def tokenize(self, text: str, add_special: bool, parse_special: bool = False) -> list[int]:
        assert not add_special and not parse_special  # the prompt tokenizer frames and splits itself
        assert not any(added in text for added in ADDED)  # split off before, as llama.cpp would
        self.calls.append(text)
        return [1000 + ord(char) for char in text]

    def special_tokens(self, user_defined_only: bool = False) -> dict[str, int]:
        return dict(ADDED) if user_defined_only else {**CONTROL, **ADDED}

    def framing(self) -> tuple[list[int], list[int]]:
        return [100], [101]


def text_ids(text: str) -> list[int]:
    return [1000 + ord(char) for char in text]


def never() -> None:
    pass


def test_only_the_templates_markup_becomes_control_tokens() -> None:
    segments: Segments = [("<|im_start|>user\n", False), ("hi<|im_end|><tool>", True), ("<|im_end|>\n", False)]
    tokens = PromptTokenizer(FakeVocab(), special_in_prompt=True).chat(segments, never)
    assert tokens == [1, *text_ids("user\nhi<|im_end|>"), 7, 2, *text_ids("\n")]


def test_plain_runs_across_markup_and_content_are_tokenized_together() -> None:
    vocab = FakeVocab()
    segments: Segments = [("<|im_start|>user\n", False), ("Hello", True), (" there<|im_end|>", False)]
    PromptTokenizer(vocab, special_in_prompt=True).chat(segments, never)
    assert vocab.calls == ["user\nHello there"]  # as llama.cpp tokenizes between two special tokens


@pytest.mark.parametrize(("special_in_prompt", "expected"), [
    (True, [100, 1, *text_ids("a"), 2, 7, 101]),
    (False, [100, *text_ids("<|im_start|>a<|im_end|>"), 7, 101]),
])
def test_a_raw_prompt_reads_special_tokens_if_configured(special_in_prompt: bool, expected: list[int]) -> None:
    prompt = "<|im_start|>a<|im_end|><tool>"
    assert PromptTokenizer(FakeVocab(), special_in_prompt).prompt(prompt, never) == expected


def test_long_text_is_tokenized_in_chunks_checking_between_them() -> None:
    text = "alpha beta " * 20_000
    checks: list[int] = []
    vocab = FakeVocab()
    tokens = PromptTokenizer(vocab, special_in_prompt=True).prompt(text, lambda: checks.append(1))
    assert tokens == [100, *text_ids(text), 101]
    assert len(vocab.calls) > 2 and len(checks) == len(vocab.calls)


def test_other_vocabularies_are_tokenized_in_one_call() -> None:
    vocab = FakeVocab(byte_level=False)
    PromptTokenizer(vocab, special_in_prompt=True).prompt("alpha beta " * 20_000, never)
    assert len(vocab.calls) == 1  # a SentencePiece vocabulary may join across a space


def test_a_cancelled_check_stops_tokenizing() -> None:
    def cancelled() -> None:
        raise RuntimeError("cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        PromptTokenizer(FakeVocab(), special_in_prompt=True).prompt("alpha beta", cancelled)


def test_chunks_cut_only_between_a_letter_and_a_space_before_a_letter() -> None:
    text = ("word " * 50 + "\n\n  12 34 ") * 40
    pieces = list(chunks(text, 64))
    assert "".join(pieces) == text and len(pieces) > 1
    for left, right in itertools.pairwise(pieces):
        assert left[-1].isalpha() and right[0] == " " and right[1].isalpha()
    assert list(chunks("1 2 3 " * 100, 16)) == ["1 2 3 " * 100]  # nowhere safe to cut


def test_the_longest_special_text_wins() -> None:
    splitter = SpecialSplitter(CONTROL)
    assert list(splitter.split("x<|im_end|><|imy<|im")) == ["x", 2, 3, "y", 3]
    assert list(SpecialSplitter({}).split("abc")) == ["abc"]
    assert list(splitter.split("")) == []


def test_the_question_is_read_in_context_and_a_warm_s_last_document_is_a_chunk() -> None:
    """Chunk mode: every document part is a chunk, but the last client piece (the question, which each
    request changes) is read in context unless the request is a warm, which ends with its documents."""
    doc_a, doc_b, question = "a" * 80 + "\n\n", "b" * 90 + "\n\n", "q" * 70
    segments: Segments = [("<|im_start|>user\n", False), (doc_a, True), (doc_b, True), (question, True),
                          ("<|im_end|>\n<|im_start|>assistant\n", False)]
    tokenizer = PromptTokenizer(FakeVocab(), special_in_prompt=False)
    parts = frozenset({doc_a, doc_b, question})
    tokens, spans = tokenizer.chat_chunks(segments, frozenset(), parts, never)
    assert tokens == tokenizer.chat(segments, never)  # chunks are tokenized alone, as a whole read would here
    assert [tokens[s.start : s.end] for s in spans] == [text_ids(doc_a), text_ids(doc_b)]
    warm: Segments = [("<|im_start|>user\n", False), (doc_a, True), (doc_b, True), ("<|im_end|>\n", False)]
    tokens, spans = tokenizer.chat_chunks(warm, frozenset(), frozenset({doc_a, doc_b}), never, question_last=False)
    assert [tokens[s.start : s.end] for s in spans] == [text_ids(doc_a), text_ids(doc_b)]
    _, spans = tokenizer.chat_chunks(warm, frozenset(), frozenset({doc_a, doc_b}), never)
    assert [len(s) for s in spans] == [len(doc_a)]  # as a question, the last document would be read in context


def test_an_empty_last_message_in_chunk_mode_is_read_as_it_stands() -> None:
    """A client's last message may be empty: nothing is its question, the documents before stay chunks."""
    doc = "a" * 80 + "\n\n"
    segments: Segments = [("<|im_start|>user\n", False), (doc, True), ("", True), ("<|im_end|>\n", False)]
    tokenizer = PromptTokenizer(FakeVocab(), special_in_prompt=False)
    tokens, spans = tokenizer.chat_chunks(segments, frozenset(), frozenset({doc}), never)
    assert tokens == tokenizer.chat(segments, never)
    assert [tokens[s.start : s.end] for s in spans] == [text_ids(doc)]
