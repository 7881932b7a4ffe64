"""The report of `reame bench`: a Markdown section per scenario, REPORT.md, and PNG plots (matplotlib, optional)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

Cell = str | int | float | None


@dataclass
class Section:
    """One scenario's results: the ratio its goal is stated in, how they were taken, tables and plots."""

    title: str
    goal: list[str]
    how: str
    tables: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run: str = ""  # the command, date and machine of the run it comes from (set by the CLI)

    def markdown(self) -> str:
        lines = [f"## {self.title}", ""]
        if self.run:
            lines += [f"{RUN_LABEL} {self.run}", ""]
        lines += [f"*How:* {self.how}", ""]
        for table in self.tables:
            lines += [table, ""]
        lines += [f"- {goal}" for goal in self.goal]
        lines += [f"- {note}" for note in self.notes]
        lines.append("")
        lines += [f"![{Path(plot).stem}]({plot})" for plot in self.plots]
        return "\n".join(lines).rstrip() + "\n"


def cell(value: Cell, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if value != value else f"{value:.{digits}f}"
    return str(value)


def table(header: Sequence[str], rows: Sequence[Sequence[Cell]], digits: int = 3) -> str:
    """A Markdown table; floats with ``digits`` decimals, None as a dash."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value, digits) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


RUN_LABEL: Final = "*Run:*"
TITLE: Final = "# reame bench"
PREAMBLE: Final = (
    "Each section names the run it comes from. A run into the same directory replaces the sections of the "
    "scenarios it ran and keeps the others, so scenarios measured one at a time make one report."
)


def write(out: Path, sections: Sequence[Section]) -> Path:
    """Write ``out/REPORT.md``: these sections, and those of scenarios not run now from the REPORT.md there.

    A full run on a 1.5B model takes hours on 2 cores; run scenario by scenario, each
    still side by side with the peer, the report is the same file in the end.
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / "REPORT.md"
    kept = earlier_sections(path.read_text(errors="replace")) if path.exists() else {}
    for section in sections:
        kept[section.title] = section.markdown()  # in place when it was there, else at the end
    path.write_text(f"{TITLE}\n\n{PREAMBLE}\n\n" + "\n".join(kept.values()))
    return path


def earlier_sections(text: str) -> dict[str, str]:
    """Split a REPORT.md into its sections by title, each with the line of the run it comes from.

    A report written before sections named their run has it once under the title: it is
    copied into each of its sections.
    """
    head, *parts = re.split(r"^## ", text, flags=re.MULTILINE)
    run = next((line for line in head.splitlines() if line.startswith("`reame bench")), "")
    sections: dict[str, str] = {}
    for part in parts:
        title, _, body = part.partition("\n")
        if run and RUN_LABEL not in body:
            body = f"\n{RUN_LABEL} {run}\n" + body
        sections[title.strip()] = f"## {title.strip()}\n{body.rstrip()}\n"
    return sections


_warned: list[bool] = []


def plot(out: Path, name: str, draw: Callable[[Any], None]) -> str | None:
    """Draw one figure with ``draw(axes)`` into ``out/name``; None (said once) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if not _warned:
            _warned.append(True)
            print("reame bench: matplotlib is not installed, so no plots (pip install 'reame[bench]')")
        return None
    out.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        draw(axes)
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend()
        figure.tight_layout()
        figure.savefig(out / name)
    finally:
        plt.close(figure)
    return name


def bars(axes: Any, groups: Sequence[str], series: dict[str, Sequence[float]], ylabel: str) -> None:
    """Grouped bars: one group per label, one bar per series."""
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        axes.bar([g + i * width for g in range(len(groups))], values, width, label=name)
    axes.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))], groups, rotation=20, ha="right")
    axes.set_ylabel(ylabel)
