"""The pieces of `reame bench` that need no model: tables, the QA plan, the exam's grading and quick cut, progress."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from reame.benchmarks import common
from reame.benchmarks.cli import add_arguments, command_line
from reame.benchmarks.exam import Question, grade, load_exam
from reame.benchmarks.qa import plan
from reame.benchmarks.report import Section, percentile, table, write


def test_table_formats_floats_and_missing_cells() -> None:
    text = table(["a", "b", "c"], [["x", 1.23456, None], ["y", float("nan"), 3]], digits=2)
    assert text.splitlines() == ["| a | b | c |", "|---|---|---|", "| x | 1.23 | - |", "| y | - | 3 |"]


def test_percentile_picks_a_sample() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == 5.0


def test_plan_asks_back_to_back_then_interleaves() -> None:
    assert plan(2, 4) == [
        (0, 0, "cold"), (0, 1, "back to back"), (1, 0, "cold"), (1, 1, "back to back"),
        (0, 2, "interleaved"), (1, 2, "interleaved"), (0, 3, "interleaved"), (1, 3, "interleaved"),
    ]
    assert plan(1, 1) == [(0, 0, "cold")]


def test_report_holds_every_section(tmp_path: Path) -> None:
    section = Section("Title", ["ratio 1.5x (goal >= 1.5: met)"], "here", [table(["a"], [[1]])], ["p.png"])
    section.run = "`reame bench qa`, today"
    path = write(tmp_path / "out", [section])
    text = path.read_text()
    assert "## Title" in text and "*How:* here" in text and "- ratio 1.5x" in text and "![p](p.png)" in text
    assert "*Run:* `reame bench qa`, today" in text


def test_a_later_run_replaces_its_scenarios_and_keeps_the_others(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(out, [Section("QA", ["qa first"], "h", run="run 1"), Section("Load", ["load first"], "h", run="run 1")])
    write(out, [Section("QA", ["qa again"], "h", run="run 2"), Section("Compression", ["new"], "h", run="run 2")])
    text = (out / "REPORT.md").read_text()
    assert "qa first" not in text and text.count("## ") == 3
    assert text.index("## QA") < text.index("## Load") < text.index("## Compression")
    load = text.split("## Load", 1)[1].split("## ", 1)[0]
    assert "*Run:* run 1" in load and "- load first" in load
    assert "*Run:* run 2" in text.split("## QA", 1)[1].split("## ", 1)[0]


def test_a_report_of_the_old_layout_gives_its_run_line_to_each_section(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "REPORT.md").write_text("# reame bench\n\n`reame bench qa load`, then. vm.\n\n## QA\n\nq\n\n## Load\n\nl\n")
    write(out, [Section("QA", ["new"], "h", run="run 2")])
    text = (out / "REPORT.md").read_text()
    assert "*Run:* `reame bench qa load`, then. vm." in text.split("## Load", 1)[1]
    assert "`reame bench qa load`" not in text.split("## Load", 1)[0]


def exam_dir(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("x" * 5000 + " The fee is 38 euros per day. " + "y" * 5000)
    question = {"id": "a-01", "doc": "a.txt", "question": "What is the fee?", "accept": r"\b38\b",
                "reject": r"\b52\b", "span": "The fee is 38 euros per day.", "critical": True}
    (tmp_path / "questions.jsonl").write_text(json.dumps(question) + "\n")
    return tmp_path


def test_quick_exam_keeps_a_window_around_the_span(tmp_path: Path) -> None:
    docs, questions = load_exam(exam_dir(tmp_path), quick=True)
    assert len(questions) == 1
    assert "The fee is 38 euros per day." in docs["a.txt"]
    assert len(docs["a.txt"]) <= 2000


def test_missing_exam_says_which_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--exam"):
        load_exam(tmp_path, quick=True)


def test_grade_reads_the_first_line() -> None:
    question = Question("q", "d", "?", r"\b38\b", r"\b52\b", "38", True)
    assert grade(question, "\n 38 euros\n52") == "OK"
    assert grade(question, "52 euros") == "HALLU"
    assert grade(question, "I do not know\n38") == "MISS"


def test_progress_falls_back_to_lines_without_tqdm(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    def no_tqdm(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr("reame.benchmarks.common.importlib.import_module", no_tqdm)
    progress = common.Progress(2, "demo")
    progress.step("one")
    progress.close()
    err = capsys.readouterr().err
    assert "demo: 2 steps" in err and "[1/2] demo one" in err


def test_cpu_model_names_something() -> None:
    assert common.cpu_model()


def test_no_plots_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from reame.benchmarks import report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    monkeypatch.setattr(report, "_warned", [])
    assert report.plot(tmp_path, "x.png", lambda axes: None) is None
    assert report.plot(tmp_path, "y.png", lambda axes: None) is None
    assert capsys.readouterr().out.count("matplotlib is not installed") == 1
    assert not (tmp_path / "x.png").exists()


def test_the_run_line_names_the_options_that_shape_the_figures() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["speculative", "--threads", "2", "--model", "/m/big.gguf", "--draft-model", "/m/d.gguf"])
    assert command_line(["speculative"], args) == "speculative --threads 2 --model big.gguf --draft-model d.gguf"
    assert command_line(["qa"], parser.parse_args(["--quick", "--threads", "1"])) == "qa --threads 1 --quick"
