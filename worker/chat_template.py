"""Render chat messages with the model's own Jinja template from the GGUF metadata.

This does what llama-cpp-python's ``Jinja2ChatFormatter`` does for a model whose
template it does not recognise (the same environment, filters and variables), so
a chat request here reads the same prompt as ``Llama.create_chat_completion``.
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

from reame.shared.protocol import ChatMessage

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

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """Return the prompt text for ``messages``, ending with the assistant's turn opening."""
        return self._render(messages, "", "")

    def render_segments(self, messages: Sequence[ChatMessage]) -> Segments:
        """Render ``messages``, telling the clients' text from the template's markup.

        Only the markup may hold special tokens: each content and name is wrapped in
        a pair of private-use characters none of them contains, and the rendered text
        is cut at those. For a template that leaves contents as they are (ChatML and
        most others) the joined text equals :meth:`render`'s; one that trims contents
        now keeps their outer whitespace, the only difference.
        """
        texts = [m.content for m in messages] + [m.name for m in messages if m.name is not None]
        # Lazily: normally the first two are free, so the texts are scanned twice.
        free = list(itertools.islice((mark for mark in _MARKERS if not any(mark in text for text in texts)), 2))
        if len(free) < 2:
            raise ChatTemplateError("the messages use every character from U+E000 to U+E0FF; drop some of them")
        start, end = free
        rendered = self._render(messages, start, end)
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

    def _render(self, messages: Sequence[ChatMessage], start: str, end: str) -> str:
        payload: list[dict[str, str]] = []
        for message in messages:
            item = {"role": message.role, "content": start + message.content + end}
            if message.name is not None:
                item["name"] = start + message.name + end
            payload.append(item)
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
                tools=None,
                tool_choice=None,
            )
        except ChatTemplateError as err:
            raise ChatTemplateError(f"the model's chat template rejected the messages: {err}") from err
        except Exception as err:  # a template can fail in any way jinja2 or Python allows
            raise ChatTemplateError(
                f"the model's chat template failed on these messages: {type(err).__name__}: {err}"
            ) from err
