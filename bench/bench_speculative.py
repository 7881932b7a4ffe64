"""Measure speculative decoding against plain decoding, side by side, in one run.

Decode speed is counted from the first token to the last (prefill excluded) on
answers that copy from the prompt (repeat, fix spelling, quote clauses), on an
extraction to JSON, and on free-form chat (greedy, plus one sampled story), with
``lookup`` and, given a draft model, ``model`` against ``off``; ``model!`` is model
mode forced to verify FORCED_DRAFTS drafts at every step (no pay-off rule), to
show what the adaptive rule saves. The modes of a
prompt run back to back, in a rotating order, so that load from other
processes hits them alike; the engine runs in this process (no sockets), with
the worker's code and its start-up cost measurement.

    .venv/bin/python -m bench.bench_speculative [--model PATH] [--draft PATH] [--threads 1] [--rounds 2]

Prints a table per prompt and the ratios; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from reame.benchmarks.speculative_prompts import PROMPTS
from reame.shared.config import load
from reame.shared.model_file import model_path
from reame.shared.modes import SpeculativeMode
from reame.shared.protocol import ChatMessage, Delta, Done, Generate, Message, SamplingParams
from reame.worker.engine import Engine
from reame.worker.model import Model
from reame.worker.speculative.setup import Speculation

OFF, LOOKUP, MODEL = SpeculativeMode.OFF, SpeculativeMode.LOOKUP, SpeculativeMode.MODEL

SAMPLED_TEMPERATURE = 0.8
FORCED = "model!"
FORCED_DRAFTS = 4


@dataclass
class Sample:
    tokens_per_s: float
    tokens: int
    drafted: int
    accepted: int
    prompt_ms: float
    text: str


@dataclass
class Row:
    name: str
    kind: str
    temperature: float
    runs: dict[str, list[Sample]] = field(default_factory=dict)

    def median(self, mode: str) -> float:
        return statistics.median(s.tokens_per_s for s in self.runs[mode])

    def ratio(self, mode: str) -> float:
        return self.median(mode) / self.median(OFF)


def generate(engine: Engine, text: str, mode: str, temperature: float, max_tokens: int, seed: int) -> Sample:
    """Run one chat request; time the decode from the first Delta to the last."""
    speculation = engine.speculation
    assert speculation is not None
    if mode == FORCED:
        saved = speculation.adaptive, speculation.draft_min, speculation.draft_max
        speculation.adaptive, speculation.draft_min, speculation.draft_max = False, FORCED_DRAFTS, FORCED_DRAFTS
        try:
            return generate(engine, text, MODEL, temperature, max_tokens, seed)
        finally:
            speculation.adaptive, speculation.draft_min, speculation.draft_max = saved
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
    sampling = SamplingParams(temperature=temperature, seed=seed, max_tokens=max_tokens)
    request = Generate("bench", sampling, time.time() + 3600, messages=[ChatMessage("user", text)],
                       speculative=SpeculativeMode(mode), cache=False)
    engine.run(request, send, threading.Event())
    done = out[-1]
    assert isinstance(done, Done), done
    counted = sum(tokens for _, tokens in stamps[1:])  # tokens produced after the first Delta
    elapsed = stamps[-1][0] - stamps[0][0] if len(stamps) > 1 else 0.0
    return Sample(
        counted / elapsed if elapsed > 0 else 0.0, done.completion_tokens, done.draft_tokens,
        done.accepted_draft_tokens, done.prompt_ms, "".join(m.text for m in out if isinstance(m, Delta)),
    )


def bench(engine: Engine, modes: list[str], rounds: int, max_tokens: int) -> list[Row]:
    rows = [Row(name, kind, 0.0) for name, kind, _ in PROMPTS]
    story = next(text for name, _, text in PROMPTS if name == "story")
    rows.append(Row("story-sampled", "chat", SAMPLED_TEMPERATURE))
    texts = [text for _, _, text in PROMPTS] + [story]
    for index, (row, text) in enumerate(zip(rows, texts, strict=True)):
        for round_ in range(rounds):
            shift = (index + round_) % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                sample = generate(engine, text, mode, row.temperature, max_tokens, seed=round_)
                row.runs.setdefault(mode, []).append(sample)
        line = f"{row.name:14s} {row.kind:8s} T={row.temperature:.1f} tokens {row.runs[OFF][0].tokens:4d}"
        for mode in modes:
            samples = row.runs[mode]
            line += f" | {mode} {row.median(mode):6.2f} tok/s"
            if mode != OFF:
                drafted = sum(s.drafted for s in samples)
                accepted = sum(s.accepted for s in samples)
                same = all(s.text == row.runs[OFF][0].text for s in samples) if row.temperature == 0 else None
                line += f" x{row.ratio(mode):.2f} ({accepted}/{drafted} accepted{', same text' if same else ''})"
        print(line, flush=True)
    return rows


def summary(rows: list[Row], modes: list[str]) -> None:
    print("\n| prompt | kind | tokens | off tok/s | " + " | ".join(f"{m} tok/s | {m} / off" for m in modes[1:]) + " |")
    print("|---|---|---|---|" + "---|---|" * (len(modes) - 1))
    for row in rows:
        cells = [row.name + (f" (T={row.temperature})" if row.temperature else ""), row.kind,
                 str(row.runs[OFF][0].tokens), f"{row.median(OFF):.1f}"]
        for mode in modes[1:]:
            samples = row.runs[mode]
            drafted = sum(s.drafted for s in samples)
            accepted = sum(s.accepted for s in samples)
            cells += [f"{row.median(mode):.1f}", f"{row.ratio(mode):.2f} ({accepted}/{drafted})"]
        print("| " + " | ".join(cells) + " |")
    for mode in modes[1:]:
        for kind in ("copy", "extract", "chat"):
            ratios = [row.ratio(mode) for row in rows if row.kind == kind]
            print(f"{mode} / off, {kind}: geometric mean {statistics.geometric_mean(ratios):.2f}, "
                  f"lowest {min(ratios):.2f}")
    prompt_ms = {mode: statistics.median(s.prompt_ms for row in rows for s in row.runs[mode]) for mode in modes}
    print("median prompt time (ms): " + ", ".join(f"{mode} {ms:.0f}" for mode, ms in prompt_ms.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="target GGUF (default: the configured default model)")
    parser.add_argument("--draft", type=Path, help="draft GGUF for model mode (same vocabulary)")
    parser.add_argument("--threads", type=int, default=1, help="threads, as workers.threads (default 1)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--draft-max", type=int, default=15)
    args = parser.parse_args()
    path = args.model or model_path(load(None, {}))
    target = Model(path, 4096, 512, args.threads)
    draft = Model(args.draft, target.n_ctx, 512, args.threads) if args.draft else None
    speculation = Speculation(OFF, 1, args.draft_max, draft=draft)
    engine = Engine(target, speculation=speculation)
    engine.warm_up()
    costs = ", ".join(f"{size}: {cost:.2f}" for size, cost in speculation.costs.points)
    print(f"target {path.name}, draft {args.draft.name if args.draft else '-'}, {args.threads} thread(s), "
          f"max_tokens {args.max_tokens}, rounds {args.rounds}")
    print(f"measured batch costs (one-token decodes): {costs}"
          + (f"; draft token {speculation.costs.draft:.2f}" if draft else ""))
    modes = [OFF, LOOKUP] + ([MODEL, FORCED] if draft else [])
    rows = bench(engine, modes, args.rounds, args.max_tokens)
    summary(rows, modes)
    speculation.close()
    target.close()


if __name__ == "__main__":
    main()
