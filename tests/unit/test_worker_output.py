"""Emitting tokens: ends, stop strings, max_tokens and the Deltas' token counts."""

from __future__ import annotations

from reame.shared.protocol import Delta, FinishReason, Message
from reame.worker.output import Output
from reame.worker.stops import TextStream

EOG = 0
PIECES = {1: b"Hel", 2: b"lo", 3: b" wor", 4: b"ld", 5: b"\xf0\x9f", 6: b"\x99\x82"}


def output(budget: int, stops: tuple[str, ...] = ()) -> tuple[Output, list[Message]]:
    sent: list[Message] = []
    out = Output("r", budget, TextStream(stops), PIECES.__getitem__, lambda t: t == EOG, sent.append)
    return out, sent


def test_tokens_become_deltas_until_max_tokens() -> None:
    out, sent = output(3)
    assert out.remaining == 3
    assert out.take(1) and out.take(2)
    assert not out.take(3)  # the third token is the last: nothing follows it
    assert out.ended and out.produced == 3 and out.remaining == 0
    assert out.finish is FinishReason.LENGTH
    assert not out.take(4)  # ignored once ended
    out.close()
    assert sent == [Delta("r", "Hel", 1), Delta("r", "lo", 1), Delta("r", " wor", 1)]


def test_end_of_generation_is_not_a_completion_token() -> None:
    out, sent = output(10)
    assert out.take(1)
    assert not out.take(EOG)
    assert (out.produced, out.finish) == (1, FinishReason.STOP)
    out.close()
    assert sent == [Delta("r", "Hel", 1)]


def test_a_stop_string_ends_the_text_before_it() -> None:
    out, sent = output(10, stops=("lo wo",))
    assert out.take(1)
    assert out.take(2)  # "lo" may begin the stop string: held back
    assert not out.take(3)
    assert (out.produced, out.finish) == (3, FinishReason.STOP)
    out.close()
    assert "".join(m.text for m in sent if isinstance(m, Delta)) == "Hel"


def test_a_split_character_counts_both_tokens() -> None:
    out, sent = output(10)
    assert out.take(5) and out.take(6)
    out.close()
    assert sent == [Delta("r", "🙂", 2)]


def test_held_back_text_is_sent_on_close() -> None:
    out, sent = output(2, stops=("lo!",))
    out.take(1)
    out.take(2)
    out.close()
    # "l", then "lo", might begin the stop string; the tail's tokens were counted already.
    assert sent == [Delta("r", "He", 1), Delta("r", "l", 1), Delta("r", "lo", 0)]


def test_no_budget_means_nothing_to_do() -> None:
    out, sent = output(0)
    assert out.ended and not out.take(1)
    out.close()
    assert sent == []
