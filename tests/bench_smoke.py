"""`reame bench --quick` beside the rest of the suite: its smoke run starts when the tests are collected.

The smoke run (tests/integration/test_bench.py) is a few minutes of servers starting
and short requests, mostly on one thread, and most other tests leave a core idle too
(a worker of one thread), so it runs beside them in its own process instead of after
them: tests/conftest.py starts it once the run's tests are collected and orders its
test last, which then waits for it and reads the report. Nothing asserts how long
anything took; a busy machine only makes both slower.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

NODE: Final = "tests/integration/test_bench.py::test_every_scenario_runs_quick"
EXAM: Final = Path(__file__).resolve().parent / "data" / "exam"  # the repository's own: CI has no ../shared
TIMEOUT_S: Final = 1800.0  # beside the other tests, on a slow CI machine


@dataclasses.dataclass
class SmokeRun:
    """A `reame bench --quick` process and where it writes."""

    proc: subprocess.Popen[bytes]
    top: Path

    @property
    def out(self) -> Path:
        return self.top / "report"

    def wait(self) -> tuple[int, str]:
        """Wait for the run to end; return its exit code and what it printed (stdout, then stderr)."""
        try:
            code = self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        printed = (self.top / "stdout").read_text(errors="replace") + (self.top / "stderr").read_text(errors="replace")
        return code, printed

    def close(self) -> None:
        """Stop the run if it still goes (the session ended early) and remove its files."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.top, ignore_errors=True)


def start() -> SmokeRun:
    """Start `reame bench --quick` on every scenario in a directory of its own, one thread a side.

    One thread leaves a core to the other tests; --quick's figures mean nothing anyway.
    """
    top = Path(tempfile.mkdtemp(prefix="reame-bench-smoke-"))
    with (top / "stdout").open("wb") as stdout, (top / "stderr").open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "reame.supervisor", "bench", "--quick", "--threads", "1",
             "--exam", str(EXAM), "--out", str(top / "report")],
            stdout=stdout, stderr=stderr, cwd=top,
        )
    return SmokeRun(proc, top)
