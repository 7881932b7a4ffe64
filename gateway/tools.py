"""Tool calling with a generic prompt and a grammar: ``tools``, ``tool_choice`` and tool results.

Pure, like gateway.validation (which calls :func:`parse_tools` and :func:`flatten_history`).
Any chat template can serve it, since the model sees only ordinary messages:

- the functions are listed in a system note that asks for a reply of only
  ``{"name": ..., "arguments": {...}}`` to call one;
- the reply is held to that by a grammar built from the functions' parameter schemas
  (gateway.schema_gbnf, so a schema that cannot be enforced is a 400 naming it):
  ``required`` and a named function allow only a call, ``auto`` a call or plain text
  that does not start with ``{``; ``none`` lists no functions and allows any text;
- earlier calls in the history are written back in that format (an assistant turn
  holding the call's JSON); their results stay ``tool`` turns (the legacy
  ``function`` role becomes one).

:func:`parse_call` turns a reply into OpenAI ``tool_calls`` with fresh ``call_`` ids.
At most one call is made per turn, whatever ``parallel_tool_calls`` says.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any, Final

from reame.gateway.errors import APIError, invalid
from reame.gateway.schema_gbnf import SchemaError, schema_grammar
from reame.shared.protocol import ChatMessage

CALL_ID_PREFIX: Final = "call_"
MAX_TOOLS: Final = 128  # as OpenAI allows
# Plain text under tool_choice auto: anything that does not open a JSON object.
_PLAIN: Final = 'plain-text ::= [^{] [^\\x00]*'

Json = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Tools:
    """The functions a chat request offers and how the reply may use them."""

    functions: list[Json]  # OpenAI's function objects: name, description, parameters
    choice: str  # "auto", "required" or the forced function's name
    grammar: str
    legacy: bool = False  # offered as `functions`: the reply is a `function_call`

    @property
    def names(self) -> set[str]:
        return {f["name"] for f in self.functions}


def parse_tools(fields: Json) -> Tools | None:
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
    return Tools(functions, choice, _grammar(functions, choice, key), legacy)


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


def _grammar(functions: list[Json], choice: str, key: str) -> str:
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
    if choice != "auto":
        return grammar
    # The call becomes one alternative of the root: rename its rule.
    lines = [("tool-call ::=" + line[len("root ::="):]) if line.startswith("root ::=") else line
             for line in grammar.splitlines()]
    return "\n".join([*lines, _PLAIN, "root ::= tool-call | plain-text"])


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
    """Return the messages with the functions offered in a system note (first, or added to the first)."""
    if tools is None:
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
    return (
        f"You can call these functions: {listing}\n{rule} "
        'The object is {"name": <function name>, "arguments": <the arguments as a JSON object>}.'
    )


def flatten_history(messages: object, max_messages: int) -> object:
    """Write tool calls, tool results and refusals of the history as plain messages.

    Anything not recognised is left as it is, for gateway.validation to judge (and name).
    """
    if not isinstance(messages, list) or len(messages) > max_messages:
        return messages
    return [_flatten(m) if isinstance(m, dict) else m for m in messages]


def _flatten(message: Json) -> Json:
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, list):  # assistant refusals are text the model said
        content = [{"type": "text", "text": p.get("refusal")} if isinstance(p, dict) and p.get("type") == "refusal"
                   else p for p in content]
        message = {**message, "content": content}
    if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
        calls = message.get("tool_calls") or [{"function": message.get("function_call")}]
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


def parse_call(text: str, tools: Tools) -> list[Json] | None:
    """Return OpenAI ``tool_calls`` if ``text`` is a call of an offered function, else None."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("name") not in tools.names or not isinstance(value.get("arguments"),
                                                                                            dict):
        return None
    return [{
        "id": CALL_ID_PREFIX + uuid.uuid4().hex[:24],
        "type": "function",
        "function": {"name": value["name"], "arguments": json.dumps(value["arguments"], ensure_ascii=False)},
    }]


def as_tool_call(choice: Json, text: str, tools: Tools | None, finished: bool) -> Json:
    """Return a chat choice with the reply as ``tool_calls`` if it calls a function, else ``choice``."""
    calls = parse_call(text, tools) if tools is not None and finished else None
    if calls is None or tools is None:
        return choice
    if tools.legacy:
        message: Json = {"role": "assistant", "content": None, "function_call": calls[0]["function"]}
        return {**choice, "message": message, "finish_reason": "function_call"}
    return {**choice, "message": {"role": "assistant", "content": None, "tool_calls": calls},
            "finish_reason": "tool_calls"}
