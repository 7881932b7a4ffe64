"""`reame bench --quick`: every scenario runs end to end against the peer, so the harness cannot rot.

A smoke run, not a measurement: the test checks that each scenario produced its table,
its goal lines and (with matplotlib) its plots, never the figures themselves. The run
starts when the tests are collected and goes on beside them (tests/bench_smoke.py);
its test comes last and reads what it wrote.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reame.benchmarks.cli import SCENARIOS
from tests.bench_smoke import SmokeRun

pytestmark = pytest.mark.integration
TITLES = {
    "qa": "## Repeated-document QA",
    "load": "## Concurrent load",
    "compress": "## Prompt compression",
    "speculative": "## Speculative decoding",
    "overhead": "## Overhead of the stack",
    "extract": "## Extraction into a JSON schema",
    "first": "## First question about a new document",
    "rag": "## Documents in changing orders and company",
    "rag-exam": "## Chunk mode's accuracy: the exam with three documents a question",
    "conversation": "## A conversation about a document",
}
PLOTS = {"qa": "qa_ttft.png", "load": "load_latency_cdf.png", "compress": "compress_ttft.png",
         "speculative": "speculative_decode.png", "overhead": "overhead_ttft.png", "extract": "extract_decode.png",
         "first": "first_ttft.png", "rag": "rag_ttft.png",
         "rag-exam": "rag_exam.png", "conversation": "conversation_ttft.png"}


def test_every_scenario_runs_quick(smoke_run: SmokeRun) -> None:
    if importlib.util.find_spec("llama_cpp.server") is None:
        pytest.fail("the peer is missing: `make install-test` installs the bench extra")
    code, printed = smoke_run.wait()
    assert code == 0, printed[-10000:]
    out = smoke_run.out
    report = (out / "REPORT.md").read_text()
    assert set(TITLES) == set(SCENARIOS)
    for name, title in TITLES.items():
        assert title in report, name
        section = report.split(title, 1)[1].split("\n## ", 1)[0]
        assert "*How:*" in section and "thread(s)" in section, name
        assert "|---|" in section, name
        assert "goal" in section, name
        if importlib.util.find_spec("matplotlib") is not None:
            assert (out / PLOTS[name]).stat().st_size > 0, name
            assert f"({PLOTS[name]})" in section, name
    assert "Repeated-document QA" in printed  # the tables are printed too
    check_extract(report.split(TITLES["extract"], 1)[1].split("\n## ", 1)[0])


def check_extract(section: str) -> None:
    """`extract --quick`: one document's start, its fields extracted with lookup off and on."""
    assert "lookup / off" in section
    # The grammar makes every reply valid JSON for its schema, whichever the decoding.
    for mode in ("off", "lookup"):
        pattern = rf"- {mode}: valid JSON (\d+) % of (\d) finished replies \(goal 100 %: met\), (\d) cut"
        found = re.search(pattern, section)
        assert found, section
        # A reply cut by max_tokens (a loop the grammar allows) is not a finished one.
        assert int(found[2]) + int(found[3]) == 1 and (found[2] == "0" or found[1] == "100"), section
    assert "lookup/off decode speed under the grammar" in section


def test_unknown_scenario_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-P", "-m", "reame.supervisor", "bench", "nonsense", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "no scenario nonsense" in result.stderr
