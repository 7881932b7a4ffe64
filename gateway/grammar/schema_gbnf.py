"""Turn a JSON schema into a GBNF grammar that the worker's sampler enforces, or refuse it.

llama-cpp-python's ``SchemaConverter`` writes the grammar, but it silently skips what
it does not know (a ``minimum``, ``multipleOf``, a sibling of ``$ref``...), and a
grammar looser than the schema gives replies that do not validate. So
:func:`schema_grammar` first walks the schema with a list of the keywords it can
enforce exactly, per type, and refuses anything else with a :class:`SchemaError`
naming the keyword's path; the walk also drops annotations (``title``,
``description``...), which the converter would trip on. The converter is then
extended where it is loose: integer ranges (gateway.grammar.int_range), string patterns
(gateway.grammar.regex_gbnf, which the converter would pass through untranslated), dates
with each month's days, and JSON strings that never hold a raw control character.
"""

from __future__ import annotations

import importlib
import json
import math
from typing import Any, Final

from reame.gateway.grammar.int_range import gbnf, int_range
from reame.gateway.grammar.regex_gbnf import PatternError, pattern_rule

# llama-cpp-python ships no type information for this module.
_llama_grammar: Any = importlib.import_module("llama_cpp.llama_grammar")
PRIMITIVE_RULES: Final[dict[str, Any]] = _llama_grammar.PRIMITIVE_RULES
RESERVED_NAMES: Final[set[str]] = _llama_grammar.RESERVED_NAMES
BuiltinRule: Any = _llama_grammar.BuiltinRule

ANNOTATIONS: Final = frozenset(
    {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
     "writeOnly"}
)
DEFINITIONS: Final = ("$defs", "definitions")
FORMATS: Final = frozenset({"date", "time", "date-time", "uuid"})
_BY_TYPE: Final[dict[str, frozenset[str]]] = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "prefixItems", "minItems", "maxItems"}),
    "string": frozenset({"pattern", "format", "minLength", "maxLength"}),
    "integer": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "number": frozenset(),
    "boolean": frozenset(),
    "null": frozenset(),
}
_ALTERNATIVES: Final = ("$ref", "anyOf", "const", "enum")
MAX_DEPTH: Final = 64
MAX_COUNT: Final = 1000  # minItems, maxItems, minLength, maxLength
# llama-cpp-python's converter chains optional properties recursively (5,000 ran out of
# Python's stack); an object of 256 optional properties converts in about 0.1 s.
MAX_PROPERTIES: Final = 256
# JSON strings: any character but '"', '\\' and the control characters, which JSON escapes.
_CHAR: Final[Any] = BuiltinRule(
    r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])', []
)
# RFC 3339 full-date, exactly: years 0001-9999, each month's days, February 29 in leap years only
# (llama-cpp-python's rule allows any day up to 31 in any month).
_DATE: Final[Any] = BuiltinRule(
    '( ( [1-9] [0-9] [0-9] [0-9] | "0" [1-9] [0-9] [0-9] | "00" [1-9] [0-9] | "000" [1-9] ) "-" ( '
    '( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | '
    '( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | '
    '"02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) ) | '
    '( [0-9] [0-9] ( "0" [48] | [2468] [048] | [13579] [26] ) | ( "0" [48] | [2468] [048] | [13579] [26] ) "00" ) '
    '"-02-29"',
    [],
)
_PYTHON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "object": (dict,), "array": (list,), "string": (str,), "integer": (int,), "number": (int, float),
    "boolean": (bool,), "null": (type(None),),
}


