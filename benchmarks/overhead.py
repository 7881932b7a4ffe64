"""Scenario `overhead`: what the whole stack costs against the same prompt run in-process.

The same chat prompts (each with a unique first line, so no prefix is reused) streamed
through `reame serve` (1 worker of --threads threads, gateway, dispatcher, ZeroMQ) and
through the peer, with the openai client, and run in this process with
``llama_cpp.Llama.create_chat_completion``; greedy with the end token banned, the sides
in a rotating order, --rounds rounds over the topics (default 3). TTFT through reame is
also taken with a bare HTTP client (``http.client`` reading the SSE lines): the openai
client's own work per request (connection, parsing into objects) is on the client's
machine with any server, so that figure is what the stack itself adds. Goal: reame adds
at most 5 ms to TTFT and loses at most 3 % of decode speed.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any, Final

from reame.benchmarks.common import Peer, Progress, Setup, Timing, ask, both, how
from reame.benchmarks.report import Section, bars, median, plot, ratio, table
from reame.worker import extra_buffers

TOPICS = ("the history of lighthouses", "how bread is baked", "the water cycle", "a trip to the mountains",
          "how bicycles work", "the life of bees")
BARE: Final = "reame, bare HTTP"  # TTFT only: it reads up to the first token
SIDES: Final = ("reame", BARE, "peer", "in-process")
DECODED: Final = tuple(side for side in SIDES if side != BARE)
ROUNDS: Final = 3
BARE_MAX_TOKENS: Final = 8


def in_process(llama: Any, prompt: str, eos: int, max_tokens: int) -> Timing:
    start = time.perf_counter()
    first = last = 0.0
    tokens = 0
    parts = []
    for chunk in llama.create_chat_completion(
        messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=max_tokens,
        logit_bias={str(eos): -100}, stream=True,
    ):
        content = chunk["choices"][0]["delta"].get("content") if chunk["choices"] else None
        if content:
            last = time.perf_counter()
            first = first or last
            tokens += 1  # llama-cpp-python streams one chunk per token
            parts.append(content)
    end = time.perf_counter()
    decode = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
    return Timing((first or end) - start, end - start, tokens, decode, None, None, "".join(parts))


def bare_http(port: int, prompt: str, bias: dict[str, int]) -> Timing:
    """Time to the first token of one streamed request sent with http.client: no client library's work in it."""
    body = json.dumps({
        "model": "m", "messages": [{"role": "user", "content": prompt}], "temperature": 0,
        "max_tokens": BARE_MAX_TOKENS, "logit_bias": bias, "stream": True,
        "reame": {"speculative": "off", "cache": False},
    })
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    try:
        connection.connect()  # as an openai client's kept connection: not timed
        start = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        first = 0.0
        for line in iter(response.readline, b""):
            if not first and line.startswith(b"data: {"):
                choices = json.loads(line[6:]).get("choices") or [{}]
                if choices[0].get("delta", {}).get("content"):
                    first = time.perf_counter()
        end = time.perf_counter()
    finally:
        connection.close()
    if response.status != 200 or not first:
        raise RuntimeError(f"the bare HTTP request got HTTP {response.status} and no token")
    return Timing(first - start, end - start, 0, 0.0, None, None, "")


def run(setup: Setup) -> Section:
    import llama_cpp

    rounds = 1 if setup.quick else setup.rounds or ROUNDS
    max_tokens, topics = (16, TOPICS[:1]) if setup.quick else (128, TOPICS)
    extra_buffers.llama_cpp_like_reame(setup.model)
    llama = llama_cpp.Llama(model_path=str(setup.model), n_ctx=setup.n_ctx, n_threads=setup.threads,
                            n_threads_batch=setup.threads, verbose=False)
    eos = llama.token_eos()
    bias = {str(eos): -100}
    progress = Progress(rounds * len(topics) * len(SIDES), "overhead")
    peer = Peer(setup.model, setup.threads, setup.n_ctx, setup.tmp / "overhead-peer.log", extra=())
    timings: dict[str, list[Timing]] = {side: [] for side in SIDES}
    try:
        with both(setup, "overhead", 1, peer, workers_threads=str(setup.threads)) as (reame, _):
            # One warm-up each: the first request of a process pays for lazy set-up.
            ours, theirs = reame.client(timeout=900), peer.client()
            ask(ours, [{"role": "user", "content": "Hi"}], 2)
            ask(theirs, [{"role": "user", "content": "Hi"}], 2)
            in_process(llama, "Hi", eos, 2)
            n = 0
            for _ in range(rounds):
                for topic in topics:
                    shift = n % len(SIDES)
                    for side in SIDES[shift:] + SIDES[:shift]:
                        prompt = f"Note {n}. Write a detailed essay about {topic}, in several paragraphs."
                        messages = [{"role": "user", "content": prompt}]
                        if side == "reame":
                            timing = ask(ours, messages, max_tokens, logit_bias=bias,
                                         extra_body={"reame": {"speculative": "off", "cache": False}})
                        elif side == BARE:
                            timing = bare_http(reame.port, prompt, bias)
                        elif side == "peer":
                            timing = ask(theirs, messages, max_tokens, logit_bias=bias)
                        else:
                            timing = in_process(llama, prompt, eos, max_tokens)
                        timings[side].append(timing)
                        progress.step(side)
                        n += 1
    finally:
        progress.close()
        llama.close()
    return report(setup, timings, rounds * len(topics), max_tokens)


def report(setup: Setup, timings: dict[str, list[Timing]], count: int, max_tokens: int) -> Section:
    ttft = {side: median([t.ttft_s for t in timings[side]]) for side in SIDES}
    decode = {side: median([t.decode_tps for t in timings[side]]) for side in DECODED}
    local = "in-process"
    rows: list[list[Any]] = [
        [side, 1e3 * ttft[side], 1e3 * (ttft[side] - ttft[local]), decode.get(side),
         ratio(decode[side], decode[local]) if side in decode else None]
        for side in SIDES
    ]
    header = ["side", "median TTFT ms", "added ms", "median decode tok/s", "of in-process"]
    added = 1e3 * (ttft["reame"] - ttft[local])
    speed = ratio(decode["reame"], decode[local])
    goal = [f"reame adds {added:+.1f} ms to TTFT (goal <= 5 ms: {'met' if added <= 5 else 'NOT met'}); "
            f"the peer {1e3 * (ttft['peer'] - ttft[local]):+.1f} ms; reame with a bare HTTP client (no client "
            f"library's work) {1e3 * (ttft[BARE] - ttft[local]):+.1f} ms",
            f"reame decodes at {speed:.3f} of in-process speed (goal >= 0.97: {'met' if speed >= 0.97 else 'NOT met'});"
            f" the peer {ratio(decode['peer'], decode[local]):.3f}"]

    def draw(axes: Any) -> None:
        bars(axes, list(SIDES), {"median TTFT (ms)": [1e3 * ttft[s] for s in SIDES]}, "milliseconds")
        axes.set_title("Time to first token: the stack against in-process")

    plots = [name for name in [plot(setup.out, "overhead_ttft.png", draw)] if name]
    runs = (f"{count} requests per side, at most {max_tokens} tokens ({BARE_MAX_TOKENS} bare) with the end token "
            "banned, greedy, medians; reame 1 worker with speculative decoding and its prompt cache off per request")
    return Section("Overhead of the stack", goal, how(setup, runs), [table(header, rows, 2)], plots)
