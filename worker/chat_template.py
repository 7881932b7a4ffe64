"""Render chat messages with the model's own Jinja template from the GGUF metadata.

This does what llama-cpp-python's ``Jinja2ChatFormatter`` does for a model whose
template it does not recognise (the same environment, filters and variables), so
a chat request here reads the same prompt as ``Llama.create_chat_completion``.

Tools follow HuggingFace transformers' conventions, which templates that render tools
are written for: ``tools`` is a list of ``{"type": "function", "function": {name,
description, parameters}}``, an assistant turn's calls are ``tool_calls: [{"type":
"function", "id", "function": {"name", "arguments": <dict>}}]`` and a ``tool`` turn
has its ``tool_call_id``. The gateway sends them only to templates that render them
(gateway.api.tool_calls).
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
from collections.abc import Sequence
from typing import Any, Final, NoReturn

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from reame.shared.chunking import split_at
from reame.shared.protocol import ChatMessage, ToolFunction

# Private-use characters that mark where a message's text sits in the rendered prompt;
# a pair that no message uses is picked for each request.
_MARKERS: Final = [chr(code) for code in range(0xE000, 0xE100)]

# A rendered prompt in order: (text, True) for text a client wrote (contents, names),
# (text, False) for the template's own markup.
Segments = list[tuple[str, bool]]


class ChatTemplateError(ValueError):
    """The template cannot be compiled, or refused to render these messages."""


class _IgnoreGenerationTags(jinja2.ext.Extension):
    """Pass through HuggingFace's ``{% generation %}`` block tag (training-only markup)."""

    tags = {"generation"}  # noqa: RUF012 - jinja2 reads this class attribute

    def parse(self, parser: jinja2.parser.Parser) -> list[jinja2.nodes.Node]:
        parser.stream.skip(1)
        body: list[jinja2.nodes.Node] = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return body


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Transformers renders tojson this way (no HTML escaping, unicode kept).
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(message)


class ChatTemplate:
    """A compiled chat template plus the BOS/EOS texts it may refer to."""

    def __init__(self, source: str, bos_token: str, eos_token: str) -> None:
        """Compile ``source``; raise :class:`ChatTemplateError` if it is not valid Jinja."""
        env = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_IgnoreGenerationTags, jinja2.ext.loopcontrols],
        )
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as err:
            raise ChatTemplateError(f"the model's chat template does not compile: {err}") from err
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: Sequence[ChatMessage], tools: Sequence[ToolFunction] | None = None) -> str:
        """Return the prompt text for ``messages``, ending with the assistant's turn opening."""
        return self._render(messages, tools, "", "")

    def render_segments(self, messages: Sequence[ChatMessage], tools: Sequence[ToolFunction] | None = None) -> Segments:
        """Render ``messages``, telling the clients' text from the template's markup.

        Only the markup may hold special tokens: each content and name (and every
        string and key of the tools and the history's calls) is wrapped in a pair of
        private-use characters none of them contains, and the rendered text is cut at
        those. For a template that leaves contents as they are (ChatML and
        most others) the joined text equals :meth:`render`'s; one that trims contents
        now keeps their outer whitespace, the only difference.
        """
        texts = [text for m in messages for text in _texts(m)] + [text for t in tools or [] for text in _strings(
            (t.name, t.description, _arguments(t.parameters)))]
        # Lazily: normally the first two are free, so the texts are scanned twice.
        free = list(itertools.islice((mark for mark in _MARKERS if not any(mark in text for text in texts)), 2))
        if len(free) < 2:
            raise ChatTemplateError("the messages use every character from U+E000 to U+E0FF; drop some of them")
        start, end = free
        rendered = self._render(messages, tools, start, end)
        segments: Segments = []
        at = 0
        for match in re.finditer(f"{start}([^{start}{end}]*){end}", rendered):
            segments.append((rendered[at:match.start()], False))
            segments.append((match.group(1), True))
            at = match.end()
        segments.append((rendered[at:], False))
        if any(start in text or end in text for text, user in segments if not user):
            raise ChatTemplateError("the model's chat template cuts message contents apart; it cannot be used safely")
        return [(text, user) for text, user in segments if text]

    def _render(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolFunction] | None, start: str, end: str
    ) -> str:
        def mark(value: Any) -> Any:  # every string a client wrote, keys too; an empty one stays falsy
            if isinstance(value, str):
                return start + value + end if value else value
            if isinstance(value, dict):
                return {mark(k): mark(v) for k, v in value.items()}
            if isinstance(value, list):
                return [mark(item) for item in value]
            return value

        payload: list[dict[str, Any]] = []
        for message in messages:
            # Each text part marked on its own: its text is the same, but it is a segment of its own.
            content = "".join(mark(part) for part in split_at(message.content, message.breaks)) or message.content
            item: dict[str, Any] = {"role": message.role, "content": content}
            if message.name is not None:
                item["name"] = mark(message.name)
            if message.tool_calls:
                item["tool_calls"] = [
                    {"type": "function", "id": mark(call.id),
                     "function": {"name": mark(call.name), "arguments": mark(_arguments(call.arguments))}}
                    for call in message.tool_calls
                ]
            if message.tool_call_id is not None:
                item["tool_call_id"] = mark(message.tool_call_id)
            payload.append(item)
        listed = None if not tools else [
            {"type": "function", "function": {
                "name": mark(t.name), **({} if t.description is None else {"description": mark(t.description)}),
                "parameters": mark(_arguments(t.parameters)),
            }} for t in tools
        ]
        try:
            return self._template.render(
                messages=payload,
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                raise_exception=_raise_exception,
                strftime_now=_strftime_now,
                functions=None,
                function_call=None,
                tools=listed,
                tool_choice=None,
            )
        except ChatTemplateError as err:
            raise ChatTemplateError(f"the model's chat template rejected the messages: {err}") from err
        except Exception as err:  # a template can fail in any way jinja2 or Python allows
            raise ChatTemplateError(
                f"the model's chat template failed on these messages: {type(err).__name__}: {err}"
            ) from err


def _arguments(text: str) -> Any:
    """A call's arguments (or a function's parameters) as templates expect them, a dict; not JSON: the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _texts(message: ChatMessage) -> list[str]:
    """Every string of a message that the client wrote."""
    texts = [message.content, *([] if message.name is None else [message.name])]
    for call in message.tool_calls:
        texts += [call.id, call.name, *_strings(_arguments(call.arguments))]
    return texts + ([] if message.tool_call_id is None else [message.tool_call_id])


def _strings(value: Any) -> list[str]:
    """Every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for k, v in value.items() for text in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _strings(item)]
    return []
