"""`reame bench speculative-engine` without a model: its prompts, their order, the forced mode and the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from reame.benchmarks.common import Setup
from reame.benchmarks.speculative import QUICK_PROMPTS
from reame.benchmarks.speculative_engine import (
    FORCED,
    FORCED_DRAFTS,
    Prompt,
    Sample,
    forced,
    in_turn,
    prompts,
    report,
)
from reame.shared.modes import SpeculativeMode
from reame.worker.speculative.setup import Speculation


def setup(tmp_path: Path) -> Setup:
    return Setup(Path("m.gguf"), None, Path("exam"), tmp_path / "out", 1, False, 4096, tmp_path)


def test_quick_takes_the_shared_quick_prompts_and_the_sampled_story() -> None:
    quick = prompts(quick=True)
    assert [p.name for p in quick] == [*QUICK_PROMPTS, "story-sampled"]
    assert quick[-1].temperature > 0 and all(p.temperature == 0 for p in quick[:-1])
    assert len(prompts(quick=False)) > len(quick)


def test_each_mode_goes_first_in_turn() -> None:
    modes = ["off", "lookup", FORCED]
    orders = [in_turn(modes, shift) for shift in range(4)]
    assert [order[0] for order in orders] == ["off", "lookup", FORCED, "off"]
    assert all(sorted(order) == sorted(modes) for order in orders)


def test_forced_mode_drops_the_pay_off_rule_and_puts_it_back() -> None:
    speculation = Speculation(SpeculativeMode.OFF, 1, 15)
    with pytest.raises(RuntimeError), forced(speculation):
        assert (speculation.adaptive, speculation.draft_min, speculation.draft_max) == (
            False, FORCED_DRAFTS, FORCED_DRAFTS)
        raise RuntimeError("a failed run")
    assert (speculation.adaptive, speculation.draft_min, speculation.draft_max) == (True, 1, 15)


def sample(speed: float, text: str = "same", drafted: int = 0, accepted: int = 0) -> Sample:
    return Sample(speed, 10, drafted, accepted, 5.0, text)


def test_report_gives_ratios_drafts_and_the_lookup_goal(tmp_path: Path) -> None:
    chosen = [Prompt("repeat", "copy", "..."), Prompt("story", "chat", "..."),
              Prompt("story-sampled", "chat", "...", 0.8)]
    samples = {
        ("repeat", "off"): [sample(10.0), sample(12.0)], ("repeat", "lookup"): [sample(22.0, drafted=9, accepted=8)],
        ("story", "off"): [sample(10.0)], ("story", "lookup"): [sample(9.0, text="other")],
        ("story-sampled", "off"): [sample(10.0, "a")], ("story-sampled", "lookup"): [sample(10.0, "b")],
    }
    section = report(setup(tmp_path), chosen, ["off", "lookup"], samples, "runs", ["costs"])
    text = section.markdown()
    assert "| repeat | copy | 10 | 11.00 | 22.00 | 2.00 (8/9) | yes |" in text
    assert "| story | chat | 10 | 10.00 | 9.00 | 0.90 (0/0) | no |" in text
    assert "| story-sampled (T=0.8) | chat | 10 | 10.00 | 10.00 | 1.00 (0/0) | - |" in text  # sampled: no check
    assert "lookup/off on copy: geometric mean 2.00x, lowest 2.00x (goal >= 1.5: met)" in section.goal
    assert any(line.startswith("lookup/off on chat:") and "NOT met" in line for line in section.goal)
    assert not any("extract" in line for line in section.goal)  # no such prompt was run
    assert section.notes[0] == "costs" and "median prompt time" in section.notes[1]
