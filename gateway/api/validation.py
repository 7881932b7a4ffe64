"""Turn a decoded JSON body into a typed request, or a 400 naming the field that is wrong.

Pure: no sockets, no Falcon. Rules, following the OpenAI API:

- Unknown fields are ignored, as OpenAI does. Known fields that would change the
  answer and are not supported (``suffix``, ``echo`` on chat, a streamed ``best_of`` > ``n``)
  are a 400 naming the field, never silently dropped. ``response_format`` and ``tools`` become
  a grammar (gateway.grammar.structured, gateway.api.tools); an unenforceable schema is a 400 naming its part.
- ``null`` for an optional field means "absent" (the OpenAI schema marks them
  nullable and some clients send explicit nulls); ``null`` where a value is required
  (``messages``, ``prompt``, a message's ``role``...) is a 400.
- Booleans are not numbers; numbers must be finite; integers must fit the wire.
- ``model`` must be a string if present; any name is accepted (like llama.cpp's
  server) and responses always name the model that is loaded.
- ``reame`` (object) holds reame's own switches: ``cache`` (boolean, default true:
  use the persistent KV cache) and ``compress`` (a ``shared.modes.CompressMode``;
  absent: the configured ``compress.mode``). Any other key in it is a 400. A cache
  warm request takes ``compress`` only. ``speculative`` (a
  ``shared.modes.SpeculativeMode``; absent: the worker's ``speculative.mode``) picks
  speculative decoding for a completion. ``cache_salt`` (1 to MAX_CACHE_SALT characters;
  warm requests too) narrows the KV cache scope to requests with the same salt.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, Final, TypeVar

from reame.gateway.api.choices import MAX_CHOICES, count_choices
from reame.gateway.api.completion_choices import count_candidates
from reame.gateway.api.fields import boolean, json_object, text
from reame.gateway.api.logprobs import chat_logprobs, completion_logprobs
from reame.gateway.api.sampling_fields import parse_sampling
from reame.gateway.api.tool_calls import CallFormat
from reame.gateway.api.tools import Tools, flatten_history, history_calls, parse_tools, uses_tools
from reame.gateway.grammar.structured import response_grammar
from reame.gateway.http.auth import MAX_CACHE_SALT
from reame.gateway.http.errors import APIError, invalid
from reame.shared.chunking import part_breaks
from reame.shared.config import SamplingConfig, ServerConfig, defaults
from reame.shared.modes import CompressMode, SpeculativeMode, choices
from reame.shared.protocol import ChatMessage, SamplingParams

ROLES: Final = frozenset({"system", "user", "assistant", "developer", "tool"})
MAX_PROMPTS: Final = 64  # prompts in one completions request; each is a sequential generation
MAX_MESSAGES: Final = defaults(ServerConfig).max_messages  # counted before any message is read
EXTENSION_FIELD: Final = "reame"
EXTENSION_KEYS: Final[frozenset[str]] = frozenset(
    {"cache", "compress", "speculative", "cache_salt", "answer_cache", "chunks"}
)
WARM_EXTENSION_KEYS: Final[frozenset[str]] = frozenset({"compress", "cache_salt"})


@dataclasses.dataclass(frozen=True)
class Options:
    """reame's own per-request switches, from the ``reame`` object."""

    cache: bool = True
    compress: CompressMode | None = None  # None: the configured default
    speculative: SpeculativeMode | None = None  # None: the worker's default
    cache_salt: str | None = None  # narrows the KV cache scope (gateway.http.auth.cache_scope)
    answer_cache: bool = True  # False: neither served from nor stored in the answer cache (gateway.upstream.answers)
    chunks: bool | None = None  # chunk mode; None: cache.chunks


DEFAULT_OPTIONS: Final = Options()


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    messages: list[ChatMessage]
    sampling: SamplingParams
    stream: bool = False
    include_usage: bool = False
    options: Options = DEFAULT_OPTIONS
    grammar: str | None = None  # GBNF from response_format (gateway.grammar.structured)
    logprobs: int | None = None  # None: none; k: each token's and the top k (gateway.api.logprobs)
    n: int = 1  # choices, generated in turn (gateway.api.choices)
    tools: Tools | None = None  # functions the reply may call (gateway.api.tools)


@dataclasses.dataclass(frozen=True)
class CompletionRequest:
    prompts: list[str]
    sampling: SamplingParams
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    options: Options = DEFAULT_OPTIONS
    logprobs: int | None = None  # None: none; k: each token's and the top k (gateway.api.logprobs)
    n: int = 1  # choices per prompt, and best_of: generations per prompt (gateway.api.completion_choices)
    best_of: int = 1


