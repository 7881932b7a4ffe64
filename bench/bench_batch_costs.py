"""Measure what a verification batch costs, in one-token decodes, under each way of loading the weights.

The speculative pay-off rule (worker.speculative.adaptive) drafts only where a batch of
k + 1 tokens costs much less than k + 1 one-token decodes; how much less depends on the
CPU kernels llama.cpp picks, and those depend on the weights' layout: with its extra
buffer types (memory.repack) it copies Q4_0, Q4_K and IQ4_NL weights into interleaved
layouts with batched kernels, where it has them for the CPU. Every configuration is
loaded once in this process, then timed in turn, round after round; the fastest time of
each size counts. Times are the CPU time of this thread (at one thread llama.cpp
computes in the caller's thread), so that other processes sharing the cores change
them little; with more threads they are wall times.

    .venv/bin/python -m bench.bench_batch_costs --model PATH [--model PATH ...] [--threads 1] [--rounds 5]

Prints, per model and configuration, the batch costs, the one-token decode time and
the private memory (RssAnon) the configuration added. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import dataclass, field
from pathlib import Path

from reame.shared.config import load
from reame.shared.model_file import model_path
from reame.worker.kv import KvCache
from reame.worker.model import Model
from reame.worker.speculative.costs import CONTEXT

SIZES = (1, 2, 4, 8, 16)
# (name, use_mmap, repack)
CONFIGS = (("mmap", True, False), ("mmap+repack", True, True), ("read", False, False), ("read+repack", False, True))


@dataclass
class Loaded:
    name: str
    model: Model
    kv: KvCache
    private: int  # bytes of anonymous memory added by loading it
    best: dict[int, float] = field(default_factory=dict)


def rss_anon() -> int:
    """Return this process's private anonymous memory in bytes (RssAnon)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def time_sizes(kv: KvCache, filler: int, threads: int) -> dict[int, float]:
    """Return the time of decoding each size of SIZES after CONTEXT tokens, logits at every position."""
    clock = time.thread_time if threads == 1 else time.perf_counter
    times: dict[int, float] = {}
    kv.reset()
    for start in range(0, CONTEXT, max(SIZES)):
        kv.append([filler] * min(max(SIZES), CONTEXT - start), logits_last=False)
    for size in SIZES:
        started = clock()
        kv.evaluate([filler] * size)
        times[size] = clock() - started
        kv.truncate(CONTEXT)
    kv.reset()
    return times


def run(path: Path, threads: int, rounds: int, n_batch: int) -> None:
    loaded: list[Loaded] = []
    for name, use_mmap, repack in CONFIGS:
        before = rss_anon()
        model = Model(path, n_ctx=256, n_batch=n_batch, threads=threads, use_mmap=use_mmap, repack=repack)
        loaded.append(Loaded(name, model, KvCache(model), rss_anon() - before))
    filler = loaded[0].model.tokenize(" the", add_special=False)[0]
    for _ in range(rounds):
        for entry in loaded:
            for size, seconds in time_sizes(entry.kv, filler, threads).items():
                entry.best[size] = min(seconds, entry.best.get(size, float("inf")))
    print(f"\n{path.name}, {threads} thread(s), best of {rounds} rounds")
    print("| load | 1 token ms | " + " | ".join(f"{size}" for size in SIZES[1:]) + " | private MB |")
    print("|---|---|" + "---|" * (len(SIZES) - 1) + "---|")
    for entry in loaded:
        one = entry.best[1]
        costs = " | ".join(f"{entry.best[size] / one:.2f}" for size in SIZES[1:])
        print(f"| {entry.name} | {one * 1000:.1f} | {costs} | {entry.private / 2**20:.0f} |")
    for entry in loaded:
        entry.model.close()
    gc.collect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append", help="GGUF file (default: the configured model)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    paths: list[Path] = args.model or [model_path(load(None, {}))]
    for path in paths:
        run(path.expanduser(), args.threads, args.rounds, n_batch=max(SIZES))


if __name__ == "__main__":
    main()
