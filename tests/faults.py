"""Shared pieces of the fault suite (tests/integration/test_fault_*.py).

CI runs each scenario a few times; ``REAME_FAULTS_LONG=1`` (``make faults``) runs the long
loops. Each scenario counts what it did in a :class:`Tally`; with ``REAME_FAULTS_REPORT`` set
to a path, the tallies are appended there as JSON lines, which is where the figures of
RELIABILITY.md come from. Nothing here asserts a duration: times are measured and reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import openai

from tests.harness import Server, cmdline

LONG_RUN = os.environ.get("REAME_FAULTS_LONG", "") == "1"

# Greedy questions whose answers are compared with the same request served alone.
PROMPTS = [f"In one sentence, what is {topic}?" for topic in (
    "a lighthouse", "a river delta", "a violin", "a glacier", "a compass", "a bakery", "a comet", "a harbour",
)]


def scale(short: int, long: int) -> int:
    """``long`` under ``REAME_FAULTS_LONG=1``, else ``short``."""
    return long if LONG_RUN else short


@dataclass
class Tally:
    """What one scenario did; written to ``REAME_FAULTS_REPORT`` as one JSON line."""

    scenario: str
    faults: int = 0
    sent: int = 0
    answered: int = 0
    errors: int = 0  # clean errors: an error event, or a 429/503/504 with its body
    wrong: int = 0  # answers that differ from the same request served alone
    lost: int = 0  # committed data missing afterwards, or requests with no answer at all
    recovery_s: list[float] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, **increments: int) -> None:
        with self._lock:
            for name, value in increments.items():
                setattr(self, name, getattr(self, name) + value)

    def write(self) -> None:
        target = os.environ.get("REAME_FAULTS_REPORT")
        record: dict[str, Any] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("started", "_lock")
        }
        record["long"] = LONG_RUN
        record["seconds"] = round(time.monotonic() - self.started, 1)
        record["recovery_s"] = [round(r, 2) for r in self.recovery_s]
        print(json.dumps(record))
        if target:
            with open(target, "a") as out:
                out.write(json.dumps(record) + "\n")


def chat(prompt: str, max_tokens: int = 24, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
        "temperature": 0, "stream": stream, **extra,
    }


@dataclass
class Outcome:
    kind: str = "pending"  # completed | error (error event or API error) | status (an HTTP error status)
    text: str = ""
    chunks: int = 0
    status: int = 0
    retry_after: str | None = None
    message: str = ""
    first_token: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


def stream(server: Server, body: dict[str, Any], outcome: Outcome, timeout: float = 300.0) -> None:
    """Stream ``body`` with the openai client, recording what came back in ``outcome``."""
    try:
        with server.client(timeout=timeout) as client:
            for chunk in client.chat.completions.create(**{**body, "stream": True}):
                if chunk.choices and chunk.choices[0].delta.content:
                    outcome.text += chunk.choices[0].delta.content
                    outcome.chunks += 1
                    outcome.first_token.set()
        outcome.kind = "completed"
    except openai.APIStatusError as err:
        outcome.kind = "status"
        outcome.status = err.status_code
        outcome.retry_after = err.response.headers.get("retry-after")
        outcome.message = str(err)
    except openai.APIError as err:
        outcome.kind = "error"
        outcome.message = str(err)
    except Exception as err:  # a connection cut is a failure the tests count, never hide
        outcome.kind = "broken"
        outcome.message = repr(err)
    finally:
        outcome.first_token.set()
        outcome.done.set()


def start_stream(server: Server, body: dict[str, Any], timeout: float = 300.0) -> tuple[Outcome, threading.Thread]:
    outcome = Outcome()
    thread = threading.Thread(target=stream, args=(server, body, outcome, timeout), daemon=True)
    thread.start()
    return outcome, thread


def answer(server: Server, prompt: str, max_tokens: int = 24, **extra: Any) -> str:
    """The greedy answer to ``prompt``, not streamed; fails the test on an error status."""
    status, _, body = server.post_json("/v1/chat/completions", chat(prompt, max_tokens, **extra))
    assert status == 200, body
    text: str = body["choices"][0]["message"]["content"]
    return text


def processes(server: Server, module: str) -> list[int]:
    """The server's processes started as ``python -m reame.<module>``."""
    return [pid for pid in server.children() if f" -m reame.{module} " in cmdline(pid) + " "]


def freeze(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def thaw(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class PeakRss:
    """Samples every process of a server in the background; ``peaks`` maps a role to its peak RSS (KiB)."""

    def __init__(self, server: Server, interval: float = 0.25) -> None:
        self.server = server
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        for pid in [self.server.proc.pid, *self.server.children()]:
            role = role_of(cmdline(pid))
            self.peaks[role] = max(self.peaks.get(role, 0), rss_kib(pid))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


def role_of(command: str) -> str:
    for name in ("worker", "dispatcher", "cachekeeper", "gateway", "supervisor"):
        if f"reame.{name}" in command:
            return name
    return "gunicorn" if "gunicorn" in command else "other"
