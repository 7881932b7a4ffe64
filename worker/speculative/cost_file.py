"""Keep the measured step costs in a small file beside the KV cache, so that every worker drafts alike.

The costs decide which draft lengths a worker tries (worker.speculative.adaptive), and
the draft length decides how tokens are batched, which at a near tie decides a greedy
token (llama.cpp computes batches of different sizes with different kernels). Measured
afresh by each worker, they vary with the load of the moment, so the same greedy
request could get another answer from another worker or after a restart. So they are
measured once per model, build, machine and configuration, and every worker reads the
same file: ``speculative-costs-<key hash>.json`` in the cache directory (or the run
directory when the cache is off or its directory unusable). Deleting it re-measures.

The first worker to measure publishes its file with ``os.link`` (which refuses to
replace a name), so of two workers starting together exactly one wins, and both read
back the winner's costs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from reame.shared.config import Config
from reame.worker.speculative.adaptive import StepCosts

log = logging.getLogger(__name__)

FORMAT: Final = 1
PREFIX: Final = "speculative-costs-"
# Not a dotfile ending in .tmp: the cachekeeper deletes those at start-up.
PARTIAL: Final = ".partial"


@dataclasses.dataclass(frozen=True)
class CostKey:
    """Everything the measured costs depend on; another value anywhere means measuring again."""

    model: str  # worker.fingerprint of the target model (content, KV layout, llama-cpp-python version)
    draft_model: str  # the draft model's fingerprint, "" without one
    threads: int
    n_batch: int
    draft_min: int
    draft_max: int
    llama_cpp: str
    cpu: str
    repack: bool  # memory.repack as loaded (Model.repack): repacked weights have other batch kernels

    def file_name(self) -> str:
        digest = hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()
        return f"{PREFIX}{digest[:16]}.json"


def cpu_model(cpuinfo: str, machine: str = "") -> str:
    """Return the CPU's model from the text of /proc/cpuinfo (x86 "model name", else ARM's fields)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() not in fields:
            fields[name.strip()] = value.strip()
    if fields.get("model name"):
        return fields["model name"]
    arm = [f"{name} {fields[name]}" for name in ("Hardware", "CPU implementer", "CPU part") if fields.get(name)]
    return ", ".join(arm) or machine or "unknown"


def this_cpu() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    return cpu_model(text, platform.machine())


def encode(key: CostKey, costs: StepCosts) -> bytes:
    """Return the file's bytes: the key it was measured under and the costs."""
    body = {
        "format": FORMAT,
        "key": dataclasses.asdict(key),
        "points": [[size, cost] for size, cost in costs.points],
        "draft": costs.draft,
    }
    return (json.dumps(body, indent=1) + "\n").encode()


def decode(data: bytes, key: CostKey) -> StepCosts | None:
    """Return the costs in ``data`` if they were measured under ``key``; None if not, or if malformed."""
    try:
        body: Any = json.loads(data)
        if body["format"] != FORMAT or body["key"] != dataclasses.asdict(key):
            return None
        points = tuple((int(size), float(cost)) for size, cost in body["points"])
        draft = float(body["draft"])
    except (ValueError, TypeError, KeyError):
        return None
    sizes = [size for size, _ in points]
    if not points or sizes[0] != 1 or sizes != sorted(set(sizes)) or any(cost <= 0 for _, cost in points):
        return None
    if draft < 0:
        return None
    return StepCosts(points, draft)


def read(path: Path, key: CostKey) -> StepCosts | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        log.warning("cannot read the kept speculative costs %s: %s", path, err)
        return None
    costs = decode(data, key)
    if costs is None:
        log.warning("the kept speculative costs %s are not for this model and configuration", path)
    return costs


def publish(path: Path, data: bytes, replace: bool = False) -> None:
    """Write ``data`` as ``path`` unless it exists (unless ``replace``), never leaving a partial file there."""
    temp = path.with_name(f"{path.name}.{os.getpid()}{PARTIAL}")
    try:
        with open(temp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if replace:
            os.replace(temp, path)
        else:
            os.link(temp, path)
    except FileExistsError:
        pass  # another worker measured first: its costs win
    except OSError as err:
        log.warning("cannot keep the speculative costs in %s: %s", path, err)
    finally:
        temp.unlink(missing_ok=True)


def load_or_measure(directory: Path | None, key: CostKey, measure: Callable[[], StepCosts]) -> StepCosts:
    """Return the costs kept in ``directory`` for ``key``, measuring and keeping them first if there are none."""
    if directory is None:
        return measure()
    path = directory / key.file_name()
    kept = read(path, key)
    if kept is not None:
        log.info("speculative step costs from %s (delete it to measure again)", path)
        return kept
    damaged = path.exists()
    measured = measure()
    publish(path, encode(key, measured), replace=damaged)
    winner = read(path, key)
    if winner is None:
        log.warning("speculative step costs measured by this worker only: greedy output may differ between workers")
        return measured
    log.info("speculative step costs kept in %s (delete it to measure again)", path)
    return winner


def directory(config: Config) -> Path | None:
    """Return where the costs are kept: the cache directory, else the run directory; None if neither is usable."""
    places = [config.cache_dir] if config.cache.enabled else []
    if not places:
        log.info("the KV cache is off: keeping the speculative costs in the run directory %s", config.run_dir)
    places.append(config.run_dir)
    for place in places:
        try:
            place.mkdir(mode=0o700, parents=True, exist_ok=True)
            if os.access(place, os.W_OK | os.X_OK):
                if place != places[0]:
                    log.warning("keeping the speculative costs in the run directory %s instead", place)
                return place
        except OSError as err:
            log.warning("cannot keep the speculative costs in %s: %s", place, err)
    log.warning("nowhere to keep the speculative costs: each worker measures its own")
    return None
