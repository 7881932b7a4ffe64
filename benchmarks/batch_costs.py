"""Scenario `batch-costs`: what a verification batch costs, in one-token decodes, under each way of loading the weights.

The speculative pay-off rule (worker.speculative.adaptive) drafts only where a batch of
k + 1 tokens costs much less than k + 1 one-token decodes; how much less depends on the
CPU kernels llama.cpp picks, and those on the weights' layout: with its extra buffer
types (memory.repack) it copies Q4_0, Q4_K and IQ4_NL weights into interleaved layouts
with batched kernels, where it has them for the CPU. The model (and the draft model, if
given) is loaded once per configuration (mapped or read, repacked or not) in this
process, then the configurations are timed in turn, round after round (--rounds,
default 5), with the workers' own measurement (worker.speculative.costs): batches after
a short context, logits at every position, the fastest time of each size counting, by
this thread's CPU time at one thread (llama.cpp computes in the caller's thread there,
so other processes on the cores change it little), by wall time with more. Private MB:
the anonymous memory (RssAnon) the load added. reame alone. Goal (issue #20's 1.5x
clause): a batch of 8 tokens at most 3 one-token decodes with the default load.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from reame.benchmarks.common import Progress, Setup, how
from reame.benchmarks.report import Cell, Section, plot, ratio, table
from reame.worker.kv import KvCache
from reame.worker.memory import status_bytes
from reame.worker.model import Model
from reame.worker.speculative.costs import CONTEXT, clock, time_decodes

SIZES: Final = (1, 2, 4, 8, 16)
QUICK_SIZES: Final = (1, 2, 8)
# (name, use_mmap, repack); mmap+repack is what a worker loads by default.
CONFIGS: Final = (("mmap", True, False), ("mmap+repack", True, True), ("read", False, False),
                  ("read+repack", False, True))
DEFAULT: Final = "mmap+repack"
ROUNDS: Final = 5
N_CTX: Final = 256  # room for CONTEXT and the largest batch, little memory beside the weights
GOAL_SIZE: Final = 8
GOAL: Final = 3.0  # a batch of GOAL_SIZE tokens, in one-token decodes


@dataclass
class Loaded:
    """One configuration of one model, loaded; ``best``: the fastest seconds of each batch size so far."""

    model: str
    name: str
    private: int  # bytes of anonymous memory the load added
    repacked: bool  # whether llama.cpp repacked (not where its extra buffers crash: worker.extra_buffers)
    best: dict[int, float] = field(default_factory=dict)

    def add(self, seconds: dict[int, float]) -> None:
        for size, taken in seconds.items():
            self.best[size] = min(taken, self.best.get(size, float("inf")))

    def cost(self, size: int) -> float:
        """A batch of ``size`` tokens in one-token decodes."""
        return ratio(self.best[size], self.best[1])


def rss_anon(status: Path = Path("/proc/self/status")) -> int:
    """This process's private anonymous memory in bytes (RssAnon), 0 where the kernel does not say."""
    return status_bytes("RssAnon", status) or 0


def run(setup: Setup) -> Section:
    rounds = 1 if setup.quick else setup.rounds or ROUNDS
    sizes = QUICK_SIZES if setup.quick else SIZES
    paths = [setup.model] + ([setup.draft_model] if setup.draft_model else [])
    loaded = [entry for path in paths for entry in measure(path, setup.threads, sizes, rounds)]
    return report(setup, loaded, sizes, rounds)


def measure(path: Path, threads: int, sizes: Sequence[int], rounds: int) -> list[Loaded]:
    """Load ``path`` in every configuration at once, then time them in turn, round after round."""
    entries: list[Loaded] = []
    models: list[Model] = []
    caches: list[KvCache] = []
    try:
        for name, use_mmap, repack in CONFIGS:
            before = rss_anon()
            models.append(Model(path, N_CTX, max(sizes), threads, use_mmap=use_mmap, repack=repack))
            caches.append(KvCache(models[-1]))
            entries.append(Loaded(path.name, name, rss_anon() - before, models[-1].repack))
        filler = models[0].tokenize(" the", add_special=False)[0]
        progress = Progress(rounds * len(CONFIGS), f"batch-costs {path.name}")
        try:
            for _ in range(rounds):
                for entry, kv in zip(entries, caches, strict=True):
                    entry.add(time_decodes(kv, sizes, filler, max(sizes), rounds=1, now=clock(threads)))
                    progress.step(entry.name)
        finally:
            progress.close()
    finally:
        for model in models:
            model.close()
        gc.collect()  # this model's loads freed before the next model's are measured
    return entries


def report(setup: Setup, loaded: Sequence[Loaded], sizes: Sequence[int], rounds: int) -> Section:
    largest = max(sizes)
    header = ["model", "load", "1 token ms", *(f"{size} tokens, in decodes" for size in sizes[1:]),
              f"{largest} tokens ms", "private MB"]
    rows: list[list[Cell]] = [
        [entry.model, entry.name + ("" if entry.repacked or "repack" not in entry.name else " (not repacked)"),
         1e3 * entry.best[1], *(entry.cost(size) for size in sizes[1:]), 1e3 * entry.best[largest],
         round(entry.private / 2**20)]
        for entry in loaded
    ]
    goal = []
    for entry in loaded:
        if entry.name == DEFAULT and GOAL_SIZE in sizes:
            cost = entry.cost(GOAL_SIZE)
            goal.append(f"{entry.model}, {DEFAULT} (the default): a batch of {GOAL_SIZE} costs {cost:.2f} one-token "
                        f"decodes (goal <= {GOAL}: {'met' if cost <= GOAL else 'NOT met'})")
    for model in dict.fromkeys(entry.model for entry in loaded):
        fastest = min((entry for entry in loaded if entry.model == model), key=lambda entry: entry.best[1])
        goal.append(f"{model}: fastest one-token decode {1e3 * fastest.best[1]:.1f} ms with {fastest.name}")

    def draw(axes: Any) -> None:
        for entry in loaded:
            axes.plot(list(sizes), [entry.cost(size) for size in sizes], marker="o",
                      label=f"{entry.model} {entry.name}")
        axes.plot(list(sizes), list(sizes), linestyle=":", color="grey", label="one decode a token")
        axes.set_xlabel("batch tokens")
        axes.set_ylabel("cost in one-token decodes")
        axes.set_title("Batch costs per way of loading the weights")

    plots = [name for name in [plot(setup.out, "batch_costs.png", draw)] if name]
    clocked = "this thread's CPU time" if setup.threads == 1 else "wall time"
    runs = (f"{len(CONFIGS)} loads of each model in one process, timed in turn, best of {rounds} round(s) by "
            f"{clocked}; batches after {CONTEXT} tokens of context, logits at every position")
    return Section("Batch costs and repacked weights", goal, how(setup, runs), [table(header, rows, 2)], plots)
