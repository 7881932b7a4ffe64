"""Evaluate prompt compression on the fact exam: retention, reduction, cost, and answers through a server.

Over an eval directory (``docs/*.txt`` and ``questions.jsonl``, see its README):

1. Fact retention per mode: apply each question's ``accept`` regex to its ``span``;
   the fact is retained if the matched text occurs in the compressed document
   (case-insensitive, whitespace runs collapsed). Critical facts are counted apart.
   ``query`` compresses the document once per question, with that question.
2. Token reduction per mode (the model's tokenizer) and compression time per document,
   and the ceiling for ``facts``: the tokens of the sentences it must keep (those with
   a number, a negation or a condition), alone and in note style.
3. Exam accuracy through a real `reame serve` (started here, or ``--url``), with
   compression off, lossless, facts, query and auto in one run (``--modes``; each mode
   with its own cache salt, so no mode reuses another's KV state): each question is asked with the
   document as the system message and the question plus an instruction to answer
   briefly as the user message, greedy. Only the first non-empty line of the reply is
   graded: OK (accept matches, reject does not), HALLU (reject matches), MISS.
   Time to first token is measured per request: "first" is each document's first
   question in a mode (the whole prompt is read), "later" the others (the document's
   KV state comes from the cache). "read" is what the model read per question
   (prompt less cached tokens); "crit wrong" counts critical questions not answered OK.

``auto`` answers a first question about a document from ``query``'s text while the
document is read in the background (gateway.warming); the table's "as query" column
counts those answers. Back to back, a later question pre-empts that read and is
answered as ``query`` again until the read is done; ``--settle`` waits before each
question until the server has nothing running (a reader between questions), so the
read finishes and later questions show auto's cached speed.

``--extra FILE`` adds questions about the same documents (``bench/hard_questions.jsonl``:
near-miss numbers, negations, conditions, facts far from the question's words);
``--extra-only`` asks only those.

    .venv/bin/python -m bench.eval_compress [--eval DIR] [--model PATH] [--limit N]
                                            [--url URL] [--no-exam] [--json FILE]
                                            [--instruction TEXT] [--modes off,auto]
                                            [--extra FILE [--extra-only]] [--settle]

Prints tables; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai

from reame.benchmarks.exam import INSTRUCTION, Question, flat, grade
from reame.benchmarks.server import start_server
from reame.gateway.compress import compress, excerpts
from reame.gateway.compress.facts import is_hard
from reame.gateway.compress.messages import Policy, compress_messages
from reame.gateway.compress.segment import Kind, sentences, split_lines
from reame.gateway.compress.telegraph import shorten
from reame.gateway.tokenizer import Tokenizer
from reame.shared.config import CompressConfig, load
from reame.shared.model_file import model_path
from reame.shared.protocol import ChatMessage

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EVAL = REPO.parent / "shared" / "eval"
RETENTION_MODES = ("lossless", "facts", "query", "auto")
EXAM_MODES = ("off", "lossless", "facts", "query", "auto")
HARD_QUESTIONS = REPO / "bench" / "hard_questions.jsonl"
MAX_TOKENS = 32


@dataclasses.dataclass
class Answer:
    question: Question
    mode: str
    text: str
    grade: str
    ttft_s: float
    cold: bool
    prompt_tokens: int
    uncompressed_tokens: int
    cached_tokens: int = 0
    compression: str = ""


def read_questions(path: Path) -> list[Question]:
    return [Question(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_exam(
    directory: Path, limit: int | None, extra: Path | None = None, extra_only: bool = False
) -> tuple[dict[str, str], list[Question]]:
    """Read the documents and questions; ``limit`` keeps the first N exam questions per document (not extras)."""
    docs = {path.name: path.read_text(encoding="utf-8") for path in sorted((directory / "docs").glob("*.txt"))}
    questions = [] if extra_only else read_questions(directory / "questions.jsonl")
    if limit is not None:
        per_doc: dict[str, int] = {}
        kept = []
        for q in questions:
            per_doc[q.doc] = per_doc.get(q.doc, 0) + 1
            if per_doc[q.doc] <= limit:
                kept.append(q)
        questions = kept
    if extra is not None:
        questions += read_questions(extra)
        docs = {name: text for name, text in docs.items() if any(q.doc == name for q in questions)}
    questions = [q for q in questions if q.doc in docs]  # an eval directory with fewer documents
    return docs, questions


def retention(
    docs: dict[str, str], questions: list[Question], tokenizer: Tokenizer, budgets: CompressConfig
) -> dict[str, Any]:
    """Compress every document in every mode; return retention, tokens and times per mode."""
    rows: dict[str, Any] = {}
    original = sum(tokenizer.count(text) for text in docs.values())
    for mode in RETENTION_MODES:
        tokens, times, kept, lost = 0, [], {True: [0, 0], False: [0, 0]}, []
        compressed: dict[str, str] = {}
        if mode not in ("query", "auto"):
            for name, text in docs.items():
                start = time.perf_counter()
                compressed[name] = compress(text, mode)
                times.append(time.perf_counter() - start)
                tokens += tokenizer.count(compressed[name])
        query_tokens: list[float] = []
        for q in questions:
            if mode == "query":
                start = time.perf_counter()
                text = compress(
                    docs[q.doc], mode, question=q.question, budget=budgets.query_budget, count=tokenizer.count
                )
                times.append(time.perf_counter() - start)
                query_tokens.append(tokenizer.count(text) / tokenizer.count(docs[q.doc]))
            elif mode == "auto":  # the facts document, then the excerpts restated for this question
                start = time.perf_counter()
                quoted = excerpts(docs[q.doc], q.question, budgets.excerpt_budget, tokenizer.count)
                text = compress(docs[q.doc], "facts") + "\n\n" + quoted
                times.append(time.perf_counter() - start)
                query_tokens.append(tokenizer.count(text) / tokenizer.count(docs[q.doc]))
            else:
                text = compressed[q.doc]
            hit = flat(q.fact) in flat(text)
            kept[q.critical][0] += hit
            kept[q.critical][1] += 1
            if not hit:
                lost.append(q.id)
        ratio = statistics.mean(query_tokens) if query_tokens else tokens / original
        rows[mode] = {
            "critical_retained": kept[True][0], "critical_total": kept[True][1],
            "all_retained": kept[True][0] + kept[False][0], "all_total": kept[True][1] + kept[False][1],
            "lost": lost, "token_ratio": ratio, "tokens": None if query_tokens else tokens,
            "ms_per_doc": 1000 * statistics.median(times),
        }
    rows["original_tokens"] = original
    return rows


def cost(docs: dict[str, str], tokenizer: Tokenizer, min_tokens: int) -> dict[str, float]:
    """Time the gateway's whole compression of each document in facts mode (token counting included)."""
    policy = Policy("facts", min_tokens, 0, tokenizer.count, 0)
    times, saved, sizes = [], [], []
    for text in docs.values():
        messages = [ChatMessage("system", text), ChatMessage("user", "What is the price?")]
        start = time.perf_counter()
        result = compress_messages(messages, policy)
        times.append(time.perf_counter() - start)
        saved.append(result.saved_tokens)
        sizes.append(tokenizer.count(text))
    return {"ms": 1000 * statistics.mean(times), "saved_tokens": statistics.mean(saved),
            "tokens": statistics.mean(sizes)}


