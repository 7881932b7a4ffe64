"""Decide what of a request is compressed, and how many tokens that saved.

Pure apart from the token counter it is given. Rules:

- each message content, and a raw completions prompt, is compressed when it is longer
  than ``min_tokens`` tokens;
- the final question is never altered. It is the last paragraph (the text after the
  last blank line) of the last user message, or of a completions prompt; when that
  paragraph is itself longer than ``min_tokens`` (a document whose question was added
  without a blank line) it is the last line. Only the part before it is compressed,
  and the whitespace between the two is kept as it was;
- assistant messages are left alone: they are the model's own words, and a last
  assistant message is a prefix the model continues;
- a cache warm request has no question: all of it is document;
- ``auto`` also returns the document prefix of what it sends (all before the
  excerpts, or only up to the last document when the question comes in a later
  message, as in a conversation), for a warm to read while a first question is
  answered otherwise; a conversation's later turn (a reply after the last document)
  gets no excerpts, so that its prompt extends the previous turn's.

Since ``off``, ``lossless`` and ``facts`` compress a text the same way whatever
follows it, a document sent before different questions gives the same compressed
prefix, and its KV cache is reused.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Final

from reame.gateway.compress import compress, excerpts
from reame.shared.chunking import part_breaks, split_at
from reame.shared.modes import CompressMode
from reame.shared.protocol import ChatMessage

COMPRESSED_ROLES: Final = frozenset({"system", "user", "tool"})
# ``auto`` restates the relevant lines under this heading, just before the final question.
EXCERPTS_HEADING: Final = "Relevant excerpts:"
_PARAGRAPH_BREAK: Final = re.compile(r"\n[ \t]*\n\s*")
_LINE_BREAK: Final = re.compile(r"\n\s*")


@dataclasses.dataclass(frozen=True)
class Policy:
    """How to compress: the mode, the size threshold, the budgets and the token counter."""

    mode: str
    min_tokens: int
    query_budget: int
    count: Callable[[str], int]
    excerpt_budget: int  # tokens of the lines auto restates before the question

    def long(self, text: str) -> bool:
        """Tell whether ``text`` has more than ``min_tokens`` tokens (counting only when it may)."""
        # A token covers at least one byte (plus a possible leading-space marker).
        if len(text.encode("utf-8")) + 1 <= self.min_tokens:
            return False
        return self.count(text) > self.min_tokens


@dataclasses.dataclass(frozen=True)
class Result:
    """The compressed text or messages and the tokens saved (original minus compressed).

    ``auto`` with excerpts also gives the document prefix (``prefix_prompt`` or
    ``prefix_messages``): all that comes before the excerpts, the same whatever the
    question, which a warm reads into the KV cache (gateway.api.plan).
    """

    saved_tokens: int = 0
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    prefix_prompt: str | None = None
    prefix_messages: list[ChatMessage] | None = None


def split_question(text: str, policy: Policy) -> tuple[str, str, str]:
    """Split ``text`` into (document, separator, final question); see the module doc."""
    breaks = list(_PARAGRAPH_BREAK.finditer(text.rstrip()))
    if breaks:
        last = breaks[-1]
        document, separator, question = text[: last.start()], last.group(0), text[last.end():]
        if not policy.long(question):
            return document, separator, question
    lines = list(_LINE_BREAK.finditer(text.rstrip()))
    if not lines:
        return "", "", text
    last = lines[-1]
    return text[: last.start()], last.group(0), text[last.end():]


def question_of(content: str, policy: Policy) -> str:
    """Return what ``query`` and ``auto`` rank by: a short user message whole, else its final question.

    A short message holds no document, so all of it is the question, instruction lines
    ("Answer briefly.") included; split_question's last line would be the instruction alone.
    """
    return content if not policy.long(content) else split_question(content, policy)[2]


def compress_messages(messages: list[ChatMessage], policy: Policy, *, warm: bool = False) -> Result:
    """Compress the long contents of a chat request (see the module doc)."""
    if policy.mode == "off":
        return Result(messages=messages)
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    question = ""
    if last_user >= 0 and not warm:
        question = question_of(messages[last_user].content, policy)
    saved = 0
    sources: list[str] = []  # auto: the original documents the excerpts are taken from
    last_document = -1  # the last message compressed as a document
    out: list[ChatMessage] = []
    for i, message in enumerate(messages):
        content = message.content
        if message.role in COMPRESSED_ROLES and policy.long(content):
            last_document = i
            has_question = i == last_user and not warm
            new, breaks, delta = _compress_parts(content, message.breaks, policy, question, has_question)
            sources.append(split_question(content, policy)[0] if has_question else content)
            if new != content:
                message = dataclasses.replace(message, content=new, breaks=breaks)
                saved += delta
        out.append(message)
    prefix: list[ChatMessage] | None = None
    if policy.mode == CompressMode.AUTO and question and sources and later_turn(messages, last_document, last_user):
        # A conversation's later turn restates nothing: the turn before was sent with its own
        # excerpts, which the client's history no longer holds, so restating would make each turn
        # read the previous question and reply again besides the new excerpts. Without them the
        # prompt extends the previous turn's and reads only the new turn. Whether the document is
        # read is still asked, of the messages up to it.
        prefix = out[: last_document + 1]
    elif policy.mode == CompressMode.AUTO and question and sources:
        quoted = _excerpts(sources, question, policy)
        if quoted:
            message = out[last_user]
            head = document_head(message.content, question)
            out[last_user] = dataclasses.replace(message, content=with_excerpts(message.content, quoted, question))
            if last_document < last_user:
                # The documents end before the question's message (in the system message, a
                # conversation's first turn): the turns after them are short and change at every
                # turn, so whether the document is read is asked of the messages up to it alone.
                prefix = out[: last_document + 1]
            else:
                kept = tuple(b for b in message.breaks if b < len(head))
                cut = dataclasses.replace(message, content=head, breaks=kept)
                prefix = out[:last_user] + ([cut] if head.strip() else [])
            # The restated lines cost tokens: what auto saved is what facts saved minus them (never below 0:
            # the counters only grow).
            saved = max(0, saved - policy.count(quoted) - policy.count(EXCERPTS_HEADING) - 1)
    return Result(saved_tokens=saved, messages=out, prefix_messages=prefix or None)


def later_turn(messages: list[ChatMessage], last_document: int, last_user: int) -> bool:
    """Tell whether the question's message follows a reply given after the last document (a conversation)."""
    return 0 <= last_document < last_user and any(m.role == "assistant" for m in messages[last_document + 1:last_user])


