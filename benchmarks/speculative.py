"""Scenario `speculative`: decode speed with speculative decoding off and on, reame and the peer.

Decode speed is counted by the client from the first streamed token to the last
(prefill excluded), on answers that copy from the prompt (rewrite), an extraction to
JSON and free chat, greedy. Sides: reame with `"reame": {"speculative": "off"}` and
`"lookup"` (and `"model"` given --draft-model), the peer plain and the peer with
`--draft_model prompt-lookup-decoding` (its own lookup). The sides of a prompt run back
to back in a rotating order. Goal: lookup at least 1.5x off on copying, no loss on chat.
"""

from __future__ import annotations

import statistics
from typing import Any

from reame.benchmarks.common import Peer, Progress, Setup, Timing, ask, both, how
from reame.benchmarks.report import Section, bars, median, plot, ratio, table
from reame.benchmarks.speculative_prompts import PROMPTS

QUICK_PROMPTS = ("repeat", "extract-json", "story")


def run(setup: Setup) -> Section:
    prompts = [p for p in PROMPTS if p[0] in QUICK_PROMPTS] if setup.quick else list(PROMPTS)
    rounds, max_tokens = (1, 24) if setup.quick else (2, 200)
    sides = ["reame off", "reame lookup"] + (["reame model"] if setup.draft_model else []) + ["peer", "peer lookup"]
    progress = Progress(len(prompts) * rounds * len(sides), "speculative")
    plain = Peer(setup.model, setup.threads, setup.n_ctx, setup.tmp / "spec-peer.log", extra=())
    lookup = Peer(setup.model, setup.threads, setup.n_ctx, setup.tmp / "spec-peer-lookup.log",
                  extra=("--draft_model", "prompt-lookup-decoding"))
    draft = {"speculative_draft_model_path": str(setup.draft_model)} if setup.draft_model else {}
    runs: dict[tuple[str, str], list[Timing]] = {}
    lookup.launch()
    try:
        with both(setup, "speculative", 1, plain, workers_threads=str(setup.threads), **draft) as (reame, _):
            lookup.wait()
            ours, peers = reame.client(timeout=900), {"peer": plain.client(), "peer lookup": lookup.client()}
            for index, (name, _kind, text) in enumerate(prompts):
                for round_ in range(rounds):
                    shift = (index + round_) % len(sides)
                    for side in sides[shift:] + sides[:shift]:
                        messages = [{"role": "user", "content": text}]
                        if side.startswith("reame"):
                            mode = side.split()[1]
                            timing = ask(ours, messages, max_tokens,
                                         extra_body={"reame": {"speculative": mode, "cache": False}})
                        else:
                            timing = ask(peers[side], messages, max_tokens)
                        runs.setdefault((name, side), []).append(timing)
                        progress.step(f"{name} {side}")
    finally:
        lookup.stop()
        progress.close()
    return report(setup, prompts, sides, runs, rounds, max_tokens)


def report(setup: Setup, prompts: list[tuple[str, str, str]], sides: list[str],
           runs: dict[tuple[str, str], list[Timing]], rounds: int, max_tokens: int) -> Section:
    speed = {key: median([t.decode_tps for t in got]) for key, got in runs.items()}
    rows: list[list[Any]] = []
    for name, kind, _ in prompts:
        off, peer = speed[(name, "reame off")], speed[(name, "peer")]
        row: list[Any] = [name, kind, runs[(name, "reame off")][0].tokens, off]
        row += [ratio(speed[(name, side)], off) for side in sides[1:] if side.startswith("reame")]
        row += [peer, ratio(speed[(name, "peer lookup")], peer)]
        same = all(t.text == runs[(name, "reame off")][0].text for t in runs[(name, "reame lookup")])
        rows.append([*row, "yes" if same else "no"])
    header = ["prompt", "kind", "tokens", "reame off tok/s"] + [f"{s.split()[1]} / off" for s in sides[1:]
                                                                if s.startswith("reame")]
    header += ["peer tok/s", "peer lookup / peer", "reame lookup: same text"]
    goal = []
    for kind in ("copy", "extract", "chat"):
        names = [name for name, k, _ in prompts if k == kind]
        if not names:
            continue
        ours = statistics.geometric_mean([max(1e-9, ratio(speed[(n, "reame lookup")], speed[(n, "reame off")]))
                                          for n in names])
        theirs = statistics.geometric_mean([max(1e-9, ratio(speed[(n, "peer lookup")], speed[(n, "peer")]))
                                            for n in names])
        target = ">= 1.5" if kind == "copy" else ">= 0.97"
        goal.append(f"{kind}: reame lookup/off {ours:.2f}x (goal {target}: "
                    f"{'met' if ours >= float(target.split()[1]) else 'NOT met'}), peer lookup/plain {theirs:.2f}x")
    plain = statistics.geometric_mean([max(1e-9, ratio(speed[(n, "reame off")], speed[(n, "peer")]))
                                       for n, _, _ in prompts])
    goal.append(f"plain decoding, reame off/peer: {plain:.2f}x")

    def draw(axes: Any) -> None:
        bars(axes, [name for name, _, _ in prompts], {side: [speed[(n, side)] for n, _, _ in prompts]
                                                      for side in sides}, "decode tokens/s")
        axes.set_title("Decode speed per prompt")

    plots = [name for name in [plot(setup.out, "speculative_decode.png", draw)] if name]
    runs_text = (f"{len(prompts)} prompts x {rounds} round(s) per side, at most {max_tokens} tokens, greedy, "
                 "medians; reame 1 worker, its prompt cache off per request; peers without a prompt cache"
                 + (f"; draft model {setup.draft_model.name}" if setup.draft_model else ""))
    return Section("Speculative decoding", goal, how(setup, runs_text), [table(header, rows, 2)], plots)
