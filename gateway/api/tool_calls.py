"""The two forms a tool call takes in a reply, the grammar of such a reply, and reading calls back.

Pure. Which form a model uses is a fact of its chat template, read once per gateway
process (gateway.api.resources.Settings: the GGUF's ``tokenizer.chat_template``, through
gateway.compress.tokenizer's vocabulary-only load, the same text the worker renders with) and
classified by :func:`classify`:

- ``HERMES``: the template lists ``tools`` itself and writes the history's calls as
  Hermes and Qwen2.5 (and Qwen3) do, each in a ``<tool_call>\\n{"name": ..., "arguments":
  {...}}\\n</tool_call>`` block. The worker hands it the functions and the history's
  calls and results (Generate.tools, ChatMessage.tool_calls); a reply is text that never
  holds ``<tool_call>``, or calls (blocks one per line), possibly after such text. Under
  ``auto`` calls may also come in ```` ```json ```` fences, as Qwen2.5-Coder writes them
  (llama.cpp's Hermes parser takes them too): a reply that opens such a fence is held
  to calls, and text never starts with one.
- ``GENERIC``: any other template. gateway.api.tools lists the functions in a system note and
  writes the history as plain turns; a reply is text that does not start with ``{``, or
  calls as bare JSON objects, one per line.

``required`` and a named function allow calls only; ``parallel_tool_calls`` false allows
exactly one call. The calls' JSON comes from the functions' parameter schemas
(gateway.api.tools builds it with gateway.grammar.schema_gbnf; here it is the rule ``reame-call-json``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from typing import Any, Final

import jinja2
import jinja2.ext
import jinja2.meta

CALL_ID_PREFIX: Final = "call_"
OPEN: Final = "<tool_call>"
CLOSE: Final = "</tool_call>"
FENCE_OPEN: Final = "```json"
FENCE_CLOSE: Final = "```"

Json = dict[str, Any]


class CallFormat(enum.StrEnum):
    GENERIC = "generic"
    HERMES = "hermes"


def classify(template: str | None) -> CallFormat:
    """Return the call format of a chat template's source (GENERIC when it has no tool support we know)."""
    if not template or OPEN not in template or "tool_calls" not in template:
        return CallFormat.GENERIC
    try:
        # Only parsed, never rendered: an unknown tag (HF's {% generation %}) is a syntax error here.
        parsed = jinja2.Environment(extensions=[jinja2.ext.loopcontrols]).parse(template)
    except jinja2.TemplateSyntaxError:
        return CallFormat.GENERIC
    # `tools` read as a variable (not just said in the text): the template lists the functions.
    return CallFormat.HERMES if "tools" in jinja2.meta.find_undeclared_variables(parsed) else CallFormat.GENERIC


def reply_grammar(call_json: str, fmt: CallFormat, auto: bool, parallel: bool) -> str:
    """Return the GBNF of a reply, given ``call_json``: a grammar whose root is one call's JSON object."""
    rules = [("reame-call-json ::=" + line[len("root ::="):]) if line.startswith("root ::=") else line
             for line in call_json.splitlines()]
    call = f'"{_gbnf(OPEN)}\\n" reame-call-json "\\n{_gbnf(CLOSE)}"' if fmt is CallFormat.HERMES else "reame-call-json"
    rules.append(f"reame-call ::= {call}")
    rules.append('reame-calls ::= reame-call ("\\n" reame-call)*' if parallel else "reame-calls ::= reame-call")
    if not auto:
        return "\n".join([*rules, "root ::= reame-calls"])
    if fmt is CallFormat.GENERIC:
        # Plain text: anything that does not open a JSON object (nor starts with blanks, which could hide one).
        rules.append("reame-text ::= [^{ \\t\\r\\n\\x00] [^\\x00]*")
        return "\n".join([*rules, "root ::= reame-calls | reame-text"])
    fenced = f'"{FENCE_OPEN}\\n" reame-call-json "\\n{FENCE_CLOSE}"'
    rules.append(f'reame-fenced ::= {fenced} ("\\n" {fenced})*' if parallel else f"reame-fenced ::= {fenced}")
    return "\n".join([
        *rules, *_text_without(OPEN, FENCE_OPEN), "root ::= reame-calls | reame-fenced | reame-text reame-calls?",
    ])