def ceiling(docs: dict[str, str], tokenizer: Tokenizer) -> dict[str, int]:
    """Count the tokens of the sentences facts must keep (a number, negation or condition), as is and in note style.

    What is left if everything else went: the most any compressor that never drops such
    a sentence, nor a word of it besides telegraph's, can reach.
    """
    original = hard = short = 0
    for text in docs.values():
        original += tokenizer.count(text)
        lines = split_lines(compress(text, "lossless"))
        kept = [s for line in lines if line.kind is not Kind.BLANK for s in sentences(line.text) if is_hard(s)]
        hard += tokenizer.count("\n".join(kept))
        short += tokenizer.count("\n".join(shorten(s) for s in kept))
    return {"original": original, "hard": hard, "hard_telegraphed": short}


def print_ceiling(row: dict[str, int]) -> None:
    print(f"\nSentences with a number, negation or condition: {row['hard']} of {row['original']} tokens; "
          f"alone and in note style {row['hard_telegraphed']}, a reduction of "
          f"{100 * (1 - row['hard_telegraphed'] / row['original']):.1f} % (the ceiling for facts)")


def print_cost(row: dict[str, float], rates: dict[str, float]) -> None:
    print(f"\nCost of facts in the gateway (token counting included), mean over documents of "
          f"{row['tokens']:.0f} tokens: {row['ms']:.1f} ms, saving {row['saved_tokens']:.0f} prompt tokens")
    for name, rate in rates.items():
        prefill = row["saved_tokens"] / rate
        print(f"  prefill saved at {rate:.0f} tok/s ({name}): {prefill:.2f} s; compression costs "
              f"{100 * row['ms'] / 1000 / prefill:.2f} % of it")