def with_excerpts(content: str, quoted: str, final: str) -> str:
    """Put ``quoted`` under its heading right before ``final``, the question that ends ``content``.

    What comes before is left byte for byte as it was, so a document sent in the last
    user message still starts the prompt the same way whatever the question.
    """
    return f"{document_head(content, final)}{EXCERPTS_HEADING}\n{quoted}\n\n{final}"


def document_head(content: str, final: str) -> str:
    """Return what :func:`with_excerpts` keeps of ``content`` before the excerpts: all but ``final``."""
    return content[: len(content) - len(final)] if content.endswith(final) else content + "\n\n"


def _excerpts(sources: list[str], question: str, policy: Policy) -> str:
    """Return the lines of the original documents that query ranks relevant to ``question``."""
    return excerpts("\n\n".join(sources), question, policy.excerpt_budget, policy.count)


def compress_prompt(prompt: str, policy: Policy, *, warm: bool = False) -> Result:
    """Compress a raw completions prompt; its last paragraph is the question unless ``warm``."""
    if policy.mode == "off" or not policy.long(prompt):
        return Result(prompt=prompt)
    question = "" if warm else split_question(prompt, policy)[2]
    new, saved = _compress(prompt, policy, question, not warm)
    saved = saved if new != prompt else 0
    prefix = None
    if policy.mode == CompressMode.AUTO and question:
        quoted = _excerpts([split_question(prompt, policy)[0]], question, policy)
        if quoted:
            head = document_head(new, question)
            prefix = head if head.strip() else None
            new = with_excerpts(new, quoted, question)
            saved = max(0, saved - policy.count(quoted) - policy.count(EXCERPTS_HEADING) - 1)
    return Result(saved_tokens=saved, prompt=new, prefix_prompt=prefix)


def _compress_parts(
    text: str, breaks: tuple[int, ...], policy: Policy, question: str, has_question: bool
) -> tuple[str, tuple[int, ...], int]:
    """Compress a content sent in parts part by part, so its part breaks (ChatMessage.breaks) hold after."""
    if not breaks:
        new, saved = _compress(text, policy, question, has_question)
        return new, (), saved
    parts = split_at(text, breaks)
    out: list[str] = []
    saved = 0
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        if policy.long(part):
            part, delta = _compress(part, policy, question, has_question and last)
            saved += delta
        out.append(part)
    return "".join(out), part_breaks(out), saved


def _compress(text: str, policy: Policy, question: str, has_question: bool) -> tuple[str, int]:
    """Compress ``text`` (keeping its final question if it has one); return it and the tokens saved."""
    if has_question:
        document, separator, final = split_question(text, policy)
        if not document.strip():
            return text, 0
        compressed = _mode(document, policy, question)
        new = compressed + separator + final if compressed else final
        before, after = policy.count(document), policy.count(compressed)
    else:
        new = _mode(text, policy, question)
        before, after = policy.count(text), policy.count(new)
    return new, before - after


def _mode(text: str, policy: Policy, question: str) -> str:
    return compress(text, policy.mode, question=question, budget=policy.query_budget, count=policy.count)
