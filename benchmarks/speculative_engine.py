"""Scenario `speculative-engine`: speculative decoding on the worker's engine in this process, off, lookup and model.

What `speculative` measures through the servers, taken here on ``worker.engine.Engine``
itself (no sockets, the worker's code and its start-up measurement of batch costs), so
that only the decode is timed: decode speed from the first Delta to the last (prefill
excluded) on the prompts of ``benchmarks.speculative_prompts``, greedy, and the story
once more sampled at temperature 0.8. Modes: ``off``, ``lookup``, and given
--draft-model ``model`` and ``model!``: model mode forced to verify FORCED_DRAFTS
drafts at every step, without the pay-off rule, to show what the rule saves. The modes
of a prompt run back to back in a rotating order, --rounds rounds (default 2), every
run reading its prompt afresh. reame alone. Goal as `speculative`'s: lookup at least
1.5x off on copying, no loss (0.97x) elsewhere.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from reame.benchmarks.common import Progress, Setup, how
from reame.benchmarks.report import Cell, Section, bars, median, plot, ratio, table
from reame.benchmarks.speculative import QUICK_PROMPTS
from reame.benchmarks.speculative_prompts import PROMPTS
from reame.shared.modes import SpeculativeMode
from reame.shared.protocol import ChatMessage, Delta, Done, Generate, Message, SamplingParams
from reame.worker.engine import Engine
from reame.worker.model import Model
from reame.worker.speculative.draft_model import vocabulary_problem
from reame.worker.speculative.setup import DRAFT_KV_TYPE, Speculation

OFF: Final = SpeculativeMode.OFF.value
LOOKUP: Final = SpeculativeMode.LOOKUP.value
MODEL: Final = SpeculativeMode.MODEL.value
FORCED: Final = "model!"
FORCED_DRAFTS: Final = 4
SAMPLED_TEMPERATURE: Final = 0.8
ROUNDS: Final = 2
MAX_TOKENS: Final = 200
QUICK_MAX_TOKENS: Final = 24
N_BATCH: Final = 512  # the configured default (model.n_batch)
DRAFT_MIN, DRAFT_MAX = 1, 15  # the configured defaults (speculative.draft_min, draft_max)
KINDS: Final = ("copy", "extract", "chat")
GOALS: Final = {"copy": 1.5, "extract": 0.97, "chat": 0.97}  # lookup / off, as `speculative`'s


@dataclass(frozen=True)
class Prompt:
    name: str
    kind: str
    text: str
    temperature: float = 0.0


@dataclass(frozen=True)
class Sample:
    """One request as the engine ran it."""

    tokens_per_s: float  # tokens after the first Delta, per second from the first Delta to the last
    tokens: int
    drafted: int
    accepted: int
    prompt_ms: float
    text: str


def prompts(quick: bool) -> list[Prompt]:
    """The shared prompts (their quick share with --quick), then the story sampled."""
    chosen = [Prompt(name, kind, text) for name, kind, text in PROMPTS if not quick or name in QUICK_PROMPTS]
    story = next(text for name, _, text in PROMPTS if name == "story")
    return [*chosen, Prompt("story-sampled", "chat", story, SAMPLED_TEMPERATURE)]


def in_turn(modes: Sequence[str], shift: int) -> list[str]:
    """``modes`` starting at ``shift``: each goes first in turn, so that drift hits them alike."""
    shift %= len(modes)
    return [*modes[shift:], *modes[:shift]]


@contextmanager
def forced(speculation: Speculation) -> Iterator[None]:
    """Model mode without the pay-off rule: FORCED_DRAFTS drafts verified at every step."""
    saved = speculation.adaptive, speculation.draft_min, speculation.draft_max
    speculation.adaptive, speculation.draft_min, speculation.draft_max = False, FORCED_DRAFTS, FORCED_DRAFTS
    try:
        yield
    finally:
        speculation.adaptive, speculation.draft_min, speculation.draft_max = saved


def generate(engine: Engine, speculation: Speculation, prompt: Prompt, mode: str, max_tokens: int,
             seed: int) -> Sample:
    """Run one chat request on the engine; time the decode from the first Delta to the last."""
    if mode == FORCED:
        with forced(speculation):
            return generate(engine, speculation, prompt, MODEL, max_tokens, seed)
    stamps: list[tuple[float, int]] = []
    out: list[Message] = []

    def send(message: Message) -> None:
        out.append(message)
        if isinstance(message, Delta):
            stamps.append((time.perf_counter(), message.tokens))

    # Every run reads its prompt afresh: a prefix kept from another prompt can change
    # greedy output at near-ties (batch numerics), which would blur the "same text" check.
    engine.kv.reset()
    if speculation.draft_kv is not None:
        speculation.draft_kv.reset()
    sampling = SamplingParams(temperature=prompt.temperature, seed=seed, max_tokens=max_tokens)
    request = Generate("bench", sampling, time.time() + 3600, messages=[ChatMessage("user", prompt.text)],
                       speculative=SpeculativeMode(mode), cache=False)
    engine.run(request, send, threading.Event())
    done = out[-1] if out else None
    if not isinstance(done, Done):
        raise RuntimeError(f"{prompt.name} in {mode}: the engine answered {done!r}")
    counted = sum(tokens for _, tokens in stamps[1:])
    elapsed = stamps[-1][0] - stamps[0][0] if len(stamps) > 1 else 0.0
    return Sample(counted / elapsed if elapsed > 0 else 0.0, done.completion_tokens, done.draft_tokens,
                  done.accepted_draft_tokens, done.prompt_ms, "".join(m.text for m in out if isinstance(m, Delta)))


def run(setup: Setup) -> Section:
    chosen = prompts(setup.quick)
    rounds = 1 if setup.quick else setup.rounds or ROUNDS
    max_tokens = QUICK_MAX_TOKENS if setup.quick else MAX_TOKENS
    target = Model(setup.model, setup.n_ctx, N_BATCH, setup.threads)
    draft = Model(setup.draft_model, target.n_ctx, N_BATCH, setup.threads, DRAFT_KV_TYPE) if setup.draft_model else None
    speculation = Speculation(SpeculativeMode.OFF, DRAFT_MIN, DRAFT_MAX, draft=draft)
    try:
        problem = vocabulary_problem(target, draft) if draft is not None else None
        if problem is not None:
            raise ValueError(f"the draft model {setup.draft_model} cannot draft for {setup.model}: {problem}")
        engine = Engine(target, speculation=speculation)
        engine.warm_up()  # measures the batch costs, as a worker does at start-up
        modes = [OFF, LOOKUP] + ([MODEL, FORCED] if draft is not None else [])
        samples: dict[tuple[str, str], list[Sample]] = {}
        progress = Progress(len(chosen) * rounds * len(modes), "speculative-engine")
        try:
            for index, prompt in enumerate(chosen):
                for round_ in range(rounds):
                    for mode in in_turn(modes, index + round_):
                        sample = generate(engine, speculation, prompt, mode, max_tokens, seed=round_)
                        samples.setdefault((prompt.name, mode), []).append(sample)
                        progress.step(f"{prompt.name} {mode}")
        finally:
            progress.close()
        costs = "batch costs in one-token decodes, measured at start-up: " + ", ".join(
            f"{size}: {cost:.2f}" for size, cost in speculation.costs.points)
        costs += f"; a draft-model token: {speculation.costs.draft:.2f}" if draft is not None else ""
    finally:
        speculation.close()
        target.close()
    runs = (f"{len(chosen)} prompts x {rounds} round(s) per mode, at most {max_tokens} tokens, greedy but "
            f"story-sampled (temperature {SAMPLED_TEMPERATURE}, seed = round), medians; the engine in this "
            "process, every run reading its prompt afresh"
            + (f"; draft model {setup.draft_model.name}" if setup.draft_model else ""))
    return report(setup, chosen, modes, samples, runs, [costs])


def report(setup: Setup, chosen: Sequence[Prompt], modes: Sequence[str],
           samples: dict[tuple[str, str], list[Sample]], runs: str, notes: list[str]) -> Section:
    speed = {key: median([s.tokens_per_s for s in got]) for key, got in samples.items()}

    def of_off(name: str, mode: str) -> float:
        return ratio(speed[(name, mode)], speed[(name, OFF)])

    header = ["prompt", "kind", "tokens", "off tok/s"]
    header += [column for mode in modes[1:] for column in (f"{mode} tok/s", f"{mode} / off (accepted/drafted)")]
    header.append("same text as off")
    rows: list[list[Cell]] = []
    for prompt in chosen:
        plain = samples[(prompt.name, OFF)][0]
        row: list[Cell] = [prompt.name + (f" (T={prompt.temperature})" if prompt.temperature else ""),
                           prompt.kind, plain.tokens, speed[(prompt.name, OFF)]]
        for mode in modes[1:]:
            got = samples[(prompt.name, mode)]
            accepted, drafted = sum(s.accepted for s in got), sum(s.drafted for s in got)
            row += [speed[(prompt.name, mode)], f"{of_off(prompt.name, mode):.2f} ({accepted}/{drafted})"]
        # Sampled runs differ by design; greedy ones should not (but at a near tie).
        same = all(s.text == plain.text for mode in modes for s in samples[(prompt.name, mode)])
        rows.append([*row, "-" if prompt.temperature else ("yes" if same else "no")])
    goal = []
    for mode in modes[1:]:
        for kind in KINDS:
            ratios = [max(1e-9, of_off(p.name, mode)) for p in chosen if p.kind == kind]
            if not ratios:
                continue
            mean = statistics.geometric_mean(ratios)
            line = f"{mode}/off on {kind}: geometric mean {mean:.2f}x, lowest {min(ratios):.2f}x"
            if mode == LOOKUP:
                line += f" (goal >= {GOALS[kind]}: {'met' if mean >= GOALS[kind] else 'NOT met'})"
            goal.append(line)
    prompt_ms = {mode: median([s.prompt_ms for p in chosen for s in samples[(p.name, mode)]]) for mode in modes}
    notes = [*notes, "median prompt time (ms): " + ", ".join(f"{mode} {ms:.0f}" for mode, ms in prompt_ms.items())]

    def draw(axes: Any) -> None:
        bars(axes, [p.name for p in chosen], {mode: [speed[(p.name, mode)] for p in chosen] for mode in modes},
             "decode tokens/s")
        axes.set_title("Decode speed per prompt, in-process")

    plots = [name for name in [plot(setup.out, "speculative_engine_decode.png", draw)] if name]
    return Section("Speculative decoding in-process: off, lookup, model and forced model", goal,
                   how(setup, runs), [table(header, rows, 2)], plots, notes)
