"""Call formats: which templates write tool calls themselves, the Hermes/Qwen grammar, reading calls back.

data/qwen2.5-chat-template.jinja is ``tokenizer.chat_template`` of
qwen2.5-coder-1.5b-instruct-q4_k_m.gguf, copied as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

from reame.gateway.api.tool_calls import CallFormat, classify, parse_reply
from reame.gateway.api.tools import as_tool_call, parse_tools
from tests.gbnf import accepts
from tests.unit.test_worker_chat_template import CHATML

QWEN: Final = (Path(__file__).parent / "data" / "qwen2.5-chat-template.jinja").read_text()
WEATHER: Any = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}}
PARIS: Final = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ROME: Final = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
FENCED: Final = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
NAMES: Final = {"get_weather"}


def test_qwens_template_writes_hermes_calls_and_smollms_has_no_tools() -> None:
    assert classify(QWEN) is CallFormat.HERMES
    assert classify(CHATML) is CallFormat.GENERIC
    assert classify(None) is CallFormat.GENERIC and classify("") is CallFormat.GENERIC


@pytest.mark.parametrize(
    "source",
    [
        "{# tools and <tool_call> and tool_calls only in a comment #}{{ messages[0].content }}",
        "{% for m in messages %}{{ m.content }}{% endfor %}<tool_call> tool_calls",  # never reads `tools`
        "{% if tools %}<tool_call>{% endif %}{{ tool_calls",  # does not parse
    ],
)
def test_templates_that_do_not_read_tools_and_write_calls_are_generic(source: str) -> None:
    assert classify(source) is CallFormat.GENERIC


def test_the_hermes_grammar_under_auto() -> None:
    tools = parse_tools({"tools": [WEATHER]}, CallFormat.HERMES)
    assert tools is not None
    grammar = tools.grammar
    assert accepts(grammar, PARIS) and accepts(grammar, f"{PARIS}\n{ROME}")
    assert accepts(grammar, "It is sunny.") and accepts(grammar, "a < b, <tool but not a call")
    assert accepts(grammar, f"Let me look.\n{PARIS}")  # text, then calls
    assert not accepts(grammar, "Hi <tool_call> there") and not accepts(grammar, "")
    assert not accepts(grammar, PARIS.replace("Paris", "Paris\", \"x\": \"1"))  # arguments follow the schema
    assert not accepts(grammar, PARIS.replace("get_weather", "rm_rf"))
    # Qwen2.5-Coder's fenced calls: a reply that opens a ```json fence is a call; text never opens one.
    assert accepts(grammar, FENCED) and accepts(grammar, f"{FENCED}\n{FENCED}")
    assert not accepts(grammar, "```json\n[1, 2]\n```") and not accepts(grammar, "```json")
    assert accepts(grammar, "```python\nprint(1)\n```") and accepts(grammar, "See:\n```json\n[1]\n```")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_the_hermes_grammar_forced_and_one_call(choice: Any) -> None:
    tools = parse_tools({"tools": [WEATHER], "tool_choice": choice}, CallFormat.HERMES)
    assert tools is not None
    assert accepts(tools.grammar, PARIS) and accepts(tools.grammar, f"{PARIS}\n{ROME}")
    assert not accepts(tools.grammar, "It is sunny.") and not accepts(tools.grammar, f"Let me look.\n{PARIS}")
    assert not accepts(tools.grammar, FENCED)  # forced calls take the template's own form
    single = parse_tools({"tools": [WEATHER], "tool_choice": choice, "parallel_tool_calls": False}, CallFormat.HERMES)
    assert single is not None and accepts(single.grammar, PARIS) and not accepts(single.grammar, f"{PARIS}\n{ROME}")


def test_hermes_replies_become_calls_with_distinct_ids() -> None:
    reply = parse_reply(f"{PARIS}\n{ROME}", CallFormat.HERMES, NAMES)
    assert reply is not None and reply.content is None
    assert [json.loads(c["function"]["arguments"]) for c in reply.calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert reply.calls[0]["id"] != reply.calls[1]["id"] and all(c["id"].startswith("call_") for c in reply.calls)
    fenced = parse_reply(f"{FENCED}\n{FENCED}", CallFormat.HERMES, NAMES)
    assert fenced is not None and fenced.content is None and len(fenced.calls) == 2
    assert parse_reply(f" {FENCED}", CallFormat.HERMES, NAMES) is None  # not where the grammar held it
    with_text = parse_reply(f"Let me look.\n{PARIS}", CallFormat.HERMES, NAMES)
    assert with_text is not None and with_text.content == "Let me look." and len(with_text.calls) == 1


@pytest.mark.parametrize(
    "text",
    [
        "It is sunny.",
        PARIS.replace("get_weather", "other"),
        PARIS.replace("</tool_call>", ""),  # cut short
        PARIS[:30],
        f"{PARIS} and then some text",
        '<tool_call>\n{"name": "get_weather", "arguments": "Paris"}\n</tool_call>',
    ],
)
def test_hermes_replies_that_are_not_whole_calls_stay_text(text: str) -> None:
    assert parse_reply(text, CallFormat.HERMES, NAMES) is None


def test_generic_replies_one_object_a_line() -> None:
    one = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    reply = parse_reply(f"{one}\n{one}", CallFormat.GENERIC, NAMES)
    assert reply is not None and len(reply.calls) == 2 and reply.content is None
    assert parse_reply(PARIS, CallFormat.GENERIC, NAMES) is None
    assert parse_reply(f"{one}\nbye", CallFormat.GENERIC, NAMES) is None


def test_a_hermes_choice_keeps_the_text_before_the_calls() -> None:
    tools = parse_tools({"tools": [WEATHER]}, CallFormat.HERMES)
    choice = as_tool_call({"index": 0}, f"Let me look.\n{PARIS}\n{ROME}", tools, True)
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me look."
    assert len(choice["message"]["tool_calls"]) == 2
