"""Measure what the whole stack costs against llama-cpp-python in-process, side by side.

Time to first token and decode speed through `reame serve` (gateway, dispatcher,
worker, real ZeroMQ) with the openai client, against the same prompts run in this
process with ``llama_cpp.Llama``, interleaved in one run so machine noise hits both.
Each prompt starts with a unique number, so neither side can reuse a cached prefix.
TTFT is also taken with a bare HTTP client (``http.client``, reading the SSE lines):
the openai client's own work per request (connection, parsing into objects) is on
the client's machine with any server, so that figure is what the stack itself adds.

    .venv/bin/python -m bench.bench_stack [--model PATH] [--threads 2] [--rounds 5]

Prints medians and the ratios; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reame.benchmarks.server import Server, start_server
from reame.shared.config import load
from reame.shared.model_file import model_path
from reame.worker import extra_buffers

TOPICS = [
    "the history of lighthouses", "how bread is baked", "the water cycle", "a trip to the mountains",
    "how bicycles work", "the life of bees",
]
MAX_TOKENS = 128


@dataclass
class Timing:
    ttft_s: float
    decode_tps: float  # tokens per second from the first to the last token


def prompt_for(i: int, topic: str) -> str:
    return f"Note {i}. Write a detailed essay about {topic}, in several paragraphs."


def through_stack(server: Server, prompt: str, eos: int) -> Timing:
    client = server.client()
    start = time.perf_counter()
    first = last = 0.0
    tokens = 0
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=MAX_TOKENS,
        logit_bias={str(eos): -100}, stream=True, stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return Timing(first - start, (tokens - 1) / (last - first))


def bare_http(server: Server, prompt: str, eos: int) -> float:
    """Return the TTFT of one streamed request sent with http.client: no client library's work in it."""
    body = json.dumps({
        "model": "m", "messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 8,
        "logit_bias": {str(eos): -100}, "stream": True,
    })
    connection = http.client.HTTPConnection("127.0.0.1", server.port)
    connection.connect()
    start = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    ttft = float("nan")
    for line in iter(response.readline, b""):
        if line.startswith(b"data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
            ttft = time.perf_counter() - start
            break
    response.read()
    connection.close()
    return ttft


def in_process(llama: Any, prompt: str, eos: int) -> Timing:
    start = time.perf_counter()
    first = last = 0.0
    tokens = 0
    for chunk in llama.create_chat_completion(
        messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=MAX_TOKENS,
        logit_bias={str(eos): -100}, stream=True,
    ):
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
            last = time.perf_counter()
            first = first or last
            tokens += 1  # llama-cpp-python streams one chunk per token
    return Timing(first - start, (tokens - 1) / (last - first))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF path (default: the embedded SmolLM2-135M)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import llama_cpp

    overrides = {"model_path": args.model} if args.model else {}
    config = load(None, environ={f"REAME_{k.upper()}": v for k, v in overrides.items()})
    path = str(model_path(config))
    extra_buffers.llama_cpp_like_reame(Path(path))
    llama = llama_cpp.Llama(
        model_path=path, n_ctx=config.model.n_ctx, n_batch=config.model.n_batch,
        n_threads=args.threads, n_threads_batch=args.threads, verbose=False,
    )
    eos = llama.token_eos()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), workers=1, workers_threads=str(args.threads), **overrides)
        try:
            through_stack(server, prompt_for(-1, "warm-up"), eos)
            in_process(llama, prompt_for(-2, "warm-up"), eos)
            stack: list[Timing] = []
            local: list[Timing] = []
            bare: list[float] = []
            n = 0
            for _ in range(args.rounds):
                for topic in TOPICS:
                    # Alternate which side goes first, so drift hits both alike.
                    sides = ["stack", "bare", "local"] if n % 2 == 0 else ["local", "bare", "stack"]
                    for side in sides:
                        prompt = prompt_for(n, topic)
                        if side == "stack":
                            stack.append(through_stack(server, prompt, eos))
                        elif side == "bare":
                            bare.append(bare_http(server, prompt, eos))
                        else:
                            local.append(in_process(llama, prompt, eos))
                        n += 1
        finally:
            server.stop()

    def median(xs: list[float]) -> float:
        return statistics.median(xs)

    ttft_stack, ttft_local = median([t.ttft_s for t in stack]), median([t.ttft_s for t in local])
    tps_stack, tps_local = median([t.decode_tps for t in stack]), median([t.decode_tps for t in local])
    print(f"model: {Path(path).name}, threads: {args.threads}, requests per side: {len(stack)}")
    print(f"{'':24}{'reame stack':>14}{'in-process':>14}{'difference':>14}")
    print(f"{'median TTFT (ms)':24}{ttft_stack * 1e3:14.1f}{ttft_local * 1e3:14.1f}"
          f"{(ttft_stack - ttft_local) * 1e3:+14.1f}")
    ttft_bare = median(bare)
    print(f"{'  bare HTTP client':24}{ttft_bare * 1e3:14.1f}{ttft_local * 1e3:14.1f}"
          f"{(ttft_bare - ttft_local) * 1e3:+14.1f}")
    print(f"{'median decode (tok/s)':24}{tps_stack:14.1f}{tps_local:14.1f}{tps_stack / tps_local:14.3f}x")


if __name__ == "__main__":
    main()
