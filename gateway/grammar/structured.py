"""Read a chat request's ``response_format`` into the grammar the worker enforces.

Pure, like gateway.api.validation (which calls it). ``text`` (or no response_format)
asks for nothing; ``json_object`` for any JSON object; ``json_schema`` for JSON valid
against the schema, which gateway.grammar.schema_gbnf converts here, in the gateway, so a
schema that cannot be enforced is a 400 naming its part before any worker is busy,
never a reply that silently ignores it.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Final

from reame.gateway.grammar.schema_gbnf import SchemaError, json_object_grammar, schema_grammar
from reame.gateway.http.errors import APIError, invalid

PARAM: Final = "response_format"
# OpenAI's rule for json_schema.name.
NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def response_grammar(value: object) -> str | None:
    """Return the GBNF grammar ``response_format`` asks for (None: free text), or raise a 400."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid(PARAM, "response_format must be an object", "invalid_type")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return _json_object()
    if kind == "json_schema":
        return _json_schema(value.get("json_schema"))
    raise invalid(f"{PARAM}.type", "response_format.type must be 'text', 'json_object' or 'json_schema'")


@functools.cache
def _json_object() -> str:
    return json_object_grammar()


def _json_schema(spec: object) -> str:
    where = f"{PARAM}.json_schema"
    if not isinstance(spec, dict):
        raise invalid(where, "json_schema must be an object with 'name' and 'schema'", "missing_required_parameter")
    name = spec.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise invalid(f"{where}.name", "name must be 1 to 64 letters, digits, '_' or '-'")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid(f"{where}.strict", "strict must be a boolean", "invalid_type")
    schema: Any = spec.get("schema")
    if schema is None:
        # OpenAI's schema makes it optional: no schema is any JSON object.
        return _json_object()
    try:
        return schema_grammar(schema)
    except SchemaError as err:
        raise _refused(f"{where}.schema{err.path}", err.message) from err


def _refused(param: str, message: str) -> APIError:
    return invalid(param, f"this schema cannot be enforced: {message} (at {param})", "unsupported_schema")
