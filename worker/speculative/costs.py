"""Measure what a verification batch costs against a one-token decode.

The ratio decides whether speculation can pay (worker.speculative.adaptive), and
it depends on the model and the machine: 9 tokens cost 2.9 one-token decodes on
the 1.5B benchmark model, 4.0 on the 135M default model. Each size is decoded a
few times after a short context, interleaved so that load from other processes
hits every size alike, and the fastest time counts. At one thread the time is the
thread's CPU time (llama.cpp computes in the caller's thread): wall time on a busy
machine charges long batches for the time other processes held the core, which
made 16 tokens cost 11.1 one-token decodes instead of 8.0 on the default model (load
average 8), enough to turn lookup off for good (worker.speculative.adaptive.CEILING).
Even so the result varies with the load, so a worker measures only when no other worker or earlier run has kept
costs for the same model, build, machine and config (worker.speculative.cost_file).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final

from reame.worker.kv import KvCache
from reame.worker.speculative.adaptive import StepCosts

CONTEXT: Final = 32  # tokens before the measured batches: attention over something
ROUNDS: Final = 3


def batch_sizes(smallest: int, largest: int) -> list[int]:
    """Return the batch sizes to time: 1, the powers of two between, ``smallest`` and ``largest``.

    Drafts are sized to these (llama.cpp's kernels favour some sizes: 16 tokens may
    cost less than 12), so the cost of a chosen size is measured, not interpolated.
    """
    sizes = {1, smallest, largest}
    power = 2
    while power < largest:
        if power > smallest:
            sizes.add(power)
        power *= 2
    return sorted(size for size in sizes if 1 <= size <= largest)


def clock(threads: int) -> Callable[[], float]:
    """Return the clock to time decodes at ``threads`` threads: this thread's CPU time at one."""
    return time.thread_time if threads == 1 else time.perf_counter


def time_decodes(
    kv: KvCache, sizes: Sequence[int], filler: int, n_batch: int, rounds: int = ROUNDS,
    now: Callable[[], float] = time.perf_counter,
) -> dict[int, float]:
    """Return the fastest time, in seconds, of decoding each batch size with logits at every position.

    The cache is emptied before and after.
    """
    best = {size: float("inf") for size in sizes}
    kv.reset()
    try:
        for start in range(0, CONTEXT, n_batch):
            kv.append([filler] * min(n_batch, CONTEXT - start), logits_last=False)
        for _ in range(rounds):
            for size in sizes:
                started = now()
                kv.evaluate([filler] * size)
                best[size] = min(best[size], now() - started)
                kv.truncate(CONTEXT)
    finally:
        kv.reset()
    return best


def measure(
    target: KvCache, draft_min: int, draft_max: int, filler: int, n_batch: int, draft: KvCache | None = None,
    threads: int = 0,
) -> StepCosts:
    """Return the step costs of ``target`` for drafts of ``draft_min`` to ``draft_max`` tokens (and of ``draft``).

    ``draft_max`` + 1 must not exceed ``n_batch``; ``threads``: the decode threads (0: unknown, wall time).
    """
    now = clock(threads)
    seconds = time_decodes(target, batch_sizes(draft_min + 1, draft_max + 1), filler, n_batch, now=now)
    draft_seconds = time_decodes(draft, [1], filler, n_batch, now=now)[1] if draft is not None else None
    return StepCosts.from_timings(seconds, draft_seconds)