@dataclasses.dataclass(frozen=True)
class WarmRequest:
    """POST /v1/cache/warm: a raw prompt or chat messages to read and store, no generation."""

    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    options: Options = DEFAULT_OPTIONS


def parse_chat(
    body: object, defaults: SamplingConfig, max_messages: int = MAX_MESSAGES,
    call_format: Callable[[], CallFormat] = lambda: CallFormat.GENERIC,
) -> ChatRequest:
    """Validate a /v1/chat/completions body; ``call_format`` says how the model's template writes tool calls.

    It is asked only for a request with tools or tool calls (it may load the vocabulary).
    """
    fields = json_object(body)
    fmt = call_format() if uses_tools(fields) else CallFormat.GENERIC
    options = _check_common(fields, MAX_CHOICES)
    logprobs = chat_logprobs(fields)
    _absent(fields, "echo", "echo is not supported on chat completions")
    tools = parse_tools(fields, fmt)
    grammar = response_grammar(fields.get("response_format")) if tools is None else tools.grammar
    stream, include_usage = _stream(fields)
    return ChatRequest(
        messages=_messages(flatten_history(fields.get("messages"), max_messages, fmt), max_messages),
        sampling=parse_sampling(fields, defaults.chat_max_tokens, defaults),
        stream=stream,
        include_usage=include_usage,
        options=options,
        grammar=grammar, logprobs=logprobs, n=count_choices(fields, MAX_CHOICES), tools=tools,
    )


def parse_completion(body: object, defaults: SamplingConfig) -> CompletionRequest:
    """Validate a /v1/completions body."""
    fields = json_object(body)
    options = _check_common(fields, MAX_CHOICES)
    logprobs = completion_logprobs(fields)
    if fields.get("suffix") not in (None, ""):
        raise _unsupported("suffix", "suffix (insertion) is not supported")
    stream, include_usage = _stream(fields)
    echo, n = boolean(fields, "echo"), count_choices(fields, MAX_CHOICES)
    return CompletionRequest(
        prompts=_prompts(fields.get("prompt")),
        sampling=parse_sampling(fields, defaults.completion_max_tokens, defaults),
        stream=stream,
        include_usage=include_usage,
        echo=bool(echo),
        options=options,
        logprobs=logprobs, n=n, best_of=count_candidates(fields, n, stream),
    )


def parse_warm(body: object, max_messages: int = MAX_MESSAGES) -> WarmRequest:
    """Validate a /v1/cache/warm body: exactly one of ``prompt`` (string) or ``messages``."""
    fields = json_object(body)
    options = _options(fields, WARM_EXTENSION_KEYS)
    prompt, messages = fields.get("prompt"), fields.get("messages")
    if (prompt is None) == (messages is None):
        raise invalid("prompt", "give exactly one of prompt (a string) or messages", "missing_required_parameter")
    # Nothing to read would be answered "cached" without a read: a client's mistake, said as one.
    if prompt is not None:
        if not text(prompt, "prompt"):
            raise invalid("prompt", "prompt is empty: give the text to read into the cache")
        return WarmRequest(prompt=prompt, options=options)
    parsed = _messages(messages, max_messages)
    if not any(message.content for message in parsed):
        raise invalid("messages", "every message is empty: give the text to read into the cache")
    return WarmRequest(messages=parsed, options=options)


def _check_common(fields: dict[str, Any], max_n: int | None = None) -> Options:
    model = fields.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model", "model must be a string", "invalid_type")
    count_choices(fields, 1 if max_n is None else max_n)
    return _options(fields, EXTENSION_KEYS)


def _options(fields: dict[str, Any], allowed: frozenset[str]) -> Options:
    extension = fields.get(EXTENSION_FIELD)
    if extension is None:
        return Options()
    switches = json_object(extension, EXTENSION_FIELD)
    for key in switches:
        if key not in allowed:
            raise invalid(f"{EXTENSION_FIELD}.{key}", f"unknown reame option {key!r}", "unknown_parameter")
    cache = boolean(switches, "cache", f"{EXTENSION_FIELD}.cache")
    compress = _mode(switches, "compress", CompressMode)
    speculative = _mode(switches, "speculative", SpeculativeMode)
    salt = switches.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not 1 <= len(salt) <= MAX_CACHE_SALT):
        raise invalid("reame.cache_salt", f"reame.cache_salt must be a string of 1 to {MAX_CACHE_SALT} characters")
    answer_cache = boolean(switches, "answer_cache", f"{EXTENSION_FIELD}.answer_cache")
    chunks = boolean(switches, "chunks", f"{EXTENSION_FIELD}.chunks")
    return Options(
        True if cache is None else cache, compress, speculative, salt, answer_cache is not False, chunks
    )