@contextmanager
def server_url(url: str | None, model: str | None, workers: int, threads: int) -> Iterator[str]:
    if url:
        yield url
        return
    overrides = {"workers_threads": str(threads)}
    if model:
        overrides["model_path"] = model
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), workers=workers, **overrides)
        try:
            yield server.base_url
        finally:
            server.stop()


def ask(
    client: openai.OpenAI, document: str, question: Question, mode: str, instruction: str
) -> tuple[str, float, Any]:
    start = time.perf_counter()
    first = 0.0
    parts = []
    usage = None
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": document},
                  {"role": "user", "content": f"{question.question}\n{instruction}"}],
        temperature=0, max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True},
        # A cache salt per mode: facts and auto send the same document, and auto's first
        # question must not find it read by facts. No answer cache: every answer is generated.
        extra_body={"reame": {"compress": mode, "cache_salt": f"eval-{mode}", "answer_cache": False}},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    return "".join(parts), (first or time.perf_counter()) - start, usage


def settle(url: str, timeout: float = 900.0) -> None:
    """Wait until the server at ``url`` (…/v1) runs and queues nothing, background reads included."""
    ready = url.rstrip("/").removesuffix("/v1") + "/ready"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with urllib.request.urlopen(ready, timeout=10) as response:
            state = json.loads(response.read())
        if state["running"] == 0 and state["queued"] == 0:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{ready} still busy after {timeout:.0f} s")


def exam(
    url: str, docs: dict[str, str], questions: list[Question], instruction: str, modes: list[str],
    wait: bool = False,
) -> list[Answer]:
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=900)
    answers = []
    for name in docs:
        for mode in modes:
            for i, q in enumerate(q for q in questions if q.doc == name):
                if wait:
                    settle(url)
                text, ttft, usage = ask(client, docs[name], q, mode, instruction)
                extra = (usage.model_extra or {}).get("reame", {}) if usage is not None else {}
                answers.append(Answer(
                    q, mode, text, grade(q, text), ttft, i == 0,
                    usage.prompt_tokens if usage else 0, extra.get("uncompressed_prompt_tokens", 0),
                    usage.prompt_tokens - extra.get("read_tokens", usage.prompt_tokens) if usage else 0,
                    extra.get("compression", ""),
                ))
                a = answers[-1]
                print(f"{q.id:10} {mode:8} {a.grade:5} {ttft:6.2f}s read {a.prompt_tokens - a.cached_tokens:5} "
                      f"as {a.compression:6} {text.strip()[:60]!r}", flush=True)
    return answers


def percent(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}% ({a}/{b})" if b else "-"


def print_retention(rows: dict[str, Any]) -> None:
    print(f"\nFact retention and size ({rows['original_tokens']} tokens uncompressed over all documents)")
    print(f"{'mode':10}{'critical':>18}{'all facts':>18}{'tokens':>10}{'reduction':>11}{'ms/doc':>9}  lost")
    for mode in RETENTION_MODES:
        r = rows[mode]
        tokens = "-" if r["tokens"] is None else str(r["tokens"])
        print(f"{mode:10}{percent(r['critical_retained'], r['critical_total']):>18}"
              f"{percent(r['all_retained'], r['all_total']):>18}{tokens:>10}"
              f"{100 * (1 - r['token_ratio']):>10.1f}%{r['ms_per_doc']:>9.1f}  {' '.join(r['lost']) or '-'}")


