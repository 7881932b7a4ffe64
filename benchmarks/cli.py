"""`reame bench [SCENARIO ...]`: every claim measured side by side with its peers, with progress and plots.

Each scenario runs reame and its peers (benchmarks.peers: llama.cpp's llama-server and
llama-cpp-python's server, --peer) on the same model, threads and prompts, in one run,
prints a Markdown table, the ratio its goal is stated in and how the figures were taken;
REPORT.md and the PNG plots go to --out.
Needs the `bench` extra (`pip install 'reame[bench]'`: llama-cpp-python's server, tqdm, matplotlib).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the runtime imports wait for `run`: they need the bench extra (openai ...)
    from reame.benchmarks.common import Setup
    from reame.benchmarks.report import Section

SCENARIOS: Final[dict[str, str]] = {
    "qa": "repeated-document QA: TTFT cold, warm and after a restart",
    "load": "concurrent load: 8 clients over 4 documents, req/s and p50/p95",
    "compress": "compression: the exam with off, lossless and facts",
    "speculative": "speculative decoding: decode tok/s off against lookup",
    "overhead": "overhead: the stack against the same prompt in-process",
    "extract": "extraction into a JSON schema: valid JSON and decode tok/s, speculative off against lookup",
    "first": "first question about a new document: auto against a cold read with compression off",
    "rag": "a retriever's documents in changing orders and company: chunk mode against llama-server --cache-reuse",
    "rag-exam": "chunk mode's accuracy: the fact exam with three documents a question, chunks against whole reads",
    "conversation": "six turns about a document in the system message, back to back, against llama-server",
}
# Run only when named (`reame bench answers`): not by default nor in the --quick smoke test,
# whose CI budget is tight; each measures one mechanism of reame alone, without the peer.
DEEP: Final[dict[str, str]] = {
    "answers": "answer cache: a repeated greedy request, fresh (worker) against a hit",
    "restart": "TTFT after a restart of reame on the same store, and where the restore goes",
    "back-to-back": "a new document's second question sent as soon as the first is answered, TTFT of the first's",
    "lone": "a cold request alone: N workers x 1 thread lending their threads against 1 worker x N threads",
    "metrics": "a /metrics scrape, idle and while 8 streams run",
    "speculative-engine": "speculative decoding on the engine in this process: off, lookup, model, model forced",
    "exam": "the fact exam in query and auto (--modes), back to back (--settle: with a reader's pauses)",
    "batch-costs": "a verification batch in one-token decodes, the weights mapped or read, repacked or not",
    "fleet": "a document read on host A, asked about on host B sharing only the Redis tier (needs redis-server)",
}
MODULES: Final = {"qa": "qa", "load": "load", "compress": "compression", "speculative": "speculative",
                  "overhead": "overhead", "extract": "extract", "first": "first",
                  "rag": "rag", "rag-exam": "rag_exam", "conversation": "conversation",
                  "answers": "answers", "restart": "restart",
                  "back-to-back": "back_to_back", "lone": "lone", "metrics": "metrics",
                  "speculative-engine": "speculative_engine", "batch-costs": "batch_costs", "exam": "exam_modes",
                  "fleet": "fleet"}


def default_exam() -> Path:
    """``../shared/eval`` beside the working directory, else beside this source checkout."""
    here = Path.cwd().parent / "shared" / "eval"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / "shared" / "eval"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenarios", metavar="SCENARIO", nargs="*",
                        help="what to run (default: all of these): "
                        + "; ".join(f"{k}: {v}" for k, v in SCENARIOS.items())
                        + ". Run only when named: " + "; ".join(f"{k}: {v}" for k, v in DEEP.items()))
    parser.add_argument("--model", metavar="PATH", type=Path, help="GGUF model (default: the configured model)")
    parser.add_argument("--draft-model", metavar="PATH", type=Path,
                        help="draft GGUF for speculative model mode (same vocabulary); batch-costs: a second "
                        "model to measure")
    parser.add_argument("--exam", metavar="DIR", type=Path, default=None,
                        help="the fact exam: docs/*.txt and questions.jsonl (default: ../shared/eval)")
    parser.add_argument("--out", metavar="DIR", type=Path, default=Path("bench-report"),
                        help="where REPORT.md and the plots go (default: bench-report); the sections of "
                        "scenarios not run now are kept from an earlier REPORT.md there")
    parser.add_argument("--threads", metavar="N", type=int, default=os.cpu_count() or 1,
                        help="threads of each server (default: the CPUs here)")
    parser.add_argument("--quick", action="store_true", help="a tiny run of each scenario (a smoke test)")
    parser.add_argument("--limit", metavar="N", type=int, default=0,
                        help="rag-exam and exam: the first N questions of each document's share (default: all)")
    parser.add_argument("--rounds", metavar="N", type=int, default=0,
                        help="rounds of the scenarios that repeat a measurement (default: each scenario's own)")
    parser.add_argument("--modes", metavar="LIST", default="",
                        help="exam: compression modes, comma-separated, in this order (default: query,auto)")
    parser.add_argument("--sides", metavar="LIST", default="",
                        help="rag-exam: the ways each question is read, comma-separated, of chunks, parts and "
                        "whole (default: all three)")
    parser.add_argument("--settle", action="store_true",
                        help="exam: before each question wait until the server has nothing running (a reader "
                        "between questions); by default questions follow each other back to back")
    parser.add_argument("--hard", action="store_true",
                        help="exam: also ask the harder questions of benchmarks/hard_questions.jsonl (near-miss "
                        "numbers, negations, conditions) about the exam's documents")
    parser.add_argument("--llama-server", metavar="PATH", type=Path, default=None,
                        help="llama.cpp's llama-server binary (default: $REAME_BENCH_LLAMA_SERVER, `make peer`'s "
                        "build, or llama-server on PATH)")
    parser.add_argument("--peer", metavar="PEER", default=None,
                        help="both, llama-server or llama-cpp-python: the servers to measure reame against "
                        "(default: every one found here); one named and not found is an error")


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `reame --help` and `reame serve` build this parser on a
    # plain install, which lacks what the benchmarks need (openai, the bench extra).
    from reame.benchmarks import llama_server, peers
    from reame.benchmarks.common import Setup, machine
    from reame.benchmarks.report import write
    from reame.shared.config import ConfigError, load
    from reame.shared.model_file import ModelFileError, model_path

    chosen = list(dict.fromkeys(args.scenarios)) or list(SCENARIOS)
    refusal = unknown_scenarios(chosen) or unknown_sides(args.sides)
    if refusal:
        print(f"reame bench: {refusal}", file=sys.stderr)
        return 2
    binary = llama_server.find(args.llama_server)
    try:
        chosen_peers = peers.choose(args.peer, binary, peers.llama_cpp_python_installed())
    except peers.PeerError as err:
        print(f"reame bench: {err}", file=sys.stderr)
        return 2
    try:
        config = load(None, environ={"REAME_MODEL_PATH": str(args.model)} if args.model else {})
        model = model_path(config).resolve()
    except (ConfigError, ModelFileError) as err:
        print(f"reame bench: {err}", file=sys.stderr)
        return 2
    sections: list[Section] = []
    failed: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reame-bench-") as tmp:
        setup = Setup(model=model, draft_model=args.draft_model, exam=args.exam or default_exam(), out=args.out,
                      threads=args.threads, quick=args.quick, n_ctx=config.model.n_ctx, tmp=Path(tmp),
                      llama_server=binary, peers=chosen_peers, limit=args.limit, rounds=args.rounds,
                      modes=tuple(mode for mode in args.modes.split(",") if mode),
                      sides=tuple(side for side in args.sides.split(",") if side), settle=args.settle,
                      hard=args.hard)
        for name in chosen:
            print(f"\n== {name}: {describe(name)}", flush=True)
            try:
                section = scenario(name)(setup)
            except Exception as err:
                traceback.print_exc()
                print(f"reame bench: {name} failed: {err}", file=sys.stderr)
                failed.append(name)
                continue
            sections.append(section)
            print(section.markdown(), flush=True)
    run_line = (f"`reame bench {command_line(chosen, args)}`, "
                f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {time.monotonic() - started:.0f} s. {machine()}.")
    for section in sections:
        section.run = run_line
    path = write(args.out, sections)
    print(f"report: {path}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def unknown_scenarios(chosen: list[str]) -> str:
    """Why ``chosen`` is refused (names no scenario has), or "" when every name is known."""
    unknown = [name for name in chosen if name not in SCENARIOS and name not in DEEP]
    if not unknown:
        return ""
    return f"no scenario {', '.join(unknown)}; choose from {', '.join([*SCENARIOS, *DEEP])}"


def unknown_sides(sides: str) -> str:
    """Why ``--sides`` is refused (names rag-exam has no side for), or "" when every name is known."""
    from reame.benchmarks.rag_exam import SIDES

    unknown = [side for side in sides.split(",") if side and side not in SIDES]
    return f"no rag-exam side {', '.join(unknown)}; choose from {', '.join(SIDES)}" if unknown else ""


def describe(name: str) -> str:
    return SCENARIOS.get(name) or DEEP[name]


def command_line(chosen: list[str], args: argparse.Namespace) -> str:
    """The options that shape the figures, as a user would type them (model files by name)."""
    words = [*chosen, "--threads", str(args.threads), *(["--limit", str(args.limit)] if args.limit else []),
             *(["--rounds", str(args.rounds)] if args.rounds else []), *(["--modes", args.modes] if args.modes else []),
             *(["--sides", args.sides] if args.sides else []),
             *(["--settle"] if args.settle else []), *(["--hard"] if args.hard else []),
             *(["--peer", args.peer] if args.peer else [])]
    for flag, path in (("--model", args.model), ("--draft-model", args.draft_model), ("--exam", args.exam)):
        if path:
            words += [flag, path.name]
    return " ".join(words + (["--quick"] if args.quick else []))


def scenario(name: str) -> Callable[[Setup], Section]:
    import importlib

    module = importlib.import_module(f"reame.benchmarks.{MODULES[name]}")
    runner: Callable[[Setup], Section] = module.run
    return runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reame bench", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
