"""Stop-string matching and incremental UTF-8 decoding of token pieces."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from hypothesis import given
from hypothesis import strategies as st

from reame.worker.stops import TextStream


def run(pieces: Iterable[bytes], stops: Iterable[str] = ()) -> tuple[list[str], TextStream]:
    """Push every piece (until a stop), then finish; return the emitted deltas."""
    stream = TextStream(stops)
    out = []
    for piece in pieces:
        out.append(stream.push(piece))
        if stream.stopped:
            break
    out.append(stream.finish())
    return out, stream


def test_no_stops_passes_text_through_immediately() -> None:
    stream = TextStream()
    assert stream.push(b"Hello") == "Hello"
    assert stream.push(b", world") == ", world"
    assert stream.finish() == ""
    assert not stream.stopped


def test_stop_inside_one_piece_cuts_before_it() -> None:
    out, stream = run([b"Hello END there"], ["END"])
    assert "".join(out) == "Hello "
    assert stream.matched == "END"


def test_stop_across_token_boundaries() -> None:
    stream = TextStream(["</s>"])
    assert stream.push(b"abc<") == "abc"
    assert stream.push(b"/") == ""
    assert stream.push(b"s") == ""
    assert stream.push(b">tail") == ""
    assert stream.stopped
    assert stream.matched == "</s>"
    assert stream.finish() == ""
    assert stream.push(b"more") == ""


def test_partial_match_that_is_not_a_stop_is_released() -> None:
    stream = TextStream(["STOP"])
    assert stream.push(b"go ST") == "go "
    assert stream.push(b"O") == ""
    assert stream.push(b"RM") == "STORM"
    assert not stream.stopped


def test_partial_match_released_at_finish() -> None:
    out, stream = run([b"the end is ST", b"O"], ["STOP"])
    assert out == ["the end is ", "", "STO"]
    assert not stream.stopped


def test_stop_at_the_very_start_emits_nothing() -> None:
    out, stream = run([b"\n\n", b"rest"], ["\n\n"])
    assert "".join(out) == ""
    assert stream.matched == "\n\n"


def test_several_stops_earliest_position_wins() -> None:
    out, stream = run([b"one two three"], ["three", "two"])
    assert "".join(out) == "one "
    assert stream.matched == "two"


def test_several_stops_hold_the_longest_possible_prefix() -> None:
    stream = TextStream(["abcd", "cx"])
    # "abc" may start "abcd" and "c" may start "cx": hold the longer tail.
    assert stream.push(b"zabc") == "z"
    assert stream.push(b"x") == "ab"
    assert stream.matched == "cx"


def test_overlapping_stop_prefix_resolves_to_later_match() -> None:
    # "aab" contains the stop "ab" starting at index 1, after a false start at 0.
    out, stream = run([b"a", b"a", b"b"], ["ab"])
    assert "".join(out) == "a"
    assert stream.matched == "ab"


def test_repeated_and_empty_stops_are_ignored() -> None:
    out, stream = run([b"x", b"y"], ["", "y", "y"])
    assert "".join(out) == "x"
    assert stream.matched == "y"


def test_emoji_split_into_single_bytes_is_held_until_complete() -> None:
    emoji = "🙂".encode()
    assert len(emoji) == 4
    stream = TextStream()
    assert [stream.push(emoji[i : i + 1]) for i in range(4)] == ["", "", "", "🙂"]
    assert stream.finish() == ""


def test_multibyte_split_across_mixed_pieces() -> None:
    text = "é🙂中"
    data = text.encode()
    stream = TextStream()
    out = [stream.push(data[:1]), stream.push(data[1:3]), stream.push(data[3:7]), stream.push(data[7:])]
    assert out == ["", "é", "🙂", "中"]


def test_incomplete_utf8_at_finish_is_replaced() -> None:
    stream = TextStream()
    assert stream.push(b"ok" + "🙂".encode()[:2]) == "ok"
    assert stream.finish() == "\ufffd"


def test_invalid_byte_becomes_replacement_character() -> None:
    stream = TextStream()
    assert stream.push(b"a\xffb") == "a\ufffdb"


def test_stop_string_with_multibyte_characters_split_across_pieces() -> None:
    stop = "🙂!"
    data = ("hi " + stop + " bye").encode()
    out, stream = run([data[i : i + 1] for i in range(len(data))], [stop])
    assert "".join(out) == "hi "
    assert stream.matched == stop


def test_finish_flushes_held_text_and_is_idempotent() -> None:
    stream = TextStream(["###"])
    assert stream.push(b"value #") == "value "
    assert stream.push(b"#") == ""
    assert stream.finish() == "##"
    assert stream.finish() == ""
    assert stream.push(b"late") == ""


def test_empty_pieces_produce_nothing() -> None:
    stream = TextStream(["x"])
    assert stream.push(b"") == ""
    assert stream.finish() == ""


@given(
    text=st.text(alphabet="ab🙂\n", max_size=30),
    stops=st.lists(st.text(alphabet="ab🙂\n", min_size=1, max_size=4), max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=20),
)
def test_matches_whole_text_reference(text: str, stops: list[str], cuts: list[int]) -> None:
    """However the bytes are split, the output is the text cut at the first stop to appear.

    The reference re-decodes the whole text seen so far after every piece, as a
    non-incremental implementation would; the first piece that completes a stop
    string ends the text at the earliest stop it contains.
    """
    data = text.encode()
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    out, stream = run(pieces, stops)
    expected, stopped = text, False
    for end in bounds[1:]:
        seen = data[:end].decode(errors="ignore")  # drops only an incomplete last character
        positions = [seen.find(s) for s in stops if s in seen]
        if positions:
            expected, stopped = seen[: min(positions)], True
            break
    assert "".join(out) == expected
    assert stream.stopped == stopped
