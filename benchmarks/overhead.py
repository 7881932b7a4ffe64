"""Scenario `overhead`: what the whole stack costs against the same prompt run in-process.

The same chat prompts (each with a unique first line, so no prefix is reused) streamed
through `reame serve` (1 worker of --threads threads, gateway, dispatcher, ZeroMQ) and
through the peer, with the openai client, and run in this process with
``llama_cpp.Llama.create_chat_completion``; greedy with the end token banned, the sides
in a rotating order. Goal: reame adds at most 5 ms to TTFT and loses at most 3 % of
decode speed.
"""

from __future__ import annotations

import time
from typing import Any

from reame.benchmarks.common import Peer, Progress, Setup, Timing, ask, both, how
from reame.benchmarks.report import Section, bars, median, plot, ratio, table
from reame.worker import extra_buffers

TOPICS = ("the history of lighthouses", "how bread is baked", "the water cycle", "a trip to the mountains",
          "how bicycles work", "the life of bees")
SIDES = ("reame", "peer", "in-process")


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


def run(setup: Setup) -> Section:
    import llama_cpp

    rounds, max_tokens, topics = (1, 16, TOPICS[:1]) if setup.quick else (3, 128, TOPICS)
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
    decode = {side: median([t.decode_tps for t in timings[side]]) for side in SIDES}
    local = "in-process"
    rows: list[list[Any]] = [
        [side, 1e3 * ttft[side], 1e3 * (ttft[side] - ttft[local]), decode[side], ratio(decode[side], decode[local])]
        for side in SIDES
    ]
    header = ["side", "median TTFT ms", "added ms", "median decode tok/s", "of in-process"]
    added = 1e3 * (ttft["reame"] - ttft[local])
    speed = ratio(decode["reame"], decode[local])
    goal = [f"reame adds {added:+.1f} ms to TTFT (goal <= 5 ms: {'met' if added <= 5 else 'NOT met'}); "
            f"the peer {1e3 * (ttft['peer'] - ttft[local]):+.1f} ms",
            f"reame decodes at {speed:.3f} of in-process speed (goal >= 0.97: {'met' if speed >= 0.97 else 'NOT met'});"
            f" the peer {ratio(decode['peer'], decode[local]):.3f}"]

    def draw(axes: Any) -> None:
        bars(axes, list(SIDES), {"median TTFT (ms)": [1e3 * ttft[s] for s in SIDES]}, "milliseconds")
        axes.set_title("Time to first token: the stack against in-process")

    plots = [name for name in [plot(setup.out, "overhead_ttft.png", draw)] if name]
    runs = (f"{count} requests per side, at most {max_tokens} tokens with the end token banned, greedy, medians; "
            "reame 1 worker with speculative decoding and its prompt cache off per request")
    return Section("Overhead of the stack", goal, how(setup, runs), [table(header, rows, 2)], plots)
