"""Scenario `speculative`: decode speed with speculative decoding off and on, reame and the peers.

Decode speed is counted by the client from the first streamed token to the last
(prefill excluded), on answers that copy from the prompt (rewrite), an extraction to
JSON and free chat, greedy. Sides: reame with `"reame": {"speculative": "off"}` and
`"lookup"` (and `"model"` given --draft-model), each peer plain and with its own
prompt lookup (llama-server `--spec-type ngram-simple`, llama_cpp.server `--draft_model
prompt-lookup-decoding`). The sides of a prompt run back to back in a rotating order.
Goal: lookup at least 1.5x off on copying, no loss on chat.
"""

from __future__ import annotations

import contextlib
import statistics
from typing import Any

from reame.benchmarks import peers
from reame.benchmarks.common import Progress, Setup, Timing, ask, how
from reame.benchmarks.report import Section, bars, median, plot, ratio, table
from reame.benchmarks.server import start_server
from reame.benchmarks.speculative_prompts import PROMPTS

QUICK_PROMPTS = ("repeat", "extract-json", "story")


def run(setup: Setup) -> Section:
    prompts = [p for p in PROMPTS if p[0] in QUICK_PROMPTS] if setup.quick else list(PROMPTS)
    rounds, max_tokens = (1, 24) if setup.quick else (2, 200)
    theirs = [side for peer in setup.peers for side in (peer, f"{peer} lookup")]
    sides = ["reame off", "reame lookup"] + (["reame model"] if setup.draft_model else []) + theirs
    progress = Progress(len(prompts) * rounds * len(sides), "speculative")
    draft = {"speculative_draft_model_path": str(setup.draft_model)} if setup.draft_model else {}
    runs: dict[tuple[str, str], list[Timing]] = {}
    try:
        with contextlib.ExitStack() as stack:
            reame = start_server(setup.tmp / "speculative", 1,
                                 **setup.overrides(workers_threads=str(setup.threads), **draft))
            stack.callback(reame.stop)
            ours = reame.client(timeout=900)
            # The peers without their prompt cache, as reame's requests go without theirs.
            clients = {side: stack.enter_context(peers.serving(setup, side.split()[0], f"spec-{i}", cache=False,
                                                               lookup=side.endswith("lookup")))
                       for i, side in enumerate(theirs)}
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
                            timing = ask(clients[side], messages, max_tokens)
                        runs.setdefault((name, side), []).append(timing)
                        progress.step(f"{name} {side}")
    finally:
        progress.close()
    return report(setup, prompts, sides, runs, rounds, max_tokens)


def report(setup: Setup, prompts: list[tuple[str, str, str]], sides: list[str],
           runs: dict[tuple[str, str], list[Timing]], rounds: int, max_tokens: int) -> Section:
    speed = {key: median([t.decode_tps for t in got]) for key, got in runs.items()}
    ours = [side for side in sides if side.startswith("reame")]
    rows: list[list[Any]] = []
    for name, kind, _ in prompts:
        off = speed[(name, "reame off")]
        row: list[Any] = [name, kind, runs[(name, "reame off")][0].tokens, off]
        row += [ratio(speed[(name, side)], off) for side in ours[1:]]
        for peer in setup.peers:
            row += [speed[(name, peer)], ratio(speed[(name, f"{peer} lookup")], speed[(name, peer)])]
        same = all(t.text == runs[(name, "reame off")][0].text for t in runs[(name, "reame lookup")])
        rows.append([*row, "yes" if same else "no"])
    header = ["prompt", "kind", "tokens", "reame off tok/s"] + [f"{s.split()[1]} / off" for s in ours[1:]]
    for peer in setup.peers:
        header += [f"{peer} tok/s", f"{peer} lookup / {peer}"]
    header += ["reame lookup: same text"]

    def gain(fast: str, slow: str, names: list[str]) -> float:
        return statistics.geometric_mean([max(1e-9, ratio(speed[(n, fast)], speed[(n, slow)])) for n in names])

    goal = []
    for kind in ("copy", "extract", "chat"):
        names = [name for name, k, _ in prompts if k == kind]
        if not names:
            continue
        mine = gain("reame lookup", "reame off", names)
        target = ">= 1.5" if kind == "copy" else ">= 0.97"
        goal.append(f"{kind}: reame lookup/off {mine:.2f}x (goal {target}: "
                    f"{'met' if mine >= float(target.split()[1]) else 'NOT met'})"
                    + "".join(f", {peer} lookup/plain {gain(f'{peer} lookup', peer, names):.2f}x"
                              for peer in setup.peers))
    every = [name for name, _, _ in prompts]
    for peer in setup.peers:
        goal.append(f"plain decoding, reame off/{peer}: {gain('reame off', peer, every):.2f}x; "
                    f"lookup, reame/{peer}: {gain('reame lookup', f'{peer} lookup', every):.2f}x")
    goal += peers.missing_lines(setup)

    def draw(axes: Any) -> None:
        bars(axes, [name for name, _, _ in prompts], {side: [speed[(n, side)] for n, _, _ in prompts]
                                                      for side in sides}, "decode tokens/s")
        axes.set_title("Decode speed per prompt")

    plots = [name for name in [plot(setup.out, "speculative_decode.png", draw)] if name]
    runs_text = (f"{len(prompts)} prompts x {rounds} round(s) per side, at most {max_tokens} tokens, greedy, "
                 "medians; reame 1 worker, its prompt cache off per request"
                 + (f"; draft model {setup.draft_model.name}" if setup.draft_model else ""))
    extra = "; ".join(peers.describe(peer, setup.threads, lookup=lookup, cache=False)
                      for peer in setup.peers for lookup in (False, True))
    return Section("Speculative decoding", goal, how(setup, runs_text, extra), [table(header, rows, 2)], plots)
