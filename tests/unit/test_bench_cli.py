"""`reame bench`'s scenario tables: every name has a module with the entry point the CLI calls."""

from __future__ import annotations

import argparse
import importlib

import pytest

from reame.benchmarks import cli


def test_every_scenario_has_a_module_with_run() -> None:
    for name in [*cli.SCENARIOS, *cli.DEEP]:
        module = importlib.import_module(f"reame.benchmarks.{cli.MODULES[name]}")
        assert callable(module.run), name


def test_deep_scenarios_are_not_run_by_default() -> None:
    assert not set(cli.DEEP) & set(cli.SCENARIOS)
    assert set(cli.MODULES) == set(cli.SCENARIOS) | set(cli.DEEP)


def test_unknown_scenario_is_refused_with_the_choices() -> None:
    assert cli.unknown_scenarios(["qa", "answers"]) == ""
    refusal = cli.unknown_scenarios(["qa", "nosuch"])
    assert "no scenario nosuch" in refusal and "answers" in refusal and "qa" in refusal


def test_cli_refuses_unknown_before_loading_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.run(parser.parse_args(["nosuch"])) == 2
    assert "no scenario nosuch" in capsys.readouterr().err


def test_help_lists_the_deep_scenarios() -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert "answers:" in parser.format_help()
