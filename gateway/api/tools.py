"""Tool calling: ``tools``, ``tool_choice``, ``parallel_tool_calls`` and tool results.

Pure, like gateway.api.validation (which calls :func:`parse_tools`, :func:`flatten_history`
and :func:`history_calls`). How the model sees tools depends on its chat template
(gateway.api.tool_calls.classify):

- a template that renders tools itself (Hermes/Qwen2.5 ``<tool_call>`` blocks) gets the
  functions as Generate.tools and the history's calls and results as they are
  (ChatMessage.tool_calls, ``tool`` turns with their tool_call_id); nothing is added;
- any other template gets the generic fallback: the functions listed in a system note
  asking for bare ``{"name": ..., "arguments": {...}}`` objects, one per line, and the
  history's calls written back as assistant turns holding that JSON.

Either way the reply is held by a grammar built from the functions' parameter schemas
(gateway.grammar.schema_gbnf, so a schema that cannot be enforced is a 400 naming it; the
reply's shape is gateway.api.tool_calls'): ``required`` and a named function allow only
calls, ``auto`` calls or text, ``none`` lists no functions and allows any text.
``parallel_tool_calls`` (default true, as OpenAI) allows several calls in a turn; false
exactly one. The legacy ``functions`` / ``function_call`` get one call, and the legacy
``function`` role becomes a ``tool`` turn. :func:`as_tool_call` turns a reply into
OpenAI ``tool_calls``, each with a fresh ``call_`` id.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Final

from reame.gateway.api.tool_calls import CallFormat, parse_reply, reply_grammar
from reame.gateway.grammar.schema_gbnf import SchemaError, schema_grammar
from reame.gateway.http.errors import APIError, invalid
from reame.shared.protocol import ChatMessage, ToolCall, ToolFunction

MAX_TOOLS: Final = 128  # as OpenAI allows

Json = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Tools:
    """The functions a chat request offers and how the reply may use them."""

    functions: list[Json]  # OpenAI's function objects: name, description, parameters
    choice: str  # "auto", "required" or the forced function's name
    grammar: str
    legacy: bool = False  # offered as `functions`: the reply is a `function_call`
    format: CallFormat = CallFormat.GENERIC  # how the model's template writes calls
    parallel: bool = True  # several calls in a turn allowed

    @property
    def names(self) -> set[str]:
        return {f["name"] for f in self.functions}


def uses_tools(fields: Json) -> bool:
    """True if a chat body offers functions or its history holds calls: the call format matters."""
    if fields.get("tools") or fields.get("functions"):
        return True
    messages = fields.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, dict) and bool(m.get("tool_calls") or m.get("function_call")) for m in messages
    )


def parse_tools(fields: Json, fmt: CallFormat = CallFormat.GENERIC) -> Tools | None:
    """Read ``tools`` / ``functions`` and their choice; None when no function may be called."""
    legacy = fields.get("tools") is None and fields.get("functions") is not None
    key, choice_key = ("functions", "function_call") if legacy else ("tools", "tool_choice")
    offered = fields.get(key)
    if fields.get("parallel_tool_calls") is not None and not isinstance(fields.get("parallel_tool_calls"), bool):
        raise invalid("parallel_tool_calls", "parallel_tool_calls must be a boolean", "invalid_type")
    if offered in (None, []):
        if fields.get(choice_key) not in (None, "none", "auto"):
            raise invalid(choice_key, f"{choice_key} needs {key}")
        return None
    if not isinstance(offered, list) or len(offered) > MAX_TOOLS:
        raise invalid(key, f"{key} must be an array of at most {MAX_TOOLS} tools", "invalid_type")
    functions = [_function(item, f"{key}[{i}]", legacy) for i, item in enumerate(offered)]
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names):
        raise invalid(key, "function names must be unique")
    choice = _choice(fields.get(choice_key), choice_key, set(names))
    if choice == "none":
        return None
    response_format = fields.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (None, "text"):
        raise invalid("response_format", "a JSON response_format cannot be combined with tools that may be called")
    parallel = fields.get("parallel_tool_calls") is not False and not legacy
    return Tools(functions, choice, _grammar(functions, choice, key, fmt, parallel), legacy, fmt, parallel)


def _function(item: object, where: str, legacy: bool) -> Json:
    if not isinstance(item, dict):
        raise invalid(where, "a tool must be an object", "invalid_type")
    if not legacy:
        if item.get("type") != "function":
            raise invalid(f"{where}.type", "only tools of type 'function' are supported", "unsupported_parameter")
        item = item.get("function")
        where = f"{where}.function"
        if not isinstance(item, dict):
            raise invalid(where, "function must be an object", "missing_required_parameter")
    name = item.get("name")
    if not isinstance(name, str) or not name or len(name) > 64:
        raise invalid(f"{where}.name", "a function needs a name of 1 to 64 characters")
    parameters = item.get("parameters", {"type": "object", "properties": {}})
    function: Json = {"name": name, "parameters": parameters, "where": f"{where}.parameters"}
    if isinstance(item.get("description"), str):
        function["description"] = item["description"]
    return function


def _choice(value: object, where: str, names: set[str]) -> str:
    if value is None:
        return "auto"
    if value in ("none", "auto", "required"):
        return str(value)
    if isinstance(value, dict):
        name = value.get("name")  # function_call: {"name": ...}
        if isinstance(value.get("function"), dict):  # tool_choice: {"type": "function", "function": {"name": ...}}
            name = value["function"].get("name")
        if isinstance(name, str) and name in names:
            return name
        raise invalid(where, f"{where} names a function that is not offered")
    raise invalid(where, f"{where} must be 'none', 'auto', 'required' or a function")


def _grammar(functions: list[Json], choice: str, key: str, fmt: CallFormat, parallel: bool) -> str:
    """Return the grammar of a reply under ``choice``, refusing parameter schemas it cannot enforce."""
    chosen = [f for f in functions if choice in ("auto", "required") or f["name"] == choice]
    definitions: Json = {}
    calls = []
    for index, function in enumerate(chosen):
        parameters = function["parameters"]
        if not isinstance(parameters, dict):
            raise invalid(function["where"], "parameters must be a JSON schema object", "invalid_type")
        parameters = _hoist(parameters, f"f{index}-", definitions)
        calls.append({
            "type": "object",
            "properties": {"name": {"const": function["name"]}, "arguments": parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        })
    schema: Json = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if definitions:
        schema = {**schema, "$defs": definitions}
    try:
        grammar = schema_grammar(schema)
    except SchemaError as err:
        raise _refused(err, chosen, key) from err
    return reply_grammar(grammar, fmt, choice == "auto", parallel)


def _hoist(parameters: Json, prefix: str, definitions: Json) -> Json:
    """Move a function's $defs to the combined schema's root, renaming its references to match."""
    local = parameters.get("$defs")
    if not isinstance(local, dict):
        return parameters

    def rename(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (f"#/$defs/{prefix}{v[len('#/$defs/'):]}" if k == "$ref" and isinstance(v, str)
                        and v.startswith("#/$defs/") else rename(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [rename(item) for item in node]
        return node

    for name, sub in local.items():
        definitions[f"{prefix}{name}"] = rename(sub)
    renamed: Json = rename({k: v for k, v in parameters.items() if k != "$defs"})
    return renamed


def _refused(err: SchemaError, chosen: list[Json], key: str) -> APIError:
    # The path is in the combined schema: .properties.arguments... or .anyOf[i].properties.arguments...
    path = err.path
    where = key
    for index, function in enumerate(chosen):
        for head in (f".anyOf[{index}].properties.arguments", ".properties.arguments" if len(chosen) == 1 else None):
            if head is not None and path.startswith(head):
                where, path = function["where"], path[len(head):]
        if path.startswith(f".$defs.f{index}-"):
            where, path = function["where"], ".$defs." + path[len(f".$defs.f{index}-"):]
    param = where + path
    return invalid(param, f"this schema cannot be enforced: {err.message} (at {param})", "unsupported_schema")


def offer(messages: list[ChatMessage], tools: Tools | None) -> list[ChatMessage]:
    """Return the messages with the functions offered in a system note (first, or added to the first).

    Only for the generic fallback: a template that lists tools itself gets :func:`template_tools`.
    """
    if tools is None or tools.format is not CallFormat.GENERIC:
        return messages
    note = system_note(tools)
    if messages and messages[0].role == "system":
        return [dataclasses.replace(messages[0], content=f"{messages[0].content}\n\n{note}"), *messages[1:]]
    return [ChatMessage("system", note), *messages]


def system_note(tools: Tools) -> str:
    """Return the system text that offers the functions to the model."""
    listing = json.dumps(
        [{k: v for k, v in f.items() if k != "where"} for f in tools.functions], ensure_ascii=False
    )
    if tools.choice == "auto":
        rule = "If a function helps, answer with only a JSON object; otherwise answer in plain text."
    elif tools.choice == "required":
        rule = "Answer with only a JSON object that calls one of them."
    else:
        rule = f"Answer with only a JSON object that calls {tools.choice}."
    several = " To make several calls, write one object per line." if tools.parallel else ""
    return (
        f"You can call these functions: {listing}\n{rule} "
        f'The object is {{"name": <function name>, "arguments": <the arguments as a JSON object>}}.{several}'
    )


def template_tools(tools: Tools | None) -> list[ToolFunction] | None:
    """Return the functions for a chat template that lists them itself (Generate.tools), else None."""
    if tools is None or tools.format is CallFormat.GENERIC:
        return None
    return [ToolFunction(f["name"], json.dumps(f["parameters"], ensure_ascii=False), f.get("description"))
            for f in tools.functions]


def flatten_history(messages: object, max_messages: int, fmt: CallFormat = CallFormat.GENERIC) -> object:
    """Prepare the history's tool calls, tool results and refusals for the model's template.

    Generic: calls become assistant turns holding their JSON. A template that renders
    calls keeps them (:func:`history_calls` reads them); the legacy ``function_call``
    becomes a call there. Anything not recognised is left as it is, for
    gateway.api.validation to judge (and name).
    """
    if not isinstance(messages, list) or len(messages) > max_messages:
        return messages
    return [_flatten(m, fmt) if isinstance(m, dict) else m for m in messages]


def _flatten(message: Json, fmt: CallFormat) -> Json:
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, list):  # assistant refusals are text the model said
        content = [{"type": "text", "text": p.get("refusal")} if isinstance(p, dict) and p.get("type") == "refusal"
                   else p for p in content]
        message = {**message, "content": content}
    if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
        calls = message.get("tool_calls") or [{"type": "function", "function": message.get("function_call")}]
        if fmt is not CallFormat.GENERIC:
            return {**{k: v for k, v in message.items() if k != "function_call"}, "tool_calls": calls}
        text = "\n".join(_call_text(call) for call in calls if isinstance(call, dict))
        prefix = content if isinstance(content, str) and content else ""
        return {"role": "assistant", "content": f"{prefix}\n{text}" if prefix else text}
    if role == "function":  # the legacy name of a tool result
        return {**message, "role": "tool"}
    return message


def _call_text(call: Json) -> str:
    found = call.get("function")
    function: Json = found if isinstance(found, dict) else {}
    arguments = function.get("arguments")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = arguments
    return json.dumps({"name": function.get("name"), "arguments": parsed}, ensure_ascii=False)


def history_calls(fields: Json, where: str) -> tuple[tuple[ToolCall, ...], str | None]:
    """Return a history message's ``tool_calls`` and ``tool_call_id``, or a 400 naming the bad part."""
    calls = fields.get("tool_calls")
    call_id = fields.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise invalid(f"{where}.tool_call_id", "tool_call_id must be a string", "invalid_type")
    if calls is None:
        return (), call_id
    if not isinstance(calls, list):
        raise invalid(f"{where}.tool_calls", "tool_calls must be an array", "invalid_type")
    read = []
    for i, call in enumerate(calls):
        at = f"{where}.tool_calls[{i}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise invalid(f"{at}.function", "a tool call needs a function object", "missing_required_parameter")
        name, arguments = function.get("name"), function.get("arguments", "{}")
        if not isinstance(name, str) or not name:
            raise invalid(f"{at}.function.name", "a tool call needs a function name")
        if isinstance(arguments, dict):  # a client's shortcut; OpenAI's schema says a JSON string
            arguments = json.dumps(arguments, ensure_ascii=False)
        if not isinstance(arguments, str):
            raise invalid(f"{at}.function.arguments", "arguments must be a JSON string", "invalid_type")
        found_id = call.get("id") if isinstance(call, dict) else None
        read.append(ToolCall(name, arguments, found_id if isinstance(found_id, str) else ""))
    return tuple(read), call_id


def as_tool_call(choice: Json, text: str, tools: Tools | None, finished: bool) -> Json:
    """Return a chat choice with the reply as ``tool_calls`` if it calls functions, else ``choice``."""
    reply = parse_reply(text, tools.format, tools.names) if tools is not None and finished else None
    if reply is None or tools is None:
        return choice
    if tools.legacy:
        message: Json = {"role": "assistant", "content": reply.content, "function_call": reply.calls[0]["function"]}
        return {**choice, "message": message, "finish_reason": "function_call"}
    return {**choice, "message": {"role": "assistant", "content": reply.content, "tool_calls": reply.calls},
            "finish_reason": "tool_calls"}
