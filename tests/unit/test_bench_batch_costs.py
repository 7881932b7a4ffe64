"""`reame bench batch-costs` without a model: the fastest time kept, costs in one-token decodes, the report."""

from __future__ import annotations

from pathlib import Path

from reame.benchmarks.batch_costs import DEFAULT, Loaded, report, rss_anon
from reame.benchmarks.common import Setup


def test_each_size_keeps_its_fastest_time_and_costs_in_one_token_decodes() -> None:
    entry = Loaded("m.gguf", DEFAULT, 0, True)
    entry.add({1: 0.010, 8: 0.050})
    entry.add({1: 0.020, 8: 0.030})
    assert entry.best == {1: 0.010, 8: 0.030}
    assert entry.cost(8) == 3.0


def test_rss_anon_reads_the_kernel_s_figure(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("VmRSS:\t  2048 kB\nRssAnon:\t  1024 kB\n")
    assert rss_anon(status) == 1024 * 1024
    assert rss_anon(tmp_path / "missing") == 0


def test_report_states_the_default_load_s_goal_and_the_fastest_load(tmp_path: Path) -> None:
    setup = Setup(Path("m.gguf"), None, Path("exam"), tmp_path / "out", 1, False, 4096, tmp_path)
    mapped = Loaded("m.gguf", "mmap", 20 << 20, False, {1: 0.010, 2: 0.016, 8: 0.050})
    default = Loaded("m.gguf", DEFAULT, 600 << 20, False, {1: 0.008, 2: 0.012, 8: 0.024})
    section = report(setup, [mapped, default], (1, 2, 8), rounds=3)
    text = section.markdown()
    assert "| m.gguf | mmap | 10.00 | 1.60 | 5.00 | 50.00 | 20 |" in text
    # llama.cpp did not repack (its extra buffers crash here): the row says so.
    assert f"| m.gguf | {DEFAULT} (not repacked) | 8.00 | 1.50 | 3.00 | 24.00 | 600 |" in text
    assert section.goal[0].endswith("a batch of 8 costs 3.00 one-token decodes (goal <= 3.0: met)")
    assert section.goal[1] == f"m.gguf: fastest one-token decode 8.0 ms with {DEFAULT}"
    assert "best of 3 round(s) by this thread's CPU time" in section.how
