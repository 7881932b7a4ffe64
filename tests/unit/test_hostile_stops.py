"""Stop strings from a hostile client: at most four, of bounded length, matched in linear time."""

from __future__ import annotations

import time
from typing import Any

import pytest

from reame.gateway.api.sampling_fields import MAX_STOP, MAX_STOP_CHARS
from reame.gateway.api.validation import parse_chat, parse_completion
from reame.gateway.http.errors import APIError
from reame.shared import config
from reame.worker.stops import TextStream

DEFAULTS = config.load(environ={}).sampling
SIZE = 200_000
PIECE = 4  # bytes a token, about
RATIO = 10  # hostile stop strings may cost this many times ordinary ones
SLACK_S = 0.5


def stream(text: str, stops: list[str]) -> tuple[float, str]:
    """Push ``text`` in token-sized pieces; return the time taken and the text emitted."""
    data = text.encode()
    out = TextStream(stops)
    start = time.perf_counter()
    emitted = [out.push(data[i : i + PIECE]) for i in range(0, len(data), PIECE)]
    emitted.append(out.finish())
    return time.perf_counter() - start, "".join(emitted)


def test_matching_is_linear_with_the_longest_stops_held_back_all_along() -> None:
    ordinary, _ = stream(("The deposit is refunded within 5 days. " * (SIZE // 39 + 1))[:SIZE], ["</s>"])
    # Every tail of "aaa..." begins each of these, so all of them are always partly matched:
    # trying every prefix length of every stop string after each piece cost O(length^2) a token.
    long = MAX_STOP_CHARS // 2
    stops = ["ab" * long, "a" * (MAX_STOP_CHARS - 1) + "b", "ba" * long, "aab" * (MAX_STOP_CHARS // 3)]
    hostile, text = stream("a" * SIZE, stops)
    assert text == "a" * SIZE  # nothing matched; what was held back came out at the end
    assert hostile <= RATIO * ordinary + SLACK_S, f"{hostile:.2f} s against {ordinary:.2f} s for ordinary stops"


def test_a_long_stop_string_is_found_across_many_pieces() -> None:
    stop = "ab" * (MAX_STOP_CHARS // 2)
    _, text = stream("x" + "a" + stop + "tail", [stop, "b" * MAX_STOP_CHARS])
    assert text == "xa"


def chat(stop: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": stop}


def test_up_to_four_stop_strings_of_bounded_length_are_accepted() -> None:
    stops = [str(i) * MAX_STOP_CHARS for i in range(MAX_STOP)]
    assert parse_chat(chat(stops), DEFAULTS).sampling.stop == stops
    completion = {"model": "m", "prompt": "Once", "stop": "x" * MAX_STOP_CHARS}
    assert parse_completion(completion, DEFAULTS).sampling.stop == ["x" * MAX_STOP_CHARS]


@pytest.mark.parametrize(
    ("stop", "param"),
    [
        (["a", "b", "c", "d", "e"], "stop"),
        ("x" * (MAX_STOP_CHARS + 1), "stop"),
        (["ok", "x" * (MAX_STOP_CHARS + 1)], "stop[1]"),
    ],
    ids=["five", "one too long", "second too long"],
)
def test_more_or_longer_stop_strings_are_a_400_naming_stop(stop: Any, param: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_chat(chat(stop), DEFAULTS)
    assert (caught.value.status, caught.value.param) == (400, param)
