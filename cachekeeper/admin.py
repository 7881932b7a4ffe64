"""`reame cache stats|verify|purge`: ask the running cachekeeper, else open the store directly.

The cachekeeper owns the cache directory (it holds its lock), so while it runs
every command goes to it as a CacheAdmin message. When nothing answers, the
command opens the store itself; its lock then tells "no cachekeeper" from "a
cachekeeper that owns the directory but does not answer".
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import sqlite3
import sys
from typing import Any, Final, TextIO

import msgspec

from reame.cachekeeper.answers import SUBDIR as ANSWERS_SUBDIR
from reame.cachekeeper.answers import AnswerStore
from reame.cachekeeper.store import Store, StoreLocked
from reame.shared import endpoints
from reame.shared import protocol as p
from reame.shared.config import Config
from reame.shared.upstream import Upstream, reply

# A running cachekeeper answers stats within milliseconds; this only bounds the
# wait when nothing listens at a tcp:// address (ipc:// without a socket file is
# known at once).
PROBE_TIMEOUT_S: Final = 2.0
DEFAULT_TIMEOUT_S: Final = {p.CacheCommand.STATS: 5.0, p.CacheCommand.PURGE: 60.0, p.CacheCommand.VERIFY: 3600.0}
MB: Final = 1e6


class AdminError(Exception):
    """The command could not be carried out; the message says why."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A report, where it came from, and the reason for each bad entry when known."""

    report: p.CacheReport
    source: str  # "cachekeeper" or "offline"
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)


def ask(
    address: str, command: p.CacheCommand, timeout: float, probe_timeout: float = PROBE_TIMEOUT_S,
    keys: endpoints.LinkKeys = endpoints.PLAIN,
) -> p.CacheReport | None:
    """Run ``command`` on the cachekeeper at ``address``; None if no cachekeeper answers there."""
    upstream = Upstream(keys=keys)
    try:
        # Stats first, briefly: the real command (a verify) may legitimately take long.
        # skip_absent: an ipc:// address without its socket file has no cachekeeper.
        probe_id = f"cli-{secrets.token_hex(4)}"
        report = upstream.ask(address, p.CacheAdmin(probe_id, p.CacheCommand.STATS),
                              reply(p.CacheReport, probe_id), min(probe_timeout, timeout), skip_absent=True)
        if report is None or command is p.CacheCommand.STATS:
            return report
        request_id = f"cli-{secrets.token_hex(4)}"
        report = upstream.ask(address, p.CacheAdmin(request_id, command), reply(p.CacheReport, request_id), timeout)
        if report is None:
            raise AdminError(f"the cachekeeper at {address} did not finish {command} within {timeout:.0f} s")
        return report
    finally:
        upstream.close()


def offline(config: Config, command: p.CacheCommand) -> Outcome:
    """Run ``command`` on the cache directory itself; AdminError if it is owned or unusable."""
    directory = config.cache_dir
    if not directory.exists():  # never used: nothing to report, nothing to create
        return Outcome(p.CacheReport("", 0, 0, config.cache.max_size, 0, 0, 0, 0, 0, 0), "offline")
    try:
        store = Store(directory, config.cache.max_size, config.cache.min_free)
    except StoreLocked as err:
        raise AdminError(
            f"a cachekeeper owns {directory} but does not answer at {config.cache_address}"
        ) from err
    except (OSError, sqlite3.Error, ValueError) as err:
        raise AdminError(f"cannot open the cache directory {directory}: {err}") from err
    with store:
        reasons: dict[str, str] = {}
        if command is p.CacheCommand.VERIFY:
            reasons = {bad.key: bad.reason for bad in store.verify()}
        elif command is p.CacheCommand.PURGE:
            reasons = dict.fromkeys(store.keys(), "purged")
            store.purge()
            if (directory / ANSWERS_SUBDIR).is_dir():  # the answer cache goes too, as the cachekeeper's purge does
                AnswerStore(directory / ANSWERS_SUBDIR, config.cache.answers_max_size).purge()
        s = store.stats()
        report = p.CacheReport("", s.entries, s.bytes, s.max_bytes, s.hits, s.misses, s.evictions, s.corrupt,
                               0, 0, list(reasons))
    return Outcome(report, "offline", reasons if command is p.CacheCommand.VERIFY else {})