class SchemaError(ValueError):
    """A schema that cannot be enforced exactly; ``path`` names the offending part ("" the root)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def schema_grammar(schema: object) -> str:
    """Return the GBNF grammar (root rule ``root``) of the JSON texts valid for ``schema``."""
    if not isinstance(schema, dict):
        raise SchemaError("", "a JSON schema must be an object")
    clean = _Checker(schema).root()
    converter = _Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        resolved = converter.resolve_refs(clean, "input")
        converter.visit(resolved, "")
    except PatternError as err:  # only reached through an unchecked path; keep the message
        raise SchemaError("", str(err)) from err
    except (AssertionError, KeyError, ValueError, RecursionError) as err:
        raise SchemaError("", f"this schema cannot be turned into a grammar: {err}") from err
    grammar: str = converter.format_grammar()
    return grammar


def json_object_grammar() -> str:
    """Return the grammar of any JSON object: response_format {"type": "json_object"}."""
    return schema_grammar({"type": "object"})


class _Converter(_llama_grammar.SchemaConverter):  # type: ignore[misc]  # an untyped base
    """The converter, with exact integer ranges, translated patterns and control-free strings."""

    def visit(self, schema: dict[str, Any], name: str) -> str:
        if not any(key in schema for key in (*_ALTERNATIVES, "oneOf")) and not isinstance(schema.get("type"), list):
            rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
            kind = schema.get("type")
            if kind == "integer" and _int_bounds(schema) != (None, None):
                low, high = _int_bounds(schema)
                body = f"({gbnf(int_range(low, high))}) space"
                return str(self._add_rule(rule_name, body))
            if kind in (None, "string") and "pattern" in schema:
                return str(self._add_rule(rule_name, pattern_rule(schema["pattern"])))
        return str(super().visit(schema, name))

    def _add_primitive(self, name: str, rule: Any) -> str:
        if name == "char" or rule is PRIMITIVE_RULES["char"]:
            rule = _CHAR
        elif name == "date":
            rule = _DATE
        if "char" in rule.deps and "char" not in self._rules:
            self._add_rule("char", _CHAR.content)
        return str(super()._add_primitive(name, rule))


def _int_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    low: int | None = None
    high: int | None = None
    if "minimum" in schema:
        low = math.ceil(schema["minimum"])
    if "exclusiveMinimum" in schema:
        value = math.floor(schema["exclusiveMinimum"]) + 1
        low = value if low is None else max(low, value)
    if "maximum" in schema:
        high = math.floor(schema["maximum"])
    if "exclusiveMaximum" in schema:
        value = math.ceil(schema["exclusiveMaximum"]) - 1
        high = value if high is None else min(high, value)
    return low, high


class _Checker:
    """Walk a schema, refuse what cannot be enforced, and return it without annotations."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._root = schema

    def root(self) -> dict[str, Any]:
        try:
            clean = self._schema(self._root, "", 0)
        except RecursionError as err:
            raise SchemaError("", "the schema is nested too deeply") from err
        for key in DEFINITIONS:
            if key in self._root:
                clean[key] = self._definitions(self._root[key], f".{key}")
        if "$ref" in clean:
            # The converter does not look beside a $ref, so the definitions of a root that
            # is a reference (a recursive type: {"$ref": "#/$defs/node", "$defs": ...}) would
            # keep their own references unresolved: the root becomes a one-way choice.
            clean = {"anyOf": [{"$ref": clean.pop("$ref")}], **clean}
        return clean

    def _definitions(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise SchemaError(path, "must be an object of schemas")
        return {name: self._schema(sub, f"{path}.{name}", 1) for name, sub in value.items()}

    def _schema(self, node: object, path: str, depth: int) -> dict[str, Any]:
        if depth > MAX_DEPTH:
            raise SchemaError(path, f"schemas nested more than {MAX_DEPTH} deep are not supported")
        if node is True:
            return {}
        if not isinstance(node, dict):
            raise SchemaError(path, "must be a schema (an object)")
        keys = {key for key in node if key not in ANNOTATIONS and key not in DEFINITIONS}
        if depth > 0:
            for key in DEFINITIONS:
                if key in node:
                    raise SchemaError(f"{path}.{key}", f"{key} is supported only at the root of the schema")
        if "allOf" in node:
            return self._all_of(node, keys, path, depth)
        alternatives = [key for key in _ALTERNATIVES if key in keys]
        if alternatives:
            return self._alternative(node, alternatives, keys, path, depth)
        kind = node.get("type")
        if isinstance(kind, list):
            return self._type_list(kind, keys, path)
        if kind is None:
            if keys:
                first = sorted(keys)[0]
                raise SchemaError(f"{path}.{first}", f"'{first}' needs a 'type' beside it (or is not supported)")
            return {}
        if kind not in _BY_TYPE:
            raise SchemaError(f"{path}.type", f"unknown type {kind!r}")
        for key in sorted(keys - {"type"}):
            if key not in _BY_TYPE[kind]:
                raise SchemaError(f"{path}.{key}", f"'{key}' is not supported on a {kind} schema")
        clean: dict[str, Any] = {"type": kind}
        if kind == "object":
            clean.update(self._object(node, path, depth))
        elif kind == "array":
            clean.update(self._array(node, path, depth))
        elif kind == "string":
            clean.update(self._string(node, path))
        elif kind == "integer":
            clean.update(self._integer(node, path))
        return clean

    def _all_of(self, node: dict[str, Any], keys: set[str], path: str, depth: int) -> dict[str, Any]:
        parts = node["allOf"]
        if keys != {"allOf"} or not isinstance(parts, list) or len(parts) != 1:
            raise SchemaError(f"{path}.allOf", "allOf is supported only alone and with a single schema")
        return self._schema(parts[0], f"{path}.allOf[0]", depth + 1)

    def _alternative(
        self, node: dict[str, Any], alternatives: list[str], keys: set[str], path: str, depth: int
    ) -> dict[str, Any]:
        key = alternatives[0]
        extra = sorted(keys - {key, "type"} if key in ("const", "enum") else keys - {key})
        if extra:
            raise SchemaError(f"{path}.{extra[0]}", f"'{extra[0]}' is not supported beside '{key}'")
        value = node[key]
        if key == "$ref":
            return {"$ref": self._ref(value, f"{path}.$ref")}
        if key == "anyOf":
            if not isinstance(value, list) or not value:
                raise SchemaError(f"{path}.anyOf", "anyOf must be a non-empty array of schemas")
            return {"anyOf": [self._schema(sub, f"{path}.anyOf[{i}]", depth + 1) for i, sub in enumerate(value)]}
        values = [value] if key == "const" else value
        if key == "enum" and (not isinstance(values, list) or not values):
            raise SchemaError(f"{path}.enum", "enum must be a non-empty array")
        kind = node.get("type")
        if kind is not None:
            kinds = kind if isinstance(kind, list) else [kind]
            for i, item in enumerate(values):
                if not any(_is_type(item, k) for k in kinds):
                    where = f"{path}.const" if key == "const" else f"{path}.enum[{i}]"
                    raise SchemaError(where, f"{json.dumps(item)} is not of type {kind}")
        return {key: value}

    def _ref(self, value: object, path: str) -> str:
        if not isinstance(value, str) or not value.startswith("#/"):
            raise SchemaError(path, "only local references ('#/$defs/Name') are supported")
        target: object = self._root
        for part in value[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise SchemaError(path, f"the reference {value!r} does not resolve")
            target = target[part]
        if not value.startswith(tuple(f"#/{key}/" for key in DEFINITIONS)):
            raise SchemaError(path, "references must point into $defs or definitions")
        return value

    def _type_list(self, kinds: list[Any], keys: set[str], path: str) -> dict[str, Any]:
        if keys != {"type"}:
            extra = sorted(keys - {"type"})[0]
            raise SchemaError(f"{path}.{extra}", f"'{extra}' is not supported beside a list of types")
        for kind in kinds:
            if kind not in _BY_TYPE:
                raise SchemaError(f"{path}.type", f"unknown type {kind!r}")
        return {"anyOf": [{"type": kind} for kind in kinds]}

    def _object(self, node: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
        clean: dict[str, Any] = {}
        properties = node.get("properties", {})
        if not isinstance(properties, dict):
            raise SchemaError(f"{path}.properties", "properties must be an object")
        if len(properties) > MAX_PROPERTIES:
            raise SchemaError(
                f"{path}.properties", f"the object has {len(properties):,} properties; at most {MAX_PROPERTIES}"
                " are supported (nest them in objects)",
            )
        if "properties" in node:
            clean["properties"] = {
                name: self._schema(sub, f"{path}.properties.{name}", depth + 1) for name, sub in properties.items()
            }
        required = node.get("required", [])
        if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
            raise SchemaError(f"{path}.required", "required must be an array of property names")
        for name in required:
            if name not in properties:
                raise SchemaError(f"{path}.required", f"the required property {name!r} is not in properties")
        if required:
            clean["required"] = required
        if "additionalProperties" in node:
            extra = node["additionalProperties"]
            if extra is False:
                clean["additionalProperties"] = False
            elif extra is not True:
                clean["additionalProperties"] = self._schema(extra, f"{path}.additionalProperties", depth + 1)
            elif not properties:
                clean["additionalProperties"] = True
        return clean

    def _array(self, node: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
        clean: dict[str, Any] = {}
        if "prefixItems" in node:
            prefix = node["prefixItems"]
            if not isinstance(prefix, list) or not prefix:
                raise SchemaError(f"{path}.prefixItems", "prefixItems must be a non-empty array of schemas")
            for key in ("items", "minItems", "maxItems"):
                if key in node and node[key] not in (False, len(prefix)):
                    raise SchemaError(f"{path}.{key}", f"'{key}' is not supported beside prefixItems")
            clean["prefixItems"] = [
                self._schema(item, f"{path}.prefixItems[{i}]", depth + 1) for i, item in enumerate(prefix)
            ]
            return clean
        bounds: dict[str, Any] = {key: _count(node, key, path) for key in ("minItems", "maxItems") if key in node}
        if "items" not in node:
            if bounds:
                raise SchemaError(f"{path}.{next(iter(bounds))}", "minItems/maxItems need 'items' beside them")
            return clean
        clean["items"] = self._schema(node["items"], f"{path}.items", depth + 1)
        clean.update(bounds)
        return clean

    def _string(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        given = [key for key in ("pattern", "format") if key in node]
        lengths: dict[str, Any] = {key: _count(node, key, path) for key in ("minLength", "maxLength") if key in node}
        if len(given) + bool(lengths) > 1:
            raise SchemaError(f"{path}.{given[-1]}", "pattern, format and minLength/maxLength cannot be combined")
        if "pattern" in node:
            pattern = node["pattern"]
            if not isinstance(pattern, str):
                raise SchemaError(f"{path}.pattern", "pattern must be a string")
            try:
                pattern_rule(pattern)
            except PatternError as err:
                raise SchemaError(f"{path}.pattern", str(err)) from err
            return {"pattern": pattern}
        if "format" in node:
            if node["format"] not in FORMATS:
                raise SchemaError(f"{path}.format", f"format {node['format']!r} is not supported; use one of "
                                  + ", ".join(sorted(FORMATS)))
            return {"format": node["format"]}
        return lengths

    def _integer(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        clean: dict[str, Any] = {}
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key in node:
                value = node[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise SchemaError(f"{path}.{key}", f"{key} must be a number")
                clean[key] = value
        low, high = _int_bounds(clean)
        if low is not None and high is not None and low > high:
            raise SchemaError(f"{path}.minimum", "no integer lies within these bounds")
        return clean


def _count(node: dict[str, Any], key: str, path: str) -> int:
    value = node[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchemaError(f"{path}.{key}", f"{key} must be a non-negative integer")
    if value > MAX_COUNT:  # the grammar spells each repetition out: bound its size
        raise SchemaError(f"{path}.{key}", f"{key} above {MAX_COUNT} is not supported")
    return value


def _is_type(value: object, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _PYTHON_TYPES.get(kind, ()))
