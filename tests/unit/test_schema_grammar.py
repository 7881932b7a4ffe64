"""JSON schema to GBNF: what is enforced, what is refused and where, integer ranges, patterns."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reame.gateway.grammar.int_range import gbnf, int_range
from reame.gateway.grammar.regex_gbnf import PatternError, pattern_rule
from reame.gateway.grammar.schema_gbnf import SchemaError, schema_grammar
from reame.gateway.grammar.structured import response_grammar
from reame.gateway.http.errors import APIError
from tests.gbnf import accepts
from tests.schemas import ENFORCED, REFUSED


@pytest.mark.parametrize("schema", ENFORCED)
def test_enforced_schemas_convert_to_a_grammar_with_a_root(schema: dict[str, Any]) -> None:
    grammar = schema_grammar(schema)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    assert "root" in rules
    # Every rule a rule names is defined: the grammar is closed.
    for body in rules.values():
        bare = re.sub(r'"(\\.|[^"\\])*"|\[(\\.|[^\]\\])*\]', " ", body)  # literals and classes out
        for name in re.findall(r"[a-zA-Z][\w-]*", bare):
            assert name in rules, (name, grammar)


@pytest.mark.parametrize(("schema", "path"), REFUSED)
def test_schemas_that_cannot_be_enforced_are_refused_naming_the_part(schema: Any, path: str) -> None:
    with pytest.raises(SchemaError) as caught:
        schema_grammar(schema)
    assert caught.value.path == path


def test_the_gateway_answers_400_naming_the_keyword() -> None:
    with pytest.raises(APIError) as caught:
        response_grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": REFUSED[0][0]}})
    assert caught.value.status == 400
    assert caught.value.param == "response_format.json_schema.schema.minimum"


def test_text_and_json_object() -> None:
    assert response_grammar(None) is None
    assert response_grammar({"type": "text"}) is None
    grammar = response_grammar({"type": "json_object"})
    assert grammar is not None and "root ::= object" in grammar.splitlines()
    # No schema given: any JSON object, as OpenAI's schema allows.
    assert response_grammar({"type": "json_schema", "json_schema": {"name": "x"}}) == grammar


@pytest.mark.parametrize(
    ("low", "high"),
    [(0, 100), (1, 5), (-5, 5), (-100, -7), (3, None), (None, -3), (None, None), (17, 1234), (0, 0), (-1, 0),
     (None, 42), (-42, None), (99, 101), (10, 99), (1, 10**6), (-999, 999), (5, 5)],
)
def test_integer_ranges_match_exactly_the_integers_in_range(low: int | None, high: int | None) -> None:
    grammar = f"root ::= {gbnf(int_range(low, high))}"
    for n in range(-2100, 2100):
        inside = (low is None or n >= low) and (high is None or n <= high)
        assert accepts(grammar, str(n)) == inside, n
    for text in ("01", "-0", "00", "-01", "+1", "1.0"):
        assert not accepts(grammar, text)


def test_an_empty_integer_range_is_an_error() -> None:
    with pytest.raises(ValueError):
        int_range(3, 2)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("^[0-9]{5}$", '"\\"" (([0-9]){5}) "\\"" space'),
        ("^a|b$", None),  # anchors inside a branch
        ("^x\\d+$", '"\\"" ("x" ([0-9])+) "\\"" space'),
    ],
)
def test_patterns_translate_or_are_refused(pattern: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(PatternError):
            pattern_rule(pattern)
    else:
        assert pattern_rule(pattern) == expected


def test_unanchored_patterns_allow_text_around_the_match() -> None:
    rule = pattern_rule("ab")
    assert rule.startswith('"\\"" [^') and rule.endswith('* "\\"" space')


def test_classes_never_produce_raw_quotes_backslashes_or_control_characters() -> None:
    rule = pattern_rule('^[ -~]$')  # printable ASCII, which includes '"' and '\\'
    assert "\\x22" not in rule and "\\x5C" not in rule and "\\x00" not in rule
    assert '"\\\\\\""' in rule and '"\\\\\\\\"' in rule  # both are offered JSON-escaped


RECURSIVE = {"type": "object", "properties": {"name": {"type": "string"}, "next": {"$ref": "#/$defs/node"}}}


@pytest.mark.parametrize("schema", [
    {"$ref": "#/$defs/node", "$defs": {"node": RECURSIVE}},  # the root a reference: was refused
    {"type": "object", "properties": {"head": {"$ref": "#/$defs/node"}}, "$defs": {"node": RECURSIVE}},
    {"$ref": "#/$defs/a", "$defs": {  # a <-> b
        "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}},
        "b": {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}},
    }},
])
def test_recursive_references_become_rules_that_refer_to_themselves(schema: dict[str, Any]) -> None:
    assert has_cycle(schema_grammar(schema))


def test_a_schema_without_references_has_no_cycle() -> None:
    assert not has_cycle(schema_grammar({"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "string"}}}}}))


def has_cycle(grammar: str) -> bool:
    """Tell whether some rule reaches itself through the rules it names."""
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines() if " ::= " in line)
    assert "root" in rules
    names = {name: {other for other in rules if re.search(rf"(?<![\w-]){re.escape(other)}(?![\w-])",
                                                          re.sub(r'"(?:[^"\\]|\\.)*"', "", body))}
             for name, body in rules.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in names[start])

    return any(reaches(name, name, set()) for name in rules)


def test_too_many_properties_are_refused_with_the_count() -> None:
    with pytest.raises(SchemaError) as caught:
        schema_grammar({"type": "object", "properties": {"x": {"type": "object", "properties": {
            f"p{i}": {"type": "integer"} for i in range(5000)}}}})
    assert caught.value.path == ".properties.x.properties"
    assert "5,000 properties" in caught.value.message


@pytest.mark.parametrize("pattern", ["(a+)+$", "^(a*)*$", "^(\\w+\\s?)+$", "^((ab)+)+$", "^(x|a+)+$"])
def test_repetitions_that_split_one_text_many_ways_are_refused(pattern: str) -> None:
    with pytest.raises(PatternError, match=r"\(a\+\)\+"):
        pattern_rule(pattern)


@pytest.mark.parametrize("pattern", ["^([a-z]+-)*[a-z]+$", "^(ab)+$", "^[a-z]+(,[a-z]+)*$", "a+$", "^(\\d+\\.)+\\d+$"])
def test_delimited_repetitions_are_translated(pattern: str) -> None:
    assert pattern_rule(pattern).startswith('"\\""')
