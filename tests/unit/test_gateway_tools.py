"""Tools: reading tools and tool_choice, the grammar, the history, the reply (generic fallback and template)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reame.gateway.api.tool_calls import CallFormat
from reame.gateway.api.tools import as_tool_call, flatten_history, history_calls, offer, parse_tools, template_tools
from reame.gateway.http.errors import APIError
from reame.shared.protocol import ChatMessage, ToolCall, ToolFunction
from tests.gbnf import accepts

ADD: Any = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "integer"}},
    "required": ["a", "b"], "additionalProperties": False}}}
NESTED: Any = {"type": "function", "function": {"name": "ship", "parameters": {
    "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    "type": "object", "properties": {"to": {"$ref": "#/$defs/Address"}}, "required": ["to"]}}}


def test_no_tools_or_choice_none_means_no_grammar() -> None:
    assert parse_tools({}) is None
    assert parse_tools({"tools": []}) is None
    assert parse_tools({"tools": [ADD], "tool_choice": "none"}) is None


@pytest.mark.parametrize(
    ("choice", "expected"),
    [(None, "auto"), ("auto", "auto"), ("required", "required"), ({"type": "function", "function": {"name": "add"}},
                                                                    "add")],
)
def test_tool_choice(choice: Any, expected: str) -> None:
    tools = parse_tools({"tools": [ADD, NESTED], "tool_choice": choice})
    assert tools is not None and tools.choice == expected and tools.names == {"add", "ship"}
    rules = dict(line.split(" ::= ", 1) for line in tools.grammar.splitlines())
    assert "root" in rules
    if expected == "auto":
        assert rules["root"] == "reame-calls | reame-text"
    else:
        assert rules["root"] == "reame-calls"
    if expected == "add":
        assert '"\\"ship\\""' not in tools.grammar  # only the named function may be called


def test_a_functions_defs_are_hoisted_and_renamed() -> None:
    tools = parse_tools({"tools": [NESTED, ADD], "tool_choice": "required"})
    assert tools is not None and "f0-Address" in tools.grammar


def test_the_legacy_functions_form() -> None:
    tools = parse_tools({"functions": [ADD["function"]], "function_call": {"name": "add"}})
    assert tools is not None and tools.legacy and tools.choice == "add"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": "add"}, "tools"),
        ({"tools": [ADD, ADD]}, "tools"),
        ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [ADD], "tool_choice": 3}, "tool_choice"),
        ({"tools": [ADD], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"tools": [ADD], "response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
            "x": {"type": "string", "pattern": "(?=a)"}}}}}]}, "tools[0].function.parameters.properties.x.pattern"),
        ({"tools": [ADD, {"type": "function", "function": {"name": "g", "parameters": {"$defs": {"D": {
            "type": "number", "minimum": 1}}, "type": "object", "properties": {"d": {"$ref": "#/$defs/D"}}}}}]},
         "tools[1].function.parameters.$defs.D.minimum"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
         "tools[0].function.parameters"),
    ],
)
def test_bad_tools_are_400_naming_the_part(fields: Any, param: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_tools(fields)
    assert caught.value.param == param


def test_the_functions_are_offered_in_a_system_note() -> None:
    tools = parse_tools({"tools": [ADD], "tool_choice": "required"})
    assert tools is not None
    alone = offer([ChatMessage("user", "2+3?")], tools)
    assert alone[0].role == "system" and '"name": "add"' in alone[0].content and "where" not in alone[0].content
    merged = offer([ChatMessage("system", "Be brief."), ChatMessage("user", "2+3?")], tools)
    assert len(merged) == 2 and merged[0].content.startswith("Be brief.\n\n")
    assert offer(alone, None) == alone


def test_history_writes_calls_back_as_the_model_would_have_said_them() -> None:
    history = flatten_history([
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        {"role": "function", "name": "add", "content": "5"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
    ], 100)
    assert isinstance(history, list)
    assert history[1] == {"role": "assistant", "content": '{"name": "add", "arguments": {"a": 2, "b": 3}}'}
    assert history[2]["role"] == "tool" and history[3]["role"] == "tool"
    assert history[4]["content"] == [{"type": "text", "text": "I cannot."}]
    assert flatten_history("not a list", 100) == "not a list"


def test_a_reply_that_calls_becomes_tool_calls() -> None:
    tools = parse_tools({"tools": [ADD]})
    assert tools is not None
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}
    shaped = as_tool_call(choice, '{"name": "add", "arguments": {"a": 1, "b": 2}}', tools, True)
    assert shaped["finish_reason"] == "tool_calls" and shaped["message"]["content"] is None
    (call,) = shaped["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert json.loads(call["function"]["arguments"]) == {"a": 1, "b": 2}
    assert as_tool_call(choice, '{"name": "add", "arguments": {"a": 1, "b": 2}}', tools, False) is choice
    assert as_tool_call(choice, "Hello", tools, True) is choice


def test_several_calls_one_per_line_each_with_its_own_id() -> None:
    tools = parse_tools({"tools": [ADD, NESTED]})
    assert tools is not None and tools.parallel
    text = '{"name": "add", "arguments": {"a": 1, "b": 2}}\n{"name": "ship", "arguments": {"to": {"city": "Rome"}}}'
    assert accepts(tools.grammar, text)
    calls = as_tool_call({"index": 0}, text, tools, True)["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["add", "ship"] and calls[0]["id"] != calls[1]["id"]
    assert "one object per line" in offer([ChatMessage("user", "hi")], tools)[0].content


def test_parallel_tool_calls_false_allows_exactly_one() -> None:
    one = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
    for choice in ("auto", "required"):
        tools = parse_tools({"tools": [ADD], "tool_choice": choice, "parallel_tool_calls": False})
        assert tools is not None and not tools.parallel
        assert accepts(tools.grammar, one) and not accepts(tools.grammar, f"{one}\n{one}")
        assert "several" not in offer([ChatMessage("user", "hi")], tools)[0].content


def test_generic_auto_allows_text_that_does_not_open_an_object() -> None:
    tools = parse_tools({"tools": [ADD]})
    assert tools is not None
    assert accepts(tools.grammar, "It is 5.") and not accepts(tools.grammar, '{"a": 1}')
    assert not accepts(tools.grammar, "  {") and not accepts(tools.grammar, "")
    required = parse_tools({"tools": [ADD], "tool_choice": "required"})
    assert required is not None and not accepts(required.grammar, "It is 5.")


def test_a_template_format_lists_no_note_and_sends_the_functions() -> None:
    tools = parse_tools({"tools": [ADD]}, CallFormat.HERMES)
    assert tools is not None and tools.format is CallFormat.HERMES
    messages = [ChatMessage("user", "2+3?")]
    assert offer(messages, tools) == messages
    (sent,) = template_tools(tools) or []
    assert sent == ToolFunction("add", json.dumps(ADD["function"]["parameters"]), "Add two integers.")
    huge = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer", "maximum": 10**30}}}}}
    (wide,) = template_tools(parse_tools({"tools": [huge]}, CallFormat.HERMES)) or []
    assert json.loads(wide.parameters)["properties"]["x"]["maximum"] == 10**30  # past msgpack's 64 bits: text
    assert template_tools(parse_tools({"tools": [ADD]})) is None


def test_a_template_format_keeps_the_historys_calls() -> None:
    history = flatten_history([
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "assistant", "content": None, "function_call": {"name": "add", "arguments": "{}"}},
        {"role": "function", "name": "add", "content": "5"},
    ], 100, CallFormat.HERMES)
    assert isinstance(history, list)
    assert history[0]["tool_calls"][0]["id"] == "call_1"
    assert history[1]["tool_calls"] == [{"type": "function", "function": {"name": "add", "arguments": "{}"}}]
    assert "function_call" not in history[1] and history[2]["role"] == "tool"
    calls, call_id = history_calls(history[0], "messages[0]")
    assert calls == (ToolCall("add", '{"a": 2, "b": 3}', "call_1"),) and call_id is None
    assert history_calls({"tool_call_id": "call_1"}, "m") == ((), "call_1")
    dict_arguments = {"tool_calls": [{"function": {"name": "add", "arguments": {"a": 1}}}]}
    assert history_calls(dict_arguments, "m")[0] == (ToolCall("add", '{"a": 1}'),)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tool_calls": "add"}, "m.tool_calls"),
        ({"tool_calls": [{"type": "function"}]}, "m.tool_calls[0].function"),
        ({"tool_calls": [{"function": {"arguments": "{}"}}]}, "m.tool_calls[0].function.name"),
        ({"tool_calls": [{"function": {"name": "f", "arguments": 3}}]}, "m.tool_calls[0].function.arguments"),
        ({"tool_call_id": 7}, "m.tool_call_id"),
    ],
)
def test_bad_history_calls_are_400_naming_the_part(fields: Any, param: str) -> None:
    with pytest.raises(APIError) as caught:
        history_calls(fields, "m")
    assert caught.value.param == param