_Mode = TypeVar("_Mode", bound=enum.StrEnum)


def _mode(switches: dict[str, Any], key: str, modes: type[_Mode]) -> _Mode | None:
    value = switches.get(key)
    if value is None:
        return None
    try:
        return modes(value)
    except ValueError:
        name = f"{EXTENSION_FIELD}.{key}"
        raise invalid(name, f"{name} must be one of {choices(modes)}") from None


def _stream(fields: dict[str, Any]) -> tuple[bool, bool]:
    stream = bool(boolean(fields, "stream"))
    options = fields.get("stream_options")
    if options is None:
        return stream, False
    options = json_object(options, "stream_options")
    if not stream:
        raise invalid("stream_options", "stream_options is only allowed when stream is true")
    include_usage = options.get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise invalid("stream_options.include_usage", "include_usage must be a boolean", "invalid_type")
    return stream, bool(include_usage)


def _messages(value: object, max_messages: int) -> list[ChatMessage]:
    if value is None:
        raise invalid("messages", "messages is required", "missing_required_parameter")
    if not isinstance(value, list):
        raise invalid("messages", "messages must be an array of message objects", "invalid_type")
    if not value:
        raise invalid("messages", "messages must contain at least one message")
    if len(value) > max_messages:
        raise invalid("messages", f"at most {max_messages} messages per request, got {len(value)}")
    return [_message(item, f"messages[{i}]") for i, item in enumerate(value)]


def _message(value: object, where: str) -> ChatMessage:
    fields = json_object(value, where)
    role = fields.get("role")
    if role is None:
        raise invalid(f"{where}.role", "role is required", "missing_required_parameter")
    if not isinstance(role, str) or role not in ROLES:
        raise invalid(f"{where}.role", "role must be one of " + ", ".join(sorted(ROLES)))
    content = fields.get("content")
    breaks: tuple[int, ...] = ()
    if content is None:
        if role != "assistant":  # an assistant turn may be empty; every other needs text
            raise invalid(f"{where}.content", "content is required", "missing_required_parameter")
        content = ""
    elif isinstance(content, list):
        parts = [_text_part(part, f"{where}.content[{i}]") for i, part in enumerate(content)]
        content = "".join(parts)
        breaks = part_breaks(parts)
    else:
        content = text(content, f"{where}.content")
    name = fields.get("name")
    if name is not None:
        name = text(name, f"{where}.name")
    calls, call_id = history_calls(fields, where)  # kept for a template that renders them (gateway.api.tools)
    # "developer" is OpenAI's newer name for "system"; chat templates know only the latter.
    return ChatMessage(
        role="system" if role == "developer" else role, content=content, name=name,
        tool_calls=calls if role == "assistant" else (), tool_call_id=call_id if role == "tool" else None,
        breaks=breaks,
    )


def _text_part(value: object, where: str) -> str:
    fields = json_object(value, where)
    kind = fields.get("type")
    if kind != "text":
        if not isinstance(kind, str):
            raise invalid(f"{where}.type", "a content part needs a type", "missing_required_parameter")
        raise _unsupported(f"{where}.type", f"content parts of type {kind[:40]!r} are not supported")
    return text(fields.get("text"), f"{where}.text")


def _prompts(value: object) -> list[str]:
    if value is None:
        raise invalid("prompt", "prompt is required", "missing_required_parameter")
    if isinstance(value, str):
        return [text(value, "prompt")]
    if not isinstance(value, list):
        raise invalid("prompt", "prompt must be a string or an array of strings", "invalid_type")
    if not value:
        raise invalid("prompt", "prompt must not be an empty array")
    if len(value) > MAX_PROMPTS:
        raise invalid("prompt", f"at most {MAX_PROMPTS} prompts per request")
    if all(isinstance(item, int) and not isinstance(item, bool) for item in value) or any(
        isinstance(item, list) for item in value
    ):
        raise _unsupported("prompt", "prompts given as token ids are not supported; send text")
    return [text(item, f"prompt[{i}]") for i, item in enumerate(value)]


def _absent(fields: dict[str, Any], name: str, message: str) -> None:
    if fields.get(name) is not None:
        raise _unsupported(name, message)


def _unsupported(param: str, message: str) -> APIError:
    return invalid(param, message, "unsupported_parameter")
