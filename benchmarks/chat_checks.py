"""Two small checks of the default mode beside `conversation` (issue #27, goals 4 and 5).

A short chat with no document, each reply appended, turns back to back: every turn
should find the whole turn before it cached (its prompt and its reply, less a few tokens
where the chat template's boundary tokenizes differently), which holds only when each
turn goes to the worker holding the one before. And a document of one long paragraph,
over `query`'s budget, with a code word in its middle: `query` and `auto` must keep the
sentence that holds it, or the model cannot answer.
"""

from __future__ import annotations

import itertools
from typing import Any

from reame.benchmarks.common import Progress, Setup, Timing, ask, nonce
from reame.benchmarks.report import Cell, table
from reame.benchmarks.server import start_server

CHAT = ("Hello! Who are you?", "Tell me a fact about the sea.", "And one about rivers.", "Which is larger?",
        "Thank you, goodbye.")
# The reply re-tokenized inside the chat template may split differently from the tokens
# generated, and the last sampled token is never evaluated.
BOUNDARY_TOKENS = 8
CODE_WORD = "PELICAN-77"
CODE_QUESTION = "What is the secret code word?"
CODE_MODES = ("auto", "query")
REFERENCE_MODE = "off"  # the whole paragraph: whether the model answers at all
MAX_TOKENS = 24
STEPS = len(CHAT) + len(CODE_MODES) + 1


def one_paragraph() -> str:
    """About 1,200 tokens in a single paragraph (no line break to split at), the code word in sentence 41 of 71."""
    sentences = [f"Item {i} of the spring catalogue ships from the northern warehouse within {2 + i % 3} working days."
                 for i in range(70)]
    return " ".join([*sentences[:40], f"The secret code word is {CODE_WORD}.", *sentences[40:]])


def short_chat(client: Any, progress: Progress) -> list[Timing]:
    messages: list[dict[str, Any]] = []
    timings: list[Timing] = []
    for turn in CHAT:
        messages.append({"role": "user", "content": turn})
        timing = ask(client, messages, MAX_TOKENS)
        messages.append({"role": "assistant", "content": timing.text})
        timings.append(timing)
        progress.step("short chat")
    return timings


def reused(timings: list[Timing]) -> list[bool]:
    """Whether each turn after the first found cached the previous prompt and its reply, less BOUNDARY_TOKENS."""
    return [(turn.cached_tokens or 0) >= (before.prompt_tokens or 0) + before.tokens - BOUNDARY_TOKENS
            for before, turn in itertools.pairwise(timings)]


def code_word(client: Any, mode: str) -> Timing:
    """The code word question about the one-paragraph document (a fresh nonce: nothing stored is found)."""
    messages = [{"role": "system", "content": nonce() + one_paragraph()}, {"role": "user", "content": CODE_QUESTION}]
    return ask(client, messages, MAX_TOKENS, extra_body={"reame": {"compress": mode}})


def run(setup: Setup, progress: Progress) -> tuple[list[str], list[str]]:
    """The goal lines and tables of both checks, on reame in its default layout and mode."""
    server = start_server(setup.tmp / "chat-checks", setup.threads, **setup.overrides(compress_mode="auto"))
    try:
        client = server.client(timeout=900)
        chat = short_chat(client, progress)
        answers = {}
        for mode in (*CODE_MODES, REFERENCE_MODE):
            answers[mode] = code_word(client, mode)
            progress.step(f"code word, {mode}")
    finally:
        server.stop()
    return report(chat, answers)


def report(chat: list[Timing], answers: dict[str, Timing]) -> tuple[list[str], list[str]]:
    kept = reused(chat)
    said = {mode: CODE_WORD.lower() in timing.text.lower() for mode, timing in answers.items()}
    goal_said = {mode: ok for mode, ok in said.items() if mode in CODE_MODES}
    goal = [f"reame, a {len(chat)}-turn short chat: each turn's cached tokens >= the previous prompt and its reply "
            f"- {BOUNDARY_TOKENS} in {sum(kept)} of {len(kept)} (goal: all: {'met' if all(kept) else 'NOT met'})",
            "reame, a document of one long paragraph: the code word answered in "
            + ", ".join(f"{mode} {'yes' if ok else 'NO'}" for mode, ok in goal_said.items())
            + f" (goal: both: {'met' if all(goal_said.values()) else 'NOT met'})"
            + (f"; read whole ({REFERENCE_MODE}) {'yes' if said[REFERENCE_MODE] else 'NO'}"
               if REFERENCE_MODE in said else "")]
    chat_rows: list[list[Cell]] = [
        [n, t.prompt_tokens, t.cached_tokens, t.tokens, "-" if n == 1 else ("yes" if kept[n - 2] else "NO")]
        for n, t in enumerate(chat, start=1)]
    code_rows: list[list[Cell]] = [
        [mode, t.compression, t.prompt_tokens, t.text.strip().splitlines()[0] if t.text.strip() else "",
         "yes" if said[mode] else "NO"] for mode, t in answers.items()]
    return goal, [table(["short chat turn", "prompt tokens", "cached", "reply tokens", "turn before reused"],
                        chat_rows),
                  table(["code word, mode", "applied", "prompt tokens", "answer", "has the code word"], code_rows)]
