"""Cutting text into chunks (shared.chunking), planning a chunked prefill (worker.chunk_plan), chunk names."""

from __future__ import annotations

import pytest

from reame.shared.chunking import LONG_PARAGRAPH, part_breaks, pieces, split_at
from reame.worker.chunk_plan import MIN_CHUNK_TOKENS, Place, Read, Span, chunk_spans, reusable, steps
from reame.worker.chunk_store import chunk_fingerprint

LONG = "x" * LONG_PARAGRAPH
SHORT = "A heading"


@pytest.mark.parametrize("text", [
    "", "one line", f"{LONG}\n\n{LONG}", f"{SHORT}\n\n{LONG}\n\n{SHORT}", f"{LONG}\n \n\n\n{LONG}\n\n",
    f"{LONG}\r\n\r\n{LONG}",
])
def test_the_pieces_join_back_to_the_text(text: str) -> None:
    assert "".join(pieces(text)) == text


def test_a_piece_ends_with_each_long_paragraph_and_short_ones_join_the_next() -> None:
    assert pieces(f"{LONG}\n\n{SHORT}\n\n{SHORT}\n\n{LONG}\n\n{LONG}") == [
        f"{LONG}\n\n", f"{SHORT}\n\n{SHORT}\n\n{LONG}\n\n", LONG,
    ]
    assert pieces(f"{LONG[:-1]}\n\n{SHORT}") == [f"{LONG[:-1]}\n\n{SHORT}"]  # one character short of a piece
    assert pieces(f"{SHORT}\n\n{LONG}") == [f"{SHORT}\n\n{LONG}"]  # a heading is read with what it heads
    assert pieces(f"{LONG}\n\n{SHORT}") == [f"{LONG}\n\n", SHORT]


def test_a_document_is_cut_alike_wherever_it_sits() -> None:
    document = f"{SHORT}\n\n{LONG}1\n\n{LONG}2"
    alone = pieces(document)
    for before in (f"{LONG}a\n\n", f"{LONG}b\n\n{LONG}c\n\n"):
        for after in ("", f"\n\n{LONG}d", "\n\nWhat is it?"):
            cut = pieces(before + document + after)
            assert alone[:-1] == cut[cut.index(alone[0]) : cut.index(alone[0]) + len(alone) - 1]


def test_trailing_blank_lines_stay_with_the_last_piece() -> None:
    assert pieces(f"{LONG}\n\n\n") == [f"{LONG}\n\n\n"]


def test_runs_long_enough_become_chunks_but_never_the_prompt_s_last_tokens() -> None:
    n = MIN_CHUNK_TOKENS
    assert chunk_spans([(5, False), (n, True), (n - 1, True), (n, True), (3, False)]) == (
        Span(5, 5 + n), Span(5 + 2 * n - 1, 5 + 3 * n - 1),
    )
    assert chunk_spans([(5, False), (n, True), (1, False)]) == ()  # its logits are needed


def test_memory_is_reused_only_as_far_as_the_chunks_agree() -> None:
    held, prompt = list(range(100)), [*range(100), 7, 7]
    a, b = Span(10, 40), Span(50, 90)
    assert reusable(held, [a, b], prompt, [a, b]) == 100
    assert reusable(held, [a, b], prompt, [a]) == 50  # b read in context now: the held b is not that
    assert reusable(held, [a], prompt, [a, b]) == 50  # b was read in context, now it is a chunk
    assert reusable(held, [], prompt, [a]) == 10
    assert reusable(held[:60], [a], prompt, [a, b]) == 50  # a chunk is placed whole, never a part
    assert reusable(held, [a, b], held, [a, b]) == 98  # the last tokens are read again


def test_a_plan_reads_between_chunks_and_places_each_chunk_not_held() -> None:
    spans = [Span(10, 40), Span(50, 90)]
    assert steps(spans, 0, 100) == [Read(0, 10), Place(0), Read(40, 50), Place(1), Read(90, 100)]
    assert steps(spans, 45, 100) == [Read(45, 50), Place(1), Read(90, 100)]
    assert steps(spans, 50, 100) == [Place(1), Read(90, 100)]
    assert steps([Span(0, 30), Span(30, 60)], 0, 62) == [Place(0), Place(1), Read(60, 62)]


def test_a_chunk_s_name_depends_on_its_tokens_scope_and_link_only() -> None:
    model = b"m" * 16
    name = chunk_fingerprint(model, "", 16, [1, 2, 3])
    assert name == chunk_fingerprint(model, "", 16, (1, 2, 3))
    others = {chunk_fingerprint(model, "", 16, [1, 2, 4]), chunk_fingerprint(model, "k", 16, [1, 2, 3]),
              chunk_fingerprint(model, "", 8, [1, 2, 3]), chunk_fingerprint(b"n" * 16, "", 16, [1, 2, 3]), model}
    assert name not in others and len(others) == 5


def test_part_breaks_name_where_each_later_part_begins() -> None:
    parts = ["first document", "", "second", "?"]
    breaks = part_breaks(parts)
    assert breaks == (14, 20)
    assert split_at("".join(parts), breaks) == ["first document", "second", "?"]
    assert split_at("abc", ()) == ["abc"] and split_at("", (3,)) == []
    assert part_breaks(["only"]) == () and part_breaks(["", "x"]) == ()