def print_exam(answers: list[Answer], modes: list[str]) -> None:
    print("\nExam through the server (first non-empty line graded)")
    print(f"{'mode':10}{'OK':>14}{'MISS':>8}{'HALLU':>7}{'critical OK':>16}{'crit wrong':>11}{'prompt tok':>12}"
          f"{'read first':>11}{'read later':>11}{'TTFT first':>11}{'TTFT later':>11}{'as query':>9}")
    for mode in modes:
        mine = [a for a in answers if a.mode == mode]
        if not mine:
            continue
        crit = [a for a in mine if a.question.critical]
        counts = {g: sum(a.grade == g for a in mine) for g in ("OK", "MISS", "HALLU")}
        cold = [a.ttft_s for a in mine if a.cold]
        warm = [a.ttft_s for a in mine if not a.cold]
        read_first = [a.prompt_tokens - a.cached_tokens for a in mine if a.cold]
        read_later = [a.prompt_tokens - a.cached_tokens for a in mine if not a.cold]
        print(f"{mode:10}{percent(counts['OK'], len(mine)):>14}{counts['MISS']:>8}{counts['HALLU']:>7}"
              f"{percent(sum(a.grade == 'OK' for a in crit), len(crit)):>16}"
              f"{sum(a.grade != 'OK' for a in crit):>11}"
              f"{statistics.mean(a.prompt_tokens for a in mine):>12.0f}"
              f"{statistics.median(read_first):>11.0f}"
              + (f"{statistics.median(read_later):>11.0f}" if read_later else f"{'-':>11}")
              + f"{statistics.median(cold):>10.2f}s" + (f"{statistics.median(warm):>10.2f}s" if warm else f"{'-':>11}")
              + f"{sum(a.compression == 'query' for a in mine):>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help=f"eval directory (default {DEFAULT_EVAL})")
    parser.add_argument("--model", help="GGUF path (default: the configured or embedded model)")
    parser.add_argument("--url", help="base URL of a running server (…/v1) instead of starting one")
    parser.add_argument("--limit", type=int, help="only the first N questions of each document")
    parser.add_argument("--no-exam", action="store_true", help="retention and reduction only, no server")
    parser.add_argument("--modes", default=",".join(EXAM_MODES), help="exam modes, comma-separated, in this order")
    parser.add_argument("--extra", type=Path, nargs="?", const=HARD_QUESTIONS,
                        help=f"also ask the questions of this file (default {HARD_QUESTIONS.name})")
    parser.add_argument("--extra-only", action="store_true", help="ask only the --extra questions")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="threads per worker")
    parser.add_argument("--json", type=Path, help="also write every result to this file")
    parser.add_argument("--settle", action="store_true",
                        help="before each question wait until the server runs nothing (background reads included)")
    parser.add_argument("--instruction", default=INSTRUCTION,
                        help=f"what follows each question (default {INSTRUCTION!r}); another wording shows "
                             "whether a difference between modes is more than a near-tie")
    args = parser.parse_args()

    # REAME_COMPRESS_* variables reach the server started here, so the retention figures use them too.
    environ = {k: v for k, v in os.environ.items() if k.startswith("REAME_COMPRESS_")}
    if args.model:
        environ["REAME_MODEL_PATH"] = args.model
    config = load(None, environ=environ)
    path = model_path(config)
    tokenizer = Tokenizer(path)
    tokenizer.load()
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    docs, questions = load_exam(args.eval, args.limit, args.extra, args.extra_only)
    print(f"model: {path.name}; {len(docs)} documents, {len(questions)} questions"
          + (f" (first {args.limit} per document)" if args.limit else ""))
    rows = retention(docs, questions, tokenizer, config.compress)
    print_retention(rows)
    bound = ceiling(docs, tokenizer)
    print_ceiling(bound)
    spent = cost(docs, tokenizer, config.compress.min_tokens)
    rates = {"default model, NOTES-llama.md": 215.0, "Qwen2.5-Coder-1.5B, NOTES-llama.md": 90.0}
    print_cost(spent, rates)
    answers: list[Answer] = []
    if not args.no_exam:
        with server_url(args.url, args.model, args.workers, args.threads) as url:
            answers = exam(url, docs, questions, args.instruction, modes, args.settle)
        cold = [a for a in answers if a.mode == "off" and a.cold]
        if cold:
            rates["measured: off, cold"] = sum(a.prompt_tokens for a in cold) / sum(a.ttft_s for a in cold)
        print_retention(rows)
        print_cost(spent, rates)
        print_exam(answers, modes)
    if args.json:
        args.json.write_text(json.dumps({
            "model": path.name, "retention": rows, "ceiling": bound, "cost": spent, "prefill_rates": rates,
            "answers": [{"id": a.question.id, "mode": a.mode, "grade": a.grade, "text": a.text, "ttft_s": a.ttft_s,
                         "cold": a.cold, "prompt_tokens": a.prompt_tokens, "cached_tokens": a.cached_tokens,
                         "compression": a.compression,
                         "uncompressed_prompt_tokens": a.uncompressed_tokens} for a in answers],
        }, indent=1))


if __name__ == "__main__":
    main()
