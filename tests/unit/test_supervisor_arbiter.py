"""The arbiter for real: a subprocess supervising tiny fake children."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reame.shared.config import load
from reame.shared.lifecycle import EXIT_BOOT_FAILURE
from reame.supervisor.arbiter import ChildSpec, child_specs, describe_exit, restart_delay
from reame.supervisor.backoff import Backoff
from tests.waiting import PATIENCE_S, wait_for

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = PATIENCE_S  # an upper bound for a busy machine: only a failure waits it out

# Runs the arbiter in its own process (it installs signal handlers and reaps
# every child of its process), with the specs and grace period given as JSON;
# a spec's optional fourth item marks an optional child.
DRIVER = """
import json, logging, sys
from reame.shared import logs
from reame.supervisor.arbiter import Arbiter, ChildSpec
specs, grace = json.loads(sys.argv[1])
logs.setup("reame", "info")
children = [ChildSpec(role, index, tuple(argv), *rest) for role, index, argv, *rest in specs]
sys.exit(Arbiter(children, grace=grace, banner="all started").run())
"""

# A child that records its pid as DIR/NAME.PID, then sleeps; "stubborn" ignores SIGTERM.
CHILD = """
import os, signal, sys, time
directory, name, mode = sys.argv[1:4]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(directory, f"{name}.{os.getpid()}"), "w").close()
time.sleep(120)
"""


# role, index, argv[, optional]
Spec = tuple[str, int | None, list[str]] | tuple[str, int | None, list[str], bool]


def child(directory: Path, name: str, mode: str = "normal") -> list[str]:
    return [sys.executable, "-c", CHILD, str(directory), name, mode]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Run:
    """One arbiter process and the pids its children recorded."""

    def __init__(self, directory: Path, specs: list[Spec], grace: float):
        self.directory = directory
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, json.dumps([specs, grace])],
            env=env, stderr=subprocess.PIPE, text=True,
        )

    def pids(self, name: str) -> list[int]:
        return sorted(int(f.suffix[1:]) for f in self.directory.glob(f"{name}.*"))

    def all_pids(self) -> list[int]:
        return [int(f.suffix[1:]) for f in self.directory.iterdir()]

    def finish(self) -> tuple[int, str]:
        _, err = self.proc.communicate(timeout=TIMEOUT_S)
        return self.proc.returncode, err


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    started: list[Run] = []

    def start(specs: list[Spec], grace: float = 5.0) -> Run:
        run = Run(tmp_path, specs, grace)
        started.append(run)
        return run

    yield start
    for run in started:  # a failing test must not leak processes
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.communicate()
        for pid in run.all_pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_killed_child_is_restarted_and_sigterm_leaves_no_child(
    tmp_path: Path, runs: Callable[..., Run]
) -> None:
    run = runs([("dispatcher", None, child(tmp_path, "d")), ("worker", 0, child(tmp_path, "w0"))])
    wait_for(lambda: len(run.pids("d")) == 1 and len(run.pids("w0")) == 1, what="both children to start")
    (first,) = run.pids("w0")
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: len(run.pids("w0")) == 2, what="the worker to be restarted")
    assert run.proc.poll() is None

    run.proc.send_signal(signal.SIGTERM)
    code, err = run.finish()
    assert code == 0, err
    assert [pid for pid in run.all_pids() if alive(pid)] == []
    assert f"worker 0 (pid {first}) exited: killed by SIGKILL" in err
    assert "restarting it in 0.5 s" in err
    assert err.count("started worker 0") == 2
    assert "all started" in err


def test_child_that_cannot_boot_is_not_respawned(tmp_path: Path, runs: Callable[..., Run]) -> None:
    boot_failure = [sys.executable, "-c", f"import sys; sys.exit({EXIT_BOOT_FAILURE})"]
    run = runs([("dispatcher", None, child(tmp_path, "d")), ("worker", 1, boot_failure)])
    code, err = run.finish()
    assert code == 1, err
    assert "worker 1 could not start" in err
    assert err.count("started worker 1") == 1
    # The other child may be stopped before it got as far as recording its pid.
    (dispatcher,) = re.findall(r"started dispatcher \(pid (\d+)\)", err)
    assert f"dispatcher (pid {dispatcher}) exited" in err
    assert not alive(int(dispatcher))


def test_optional_child_that_cannot_boot_is_retried_while_the_rest_serves(
    tmp_path: Path, runs: Callable[..., Run]
) -> None:
    # Records each attempt, then fails to boot, as a cachekeeper with an unwritable directory does.
    boot_failure = [sys.executable, "-c", CHILD.replace("time.sleep(120)", f"sys.exit({EXIT_BOOT_FAILURE})"),
                    str(tmp_path), "c", "normal"]
    run = runs([("dispatcher", None, child(tmp_path, "d")), ("cachekeeper", None, boot_failure, True)])
    wait_for(lambda: len(run.pids("c")) >= 3, what="the cachekeeper to be tried three times")
    assert run.proc.poll() is None
    (dispatcher,) = run.pids("d")  # never restarted: the failure concerned only the cachekeeper
    assert alive(dispatcher)
    run.proc.send_signal(signal.SIGTERM)
    code, err = run.finish()
    assert code == 0, err
    assert "cachekeeper (pid" in err and "serving without it, trying again in 0.5 s" in err
    assert "trying again in 1.0 s" in err  # backing off, not looping
    assert "could not start (exit code 3, see its log above): not restarting it" not in err


def test_restart_policy_after_an_exit() -> None:
    required = ChildSpec("worker", 0, ("w",))
    optional = ChildSpec("cachekeeper", None, ("c",), optional=True)
    backoff = Backoff(initial=0.5, maximum=4.0, reset_after=60.0)
    assert restart_delay(required, EXIT_BOOT_FAILURE, 0.1, backoff) is None
    assert [restart_delay(optional, EXIT_BOOT_FAILURE, 0.1, backoff) for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert restart_delay(optional, EXIT_BOOT_FAILURE, 61.0, backoff) == 0.5  # it had run well: start over
    assert restart_delay(required, 1, 0.1, Backoff()) == 0.5
    assert restart_delay(required, -signal.SIGKILL, 0.1, Backoff()) == 0.5


def test_children_that_ignore_sigterm_are_killed_after_the_grace_period(
    tmp_path: Path, runs: Callable[..., Run]
) -> None:
    run = runs(
        [("dispatcher", None, child(tmp_path, "d", "stubborn")), ("gateway", None, child(tmp_path, "g"))],
        grace=0.5,
    )
    wait_for(lambda: len(run.all_pids()) == 2, what="both children to start")
    run.proc.send_signal(signal.SIGINT)
    code, err = run.finish()
    assert code == 0, err
    assert [pid for pid in run.all_pids() if alive(pid)] == []
    assert "dispatcher did not stop within" in err
    assert "exited: killed by SIGTERM" in err  # the gateway stopped on its own
    assert "exited: killed by SIGKILL" in err


def test_child_command_lines(tmp_path: Path) -> None:
    conf = tmp_path / "reame.conf"
    conf.write_text("[workers]\ncount = 2\n")
    specs = child_specs(load(conf, environ={}), "/etc/reame.conf", python="/py")
    assert [s.name for s in specs if s.optional] == ["cachekeeper"]
    assert [(s.name, s.argv) for s in specs] == [
        ("dispatcher", ("/py", "-P", "-m", "reame.dispatcher", "--config", "/etc/reame.conf")),
        ("cachekeeper", ("/py", "-P", "-m", "reame.cachekeeper", "--config", "/etc/reame.conf")),
        ("worker 0", ("/py", "-P", "-m", "reame.worker", "--config", "/etc/reame.conf", "--index", "0")),
        ("worker 1", ("/py", "-P", "-m", "reame.worker", "--config", "/etc/reame.conf", "--index", "1")),
        ("gateway", ("/py", "-P", "-m", "reame.gateway", "--config", "/etc/reame.conf")),
    ]
    no_file = child_specs(load(None, environ={"REAME_WORKERS_COUNT": "1"}), None, python="/py")
    assert [s.argv for s in no_file] == [
        ("/py", "-P", "-m", "reame.dispatcher"),
        ("/py", "-P", "-m", "reame.cachekeeper"),
        ("/py", "-P", "-m", "reame.worker", "--index", "0"),
        ("/py", "-P", "-m", "reame.gateway"),
    ]
    no_cache = load(None, environ={"REAME_WORKERS_COUNT": "1", "REAME_CACHE_ENABLED": "false"})
    assert [s.name for s in child_specs(no_cache, None, python="/py")] == ["dispatcher", "worker 0", "gateway"]


def test_exit_descriptions() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(EXIT_BOOT_FAILURE) == f"exit code {EXIT_BOOT_FAILURE} (could not start)"
