"""Grammars in the worker's decode loops, in process on the real model: plain and lookup decoding."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from reame.gateway.api.tool_calls import FENCE_OPEN, OPEN, CallFormat, parse_reply
from reame.gateway.api.tools import parse_tools
from reame.gateway.grammar.schema_gbnf import schema_grammar
from reame.shared.config import load
from reame.shared.model_file import ModelFileError, model_path
from reame.shared.modes import SpeculativeMode
from reame.shared.protocol import ChatMessage, Delta, Done, Error, Generate, Message, SamplingParams
from reame.worker.engine import Engine
from reame.worker.model import Model
from reame.worker.speculative.setup import Speculation
from tests.schemas import ENFORCED

pytestmark = pytest.mark.integration

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 18, "maximum": 65},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
DOCUMENT = (
    "Record: the applicant is Marie Curie, aged 44, living in Paris. Record: the applicant is Marie Curie, "
    "aged 44, living in Paris. Give her record as JSON with name, age and city."
)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    try:
        path = model_path(load(None, {}))
    except ModelFileError as err:
        pytest.skip(str(err))
    model = Model(path, 1024, 512, 1)
    # Forced drafting: a draft of up to 8 tokens at every step it can, so verification runs under the grammar.
    engine = Engine(model, speculation=Speculation(SpeculativeMode.LOOKUP, 1, 8, adaptive=False))
    engine.warm_up()
    yield engine
    model.close()


def run(
    engine: Engine, grammar: str, mode: SpeculativeMode, sampling: SamplingParams, question: str = DOCUMENT
) -> tuple[str, Done]:
    out: list[Message] = []
    request = Generate(
        "r", sampling, time.time() + 120, messages=[ChatMessage("user", question)], speculative=mode, grammar=grammar
    )
    engine.run(request, out.append, threading.Event())
    done = out[-1]
    assert isinstance(done, Done), done
    return "".join(m.text for m in out if isinstance(m, Delta)), done


def check_person(text: str) -> None:
    value = json.loads(text)
    assert set(value) == {"name", "age", "city"}
    assert isinstance(value["name"], str) and len(value["name"]) <= 40
    assert type(value["age"]) is int and 18 <= value["age"] <= 65
    assert value["city"] in ("Paris", "Rome", "Oslo")


@pytest.mark.parametrize("mode", [SpeculativeMode.OFF, SpeculativeMode.LOOKUP])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_replies_follow_the_schema(engine: Engine, mode: SpeculativeMode, temperature: float) -> None:
    for seed in range(3):
        text, done = run(engine, schema_grammar(PERSON), mode, SamplingParams(temperature=temperature, seed=seed,
                                                                               max_tokens=200))
        assert done.finish_reason == "stop", text
        check_person(text)


def test_lookup_drafts_are_checked_against_the_grammar(engine: Engine) -> None:
    """Under forced lookup drafting, drafts are verified and the reply still follows the grammar."""
    spec, done = run(engine, schema_grammar(PERSON), SpeculativeMode.LOOKUP, SamplingParams(temperature=0.0,
                                                                                             max_tokens=200))
    check_person(spec)
    assert done.draft_tokens > 0


def test_a_grammar_llama_cpp_cannot_parse_is_an_error(engine: Engine) -> None:
    out: list[Message] = []
    request = Generate("r", SamplingParams(max_tokens=5), time.time() + 60, prompt="x", grammar="root ::= (")
    engine.run(request, out.append, threading.Event())
    assert isinstance(out[-1], Error) and out[-1].param == "response_format"


@pytest.mark.parametrize("schema", ENFORCED, ids=[str(i) for i in range(len(ENFORCED))])
def test_every_enforced_schema_gives_valid_json(engine: Engine, schema: dict[str, Any]) -> None:
    """Sampled replies (two seeds, plain and lookup) validate against the schema, formats included."""
    jsonschema = pytest.importorskip("jsonschema")
    grammar = schema_grammar(schema)
    draft = jsonschema.Draft202012Validator
    validator = draft(schema, format_checker=draft.FORMAT_CHECKER)
    for seed, mode in ((0, SpeculativeMode.OFF), (1, SpeculativeMode.LOOKUP)):
        sampling = SamplingParams(temperature=1.0, seed=seed, max_tokens=120)
        text, done = run(engine, grammar, mode, sampling, "Fill in this JSON form with made-up values.")
        if done.finish_reason == "length":
            continue  # cut by max_tokens: the one case where the reply may be unfinished
        validator.validate(json.loads(text))


WEATHER_TOOL: Any = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
    "additionalProperties": False}}}


@pytest.mark.parametrize("mode", [SpeculativeMode.OFF, SpeculativeMode.LOOKUP])
@pytest.mark.parametrize("choice", ["required", "auto"])
def test_hermes_tool_grammars_hold_in_llama_cpp(engine: Engine, mode: SpeculativeMode, choice: str) -> None:
    # The <tool_call> format's grammar (gateway.api.tool_calls) compiled and followed by llama.cpp itself.
    tools = parse_tools({"tools": [WEATHER_TOOL], "tool_choice": choice}, CallFormat.HERMES)
    assert tools is not None
    finished = 0
    for seed in range(3):
        text, done = run(engine, tools.grammar, mode, SamplingParams(temperature=0.9, seed=seed, max_tokens=80),
                         "Weather in Paris and Rome?")
        if done.finish_reason != "stop":  # cut by max_tokens: no claim on a half reply
            continue
        finished += 1
        reply = parse_reply(text, CallFormat.HERMES, {"get_weather"})
        if choice == "required":
            assert reply is not None and reply.calls, text
        else:
            assert reply is not None or (OPEN not in text and not text.startswith(FENCE_OPEN)), text
        for call in reply.calls if reply is not None else []:
            assert set(json.loads(call["function"]["arguments"])) == {"city"}
    assert finished or choice == "auto", "every call was cut by max_tokens"  # auto: the small model may ramble
