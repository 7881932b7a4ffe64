"""``GET /openapi.json``: the gateway's endpoints as an OpenAPI 3.1 document, written by hand.

It names every route and method, and the request bodies' main fields; the full validation
rules stay in ``validation.py`` (a body the document allows may still be refused with a 400
naming the field). The fault suite's fuzzer reads it to find every endpoint.
"""

from __future__ import annotations

import json
from typing import Any, Final

import falcon

_ERROR: Final[dict[str, Any]] = {
    "description": "An OpenAI error object",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_MESSAGES: Final[dict[str, Any]] = {
    "type": "array", "minItems": 1,
    "items": {"type": "object", "required": ["role"], "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array"}, {"type": "null"}]},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": "string"},
    }},
}
_SAMPLING: Final[dict[str, Any]] = {
    "model": {"type": "string"},
    "stream": {"type": "boolean"},
    "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "max_tokens": {"type": "integer", "minimum": 0},
    "seed": {"type": "integer"},
    "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
    "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "logit_bias": {"type": "object", "additionalProperties": {"type": "number"}},
    "top_k": {"type": "integer", "minimum": 0},
    "min_p": {"type": "number", "minimum": 0, "maximum": 1},
    "repeat_penalty": {"type": "number", "minimum": 0},
    "reame": {"type": "object"},
}


def _post(summary: str, required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"post": {
        "summary": summary,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": required, "properties": properties}}}},
        "responses": {"200": {"description": "The result (JSON, or SSE when stream is true)"},
                      "400": _ERROR, "401": _ERROR, "413": _ERROR, "429": _ERROR, "503": _ERROR},
    }}


def _get(summary: str) -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {"200": {"description": "OK"}, "401": _ERROR}}}


DOCUMENT: Final[dict[str, Any]] = {
    "openapi": "3.1.0",
    "info": {"title": "reame", "version": "1", "description": "An OpenAI-compatible LLM server."},
    "paths": {
        "/v1/chat/completions": _post("Chat completion", ["messages"], {
            "messages": _MESSAGES, "n": {"type": "integer", "minimum": 1, "maximum": 8},
            "logprobs": {"type": "boolean"}, "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
            "max_completion_tokens": {"type": "integer", "minimum": 0},
            "response_format": {"type": "object"},
            "tools": {"type": "array", "maxItems": 128, "items": {"type": "object"}},
            "tool_choice": {"anyOf": [{"type": "string", "enum": ["none", "auto", "required"]}, {"type": "object"}]},
            "parallel_tool_calls": {"type": "boolean"}, **_SAMPLING,
        }),
        "/v1/completions": _post("Text completion", ["prompt"], {
            "prompt": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            "n": {"type": "integer", "minimum": 1, "maximum": 8},
            "best_of": {"type": "integer", "minimum": 1, "maximum": 8}, **_SAMPLING,
        }),
        "/v1/cache/warm": _post("Read a document into the KV cache without generating", [], {
            "messages": _MESSAGES, "prompt": {"type": "string"}, "model": {"type": "string"},
        }),
        "/v1/models": _get("The served model"),
        "/v1/models/{model_id}": {"get": {
            "summary": "One model", "parameters": [
                {"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "OK"}, "404": _ERROR}}},
        "/health": _get("The gateway is up"),
        "/ready": _get("At least one worker is attached"),
        "/metrics": _get("Prometheus metrics"),
        "/openapi.json": _get("This document"),
    },
    "components": {"schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "properties": {
            "message": {"type": "string"}, "type": {"type": "string"},
            "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}}},
}
_BODY: Final = json.dumps(DOCUMENT, indent=1).encode()


class OpenAPIDocument:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_JSON
        resp.data = _BODY

    on_head = on_get
