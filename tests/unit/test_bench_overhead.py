"""`reame bench overhead`'s report without a model: the bare HTTP side has a TTFT and no decode speed."""

from __future__ import annotations

from pathlib import Path

from reame.benchmarks.common import Setup, Timing
from reame.benchmarks.overhead import BARE, SIDES, report


def timing(ttft_s: float, decode_tps: float = 0.0) -> Timing:
    return Timing(ttft_s, 1.0, 16, decode_tps, None, None, "")


def test_the_bare_http_side_is_reported_beside_the_openai_client(tmp_path: Path) -> None:
    setup = Setup(Path("m.gguf"), None, Path("exam"), tmp_path / "out", 1, False, 4096, tmp_path)
    timings = {"reame": [timing(0.106, 99.0)], BARE: [timing(0.103)], "peer": [timing(0.110, 95.0)],
               "in-process": [timing(0.100, 100.0)]}
    assert set(timings) == set(SIDES)
    section = report(setup, timings, 1, 128)
    assert f"| {BARE} | 103.00 | 3.00 | - | - |" in section.markdown()
    assert section.goal[0].startswith("reame adds +6.0 ms to TTFT (goal <= 5 ms: NOT met)")
    assert "bare HTTP client (no client library's work) +3.0 ms" in section.goal[0]
    assert "0.990 of in-process speed (goal >= 0.97: met)" in section.goal[1]
