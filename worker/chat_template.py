"""Render chat messages with the model's own Jinja template from the GGUF metadata.

This does what llama-cpp-python's ``Jinja2ChatFormatter`` does for a model whose
template it does not recognise (the same environment, filters and variables), so
a chat request here reads the same prompt as ``Llama.create_chat_completion``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from reame.shared.protocol import ChatMessage


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
        payload: list[dict[str, str]] = []
        for message in messages:
            item = {"role": message.role, "content": message.content}
            if message.name is not None:
                item["name"] = message.name
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