def _entries(count: int) -> str:
    return f"{count} entry" if count == 1 else f"{count} entries"


def hit_rate(report: p.CacheReport) -> float | None:
    """Return hits per lookup in percent, None before the first lookup."""
    lookups = report.hits + report.misses
    return None if lookups == 0 else 100.0 * report.hits / lookups


def as_json(outcome: Outcome, command: p.CacheCommand, config: Config) -> dict[str, Any]:
    """Return the outcome as one JSON-ready object."""
    fields = msgspec.to_builtins(outcome.report)  # nested structs (the shared tier's) too
    del fields["request_id"]
    return {
        "command": command.value, "source": outcome.source, "directory": str(config.cache_dir),
        **fields, "hit_rate": hit_rate(outcome.report), "reasons": outcome.reasons,
    }


def render(outcome: Outcome, command: p.CacheCommand, config: Config) -> str:
    """Return the outcome as lines for a person."""
    r = outcome.report
    where = (f"the cachekeeper at {config.cache_address}" if outcome.source == "cachekeeper"
             else "read directly: no cachekeeper is running, so the counters start at zero")
    rate = hit_rate(r)
    lines = [
        f"cache directory: {config.cache_dir} ({where})",
        f"entries: {r.entries}",
        f"size: {r.bytes / MB:.1f} MB of {r.max_bytes / MB:.1f} MB",
        f"hits: {r.hits}, misses: {r.misses}, hit rate: " + ("-" if rate is None else f"{rate:.1f} %"),
        f"evictions: {r.evictions}, corrupt: {r.corrupt}, lookups that waited for a save: {r.lookup_waits}",
        f"read: {r.bytes_read / MB:.1f} MB, written: {r.bytes_written / MB:.1f} MB",
        f"answers: {r.answer_entries} ({r.answer_bytes / MB:.1f} MB), hits: {r.answer_hits}, "
        f"misses: {r.answer_misses}",
    ]
    if r.shared is not None:
        lines.append(shared_line(r.shared))
    if command is p.CacheCommand.VERIFY:
        if r.removed:
            lines.append(f"verify: deleted {_entries(len(r.removed))} that failed the check:")
            lines += [f"  {key}: {outcome.reasons.get(key, 'see the cachekeeper log')}" for key in r.removed]
        else:
            lines.append(f"verify: all {_entries(r.entries)} intact")
    elif command is p.CacheCommand.PURGE:
        lines.append(f"purge: removed {_entries(len(r.removed))}")
    return "\n".join(lines) + "\n"


def shared_line(s: p.SharedTierReport) -> str:
    """Return the shared tier's counters as one line (`reame cache stats`, `reame status`)."""
    return (
        f"shared tier: {'up' if s.up else 'DOWN'}, hits: {s.hits}, misses: {s.misses}, "
        f"fetched: {s.bytes_fetched / MB:.1f} MB in {s.fetch_seconds:.2f} s, pushes: {s.pushes} "
        f"({s.bytes_pushed / MB:.1f} MB, {s.push_drops} dropped), errors: {s.errors}, corrupt: {s.corrupt}"
    )


def run(config: Config, command: p.CacheCommand, *, json_output: bool, timeout: float | None,
        out: TextIO | None = None) -> int:
    """Carry out one `reame cache` command and print its outcome; return the exit code."""
    out = out or sys.stdout
    wait = DEFAULT_TIMEOUT_S[command] if timeout is None else timeout
    try:
        keys = endpoints.link_keys(config.security, connects=(config.cache_address,))
    except endpoints.EndpointError as err:
        print(f"reame: {err}", file=sys.stderr)
        return 1
    try:
        report = ask(config.cache_address, command, wait, keys=keys)
        outcome = offline(config, command) if report is None else Outcome(report, "cachekeeper")
    except AdminError as err:
        print(f"reame: {err}", file=sys.stderr)
        return 1
    if json_output:
        out.write(json.dumps(as_json(outcome, command, config)) + "\n")
    else:
        out.write(render(outcome, command, config))
    return 1 if command is p.CacheCommand.VERIFY and outcome.report.removed else 0
