"""Rendering chat messages with a model's Jinja template."""

from __future__ import annotations

import pytest

from reame.shared.protocol import ChatMessage
from reame.worker.chat_template import ChatTemplate, ChatTemplateError

# SmolLM2's template, as stored in the default model's GGUF metadata.
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_chatml_adds_default_system_prompt_and_generation_prompt() -> None:
    template = ChatTemplate(CHATML, "<|im_start|>", "<|im_end|>")
    text = template.render([ChatMessage("user", "Hi")])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_bos_eos_and_name_are_visible_to_the_template() -> None:
    source = (
        "{{ bos_token }}{% for m in messages %}{{ m.name | default('-') }}:{{ m.content }}{% endfor %}"
        "{{ eos_token }}"
    )
    template = ChatTemplate(source, "<s>", "</s>")
    text = template.render([ChatMessage("user", "a", name="bob"), ChatMessage("user", "b")])
    assert text == "<s>bob:a-:b</s>"


def test_trim_and_lstrip_blocks_are_on() -> None:
    source = "{% for m in messages %}\n    {% if true %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert ChatTemplate(source, "", "").render([ChatMessage("user", "x")]) == "[x]\n"


def test_tojson_keeps_unicode_and_generation_tag_passes_through() -> None:
    source = "{{ messages[0].content | tojson }}{% generation %}!{% endgeneration %}"
    assert ChatTemplate(source, "", "").render([ChatMessage("user", "é")]) == '"é"!'


def test_raise_exception_becomes_a_clear_error() -> None:
    source = "{% if messages[0].role != 'system' %}{{ raise_exception('System first, please') }}{% endif %}"
    template = ChatTemplate(source, "", "")
    with pytest.raises(ChatTemplateError, match="rejected the messages: System first, please"):
        template.render([ChatMessage("user", "x")])


def test_runtime_failure_in_template_is_a_template_error() -> None:
    template = ChatTemplate("{{ messages[5].content }}", "", "")
    with pytest.raises(ChatTemplateError, match="failed on these messages"):
        template.render([ChatMessage("user", "x")])


def test_syntax_error_is_reported_at_compile_time() -> None:
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for m in messages %}", "", "")


def test_sandbox_blocks_attribute_escapes() -> None:
    template = ChatTemplate("{{ messages.__class__.__mro__ }}", "", "")
    with pytest.raises(ChatTemplateError):
        template.render([ChatMessage("user", "x")])