def _text_without(word: str, opening: str) -> list[str]:
    """Rules for ``reame-text``: non-empty text that never holds ``word`` and does not start with ``opening``.

    An automaton in GBNF: rule ``reame-tK`` is "the text so far ends with word[:K]",
    ``reame-sK`` "the text so far is opening[:K]". It is this simple because word's
    first character occurs in it only once, and in ``opening`` not at all.
    """
    first, head = _char(word[0]), _char(opening[0])
    rules = [
        f"reame-text ::= [^{first}{head}\\x00] reame-t0 | \"{_gbnf(word[0])}\" reame-t1 | "
        f"\"{_gbnf(opening[0])}\" reame-s1",
        f"reame-t0 ::= [^{first}\\x00]* (\"{_gbnf(word[0])}\" reame-t1)?",
    ]
    for k in range(1, len(opening)):
        alternatives = ['""', f'"{_gbnf(word[0])}" reame-t1', f"[^{first}{_char(opening[k])}\\x00] reame-t0"]
        if k + 1 < len(opening):  # the whole opening would start a fence: no way on
            alternatives.append(f'"{_gbnf(opening[k])}" reame-s{k + 1}')
        rules.append(f"reame-s{k} ::= " + " | ".join(alternatives))
    for k in range(1, len(word)):
        alternatives = ['""', f'"{_gbnf(word[0])}" reame-t1', f"[^{first}{_char(word[k])}\\x00] reame-t0"]
        if k + 1 < len(word):  # the last character would complete the word: no way on
            alternatives.append(f'"{_gbnf(word[k])}" reame-t{k + 1}')
        rules.append(f"reame-t{k} ::= " + " | ".join(alternatives))
    return rules


def _gbnf(text: str) -> str:
    """Escape text for a GBNF string literal."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _char(c: str) -> str:
    """Escape one character for a GBNF character class."""
    return "\\" + c if c in "\\]^-[" else c


@dataclasses.dataclass(frozen=True)
class Reply:
    """A reply that calls functions: the text before the calls (None if none) and the OpenAI ``tool_calls``."""

    content: str | None
    calls: list[Json]


def parse_reply(text: str, fmt: CallFormat, names: set[str]) -> Reply | None:
    """Return the calls ``text`` makes of the functions ``names``; None if it is not calls in ``fmt``."""
    if fmt is CallFormat.HERMES and text.startswith(FENCE_OPEN):  # only there does the grammar hold it
        content, rest, opener, closer = None, text, FENCE_OPEN, FENCE_CLOSE
    elif fmt is CallFormat.HERMES:
        at = text.find(OPEN)
        if at < 0:
            return None
        content, rest, opener, closer = text[:at].strip() or None, text[at:], OPEN, CLOSE
    else:
        if not text.lstrip().startswith("{"):
            return None
        content, rest, opener, closer = None, text, "", ""
    decoder = json.JSONDecoder()
    calls: list[Json] = []
    at = 0
    while True:
        at = _skip_blanks(rest, at)
        if at == len(rest):
            break
        if not rest.startswith(opener, at):
            return None
        try:
            value, at = decoder.raw_decode(rest, _skip_blanks(rest, at + len(opener)))
        except ValueError:
            return None
        at = _skip_blanks(rest, at)
        if not rest.startswith(closer, at):
            return None
        at += len(closer)
        if not isinstance(value, dict) or value.get("name") not in names or not isinstance(value.get("arguments"),
                                                                                            dict):
            return None
        calls.append(new_call(value["name"], value["arguments"]))
    return Reply(content, calls) if calls else None


def _skip_blanks(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def new_call(name: str, arguments: Json) -> Json:
    """Return an OpenAI tool call with a fresh id; its arguments as JSON text, as OpenAI sends them."""
    return {
        "id": CALL_ID_PREFIX + uuid.uuid4().hex[:24],
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }
