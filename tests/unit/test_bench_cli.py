"""`reame bench`'s scenario tables: every name has a module with the entry point the CLI calls."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

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


def test_peers_default_to_every_one_found() -> None:
    from reame.benchmarks import peers

    binary = Path("/opt/llama-server")
    assert peers.choose(None, binary, True) == (peers.LLAMA_SERVER, peers.LLAMA_CPP_PYTHON)
    assert peers.choose(None, None, True) == (peers.LLAMA_CPP_PYTHON,)
    assert peers.choose(None, None, False) == ()
    assert peers.choose("llama-server", binary, False) == (peers.LLAMA_SERVER,)
    assert peers.choose("both", binary, True) == peers.PEERS


def test_a_peer_named_and_missing_is_an_error_saying_how_to_get_it() -> None:
    from reame.benchmarks import peers

    with pytest.raises(peers.PeerError, match="make peer"):
        peers.choose("llama-server", None, True)
    with pytest.raises(peers.PeerError, match=r"make peer.*reame\[bench\]"):
        peers.choose("both", None, False)
    with pytest.raises(peers.PeerError, match="no peer 'ollama'; choose from both, llama-server, llama-cpp-python"):
        peers.choose("ollama", None, True)


def test_cli_refuses_a_missing_peer_before_loading_a_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("REAME_BENCH_LLAMA_SERVER", raising=False)
    monkeypatch.setattr("reame.benchmarks.llama_server.BUILT", tmp_path / "none")
    monkeypatch.setenv("PATH", str(tmp_path))
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.run(parser.parse_args(["qa", "--peer", "llama-server", "--model", str(tmp_path / "m.gguf")])) == 2
    assert "llama-server not found: build it with `make peer`" in capsys.readouterr().err


def test_the_report_says_which_peer_did_not_run(tmp_path: Path) -> None:
    from reame.benchmarks import peers
    from reame.benchmarks.common import Setup

    setup = Setup(Path("m.gguf"), None, Path("exam"), tmp_path, 1, False, 4096, tmp_path,
                  llama_server=None, peers=(peers.LLAMA_CPP_PYTHON,))
    (line,) = peers.missing_lines(setup)
    assert line.startswith("llama-server not found") and "no ratio to it" in line
    chosen = Setup(Path("m.gguf"), None, Path("exam"), tmp_path, 1, False, 4096, tmp_path,
                   llama_server=Path("/opt/llama-server"), peers=(peers.LLAMA_CPP_PYTHON,))
    assert peers.missing_lines(chosen, (peers.LLAMA_SERVER,)) == [
        "llama-server not run (--peer llama-cpp-python): no ratio to it"]


def test_rag_exam_sides_are_checked_before_loading_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.unknown_sides("parts,whole") == "" and cli.unknown_sides("") == ""
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.run(parser.parse_args(["rag-exam", "--sides", "parts,hole"])) == 2
    assert "no rag-exam side hole; choose from chunks, parts, whole" in capsys.readouterr().err


def test_rag_exam_reports_each_side_it_ran_against_the_whole_read(tmp_path: Path) -> None:
    from reame.benchmarks import rag_exam
    from reame.benchmarks.common import Setup, Timing
    from reame.benchmarks.exam import Question

    questions = [Question(f"q{i}", "doc", "?", r"\b42\b", r"\b41\b", "", True) for i in range(3)]

    def said(*texts: str) -> list[Timing]:
        return [Timing(1.0, 2.0, 3, 1.0, 0, 100, text) for text in texts]

    setup = Setup(Path("m.gguf"), None, Path("exam"), tmp_path, 1, False, 4096, tmp_path)
    section = rag_exam.report(setup, questions, {"parts": said("42", "41", "no idea"), "whole": said("42", "42", "42")})
    (line,) = section.goal
    assert line.startswith("parts: 1 correct against 3 read whole, critical wrong answers 1 against 0")
    assert "NOT met" in line and line.endswith("graded differently: q1, q2")
    assert "| chunks |" not in section.markdown() and "| parts | 1 of 3 | 1 |" in section.markdown()
