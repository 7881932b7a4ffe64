"""`reame bench extract`'s pure parts: field names, the schema the gateway must accept, validity, grading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("openai")  # reame.benchmarks needs the test or bench extra

from reame.benchmarks.common import Setup  # after the skip
from reame.benchmarks.exam import Question
from reame.benchmarks.extract import MAX_VALUE_CHARS, accuracy, documents, field_name, instruction, schema_for, valid
from reame.gateway.grammar.structured import response_grammar

EXAM = Path(__file__).resolve().parents[1] / "data" / "exam"  # the repository's own: CI has no ../shared


def _question(text: str, accept: str = r"\b42\b", reject: str = r"\b41\b") -> Question:
    return Question("t-01", "t.txt", text, accept, reject, "It costs 42.", False)


def test_field_names_are_short_unique_and_from_the_question() -> None:
    taken: set[str] = set()
    assert field_name("What is the monthly rent for Unit 4B?", taken) == "monthly_rent_unit_4b"
    assert field_name("How much is the pet deposit?", taken) == "pet_deposit"
    assert field_name("How much is the pet deposit?", taken) == "pet_deposit_2"
    assert field_name("What is it?", taken) == "field"


def test_the_schema_is_one_required_nullable_short_string_per_question_and_enforceable() -> None:
    schema, fields = schema_for([_question("What is the price?"), _question("Is parking included?")])
    assert list(fields) == ["price", "parking_included"] == schema["required"]
    assert schema["additionalProperties"] is False
    response_grammar({"type": "json_schema", "json_schema": {"name": "facts", "schema": schema}})  # no 400
    assert "- price: What is the price?" in instruction(fields)
    assert valid('{"price": "42 euros", "parking_included": null}', schema) is not None
    for bad in ['{"price": "42"}', '{"price": 42, "parking_included": null}', "not json",
                json.dumps({"price": "x" * (MAX_VALUE_CHARS + 1), "parking_included": None}),
                '{"price": null, "parking_included": null, "more": null}']:
        assert valid(bad, schema) is None, bad


def test_accuracy_counts_the_fields_whose_fact_is_right() -> None:
    fields = {"price": _question("What is the price?"), "other": _question("And the other?")}
    assert accuracy(fields, {"price": "42 euros", "other": "41"}) == 1
    assert accuracy(fields, {"price": None, "other": None}) == 0
    assert accuracy(fields, None) == 0


def test_documents_are_the_exam_with_a_field_per_question_and_quick_is_one_start() -> None:
    setup = Setup(Path("m.gguf"), None, EXAM, Path("out"), 1, False, 4096, Path("tmp"))
    docs = documents(setup)
    assert [len(questions) for _, _, questions in docs] == [5]
    quick = documents(Setup(Path("m.gguf"), None, EXAM, Path("out"), 1, True, 4096, Path("tmp")))
    assert len(quick) == 1 and len(quick[0][1]) <= 2000 and quick[0][2]
