"""`reame status`: one screen for an operator, from the running processes themselves.

The dispatcher answers a StatusQuery with its workers (busy or idle, requests
served, the prompt each holds), its queue and its counters; the cachekeeper a
CacheAdmin STATS; the gateway's /metrics gives what the gateway counted since it
started (tokens reused from the cache, tokens saved by compression), read with
prometheus-client's own parser. A process that does not answer is named, and the
rest is still shown.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
from pathlib import Path
from typing import Final

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from reame.cachekeeper.admin import shared_line
from reame.gateway.http.auth import parse_key_file
from reame.gateway.upstream.client import Dispatcher
from reame.shared import protocol
from reame.shared.config import Config, ConfigError
from reame.shared.endpoints import EndpointError, link_keys

TIMEOUT_S: Final = 2.0
EXIT_UNAVAILABLE: Final = 1


@dataclasses.dataclass
class Snapshot:
    """What each process said (None: it did not answer)."""

    dispatcher: protocol.Status | None
    cache: protocol.CacheReport | None
    cache_enabled: bool
    metrics: dict[str, float] | None  # sample name (labels joined) -> value, summed over the model label


def gateway_metrics(config: Config, timeout: float = TIMEOUT_S) -> dict[str, float] | None:
    """Scrape the gateway's /metrics; sum each sample over the model label. None if it does not answer."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(config.server.host, config.server.host)
    key = _a_key(config)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    connection = http.client.HTTPConnection(host, config.server.port, timeout=timeout)
    try:
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            return None
        text = response.read().decode()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "model")
            name = f"{sample.name}{{{labels}}}" if labels else sample.name
            found[name] = found.get(name, 0.0) + sample.value
    return found


def _a_key(config: Config) -> str | None:
    """Return one configured API key (/metrics needs one when keys are set), None if there is none."""
    server = config.server
    if server.api_keys:
        return server.api_keys[0]
    if not server.api_key_file:
        return None
    try:
        found = parse_key_file(Path(server.api_key_file).read_text(encoding="utf-8"), server.api_key_file)
    except (OSError, UnicodeDecodeError, ConfigError):
        return None  # then the gateway's figures are reported as not answering
    return found[0] if found else None


def collect(config: Config) -> Snapshot:
    """Ask the dispatcher, the cachekeeper and the gateway; EndpointError if the link keys are unusable."""
    enabled = config.cache.enabled
    peers = (config.frontend_address, *([config.cache_address] if enabled else []))
    dispatcher = Dispatcher(config.frontend_address, keys=link_keys(config.security, connects=peers),
                            cache_address=config.cache_address if enabled else None)
    try:
        status = dispatcher.status(TIMEOUT_S)
        cache = dispatcher.cache.report(TIMEOUT_S) if enabled else None
    finally:
        dispatcher.close()
    return Snapshot(status, cache, enabled, gateway_metrics(config))


def _size(count: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def render(snap: Snapshot) -> str:
    """Format a snapshot as one screen of text."""
    lines: list[str] = []
    s = snap.dispatcher
    if s is None:
        lines.append("dispatcher: not answering")
    else:
        lines.append(f"workers: {s.workers} attached, {s.workers - s.idle_workers} busy, {s.idle_workers} idle")
        for w in s.worker_states:
            holds = f"holds {w.held_chars} chars (#{w.held_prefix})" if w.held_chars else "holds nothing"
            lines.append(f"  {w.name:<28} {'busy' if w.busy else 'idle':<5} served {w.served:<6} {holds}")
        lines.append(f"requests: {s.running} running, {s.queued} queued")
        lines.append(f"prefills: {s.full_prefills} full, {s.reused_from_memory} reused from memory, "
                     f"{s.reused_from_store} from the store, {s.affinity_waits} waited for a worker")
        lines.append(f"background warms: {s.warms_started} started, {s.warms_finished} finished, "
                     f"{s.warms_preempted} pre-empted")
    c = snap.cache
    if not snap.cache_enabled:
        lines.append("cache: disabled")
    elif c is None:
        lines.append("cache: not answering (workers serve without it)")
    else:
        lookups = c.hits + c.misses
        rate = f"{100 * c.hits / lookups:.0f}%" if lookups else "-"
        lines.append(f"cache: {c.entries} entries, {_size(c.bytes)} of {_size(c.max_bytes)}, "
                     f"hit rate {rate} ({c.hits}/{lookups}), {c.evictions} evicted, {c.corrupt} corrupt dropped")
        if c.shared is not None:
            lines.append(f"  {shared_line(c.shared)}")
    m = snap.metrics
    if m is None:
        lines.append("gateway: /metrics not answering")
    else:
        served = sum(v for k, v in m.items() if k.startswith("reame_requests_total{"))
        memory = m.get("reame_cached_prompt_tokens_total{source=memory}", 0.0)
        store = m.get("reame_cached_prompt_tokens_total{source=store}", 0.0)
        saved = sum(v for k, v in m.items() if k.startswith("reame_compression_saved_tokens_total"))
        prompt = m.get("reame_prompt_tokens_total", 0.0)
        lines.append(f"since the gateway started: {served:.0f} requests, {prompt:.0f} prompt tokens")
        lines.append(f"  tokens not read again thanks to the cache: {memory + store:.0f} "
                     f"({memory:.0f} from memory, {store:.0f} from the store)")
        lines.append(f"  tokens saved by compression: {saved:.0f}")
        chunks = {source: m.get(f"reame_chunks_total{{source={source}}}", 0.0)
                  for source in ("memory", "store", "read")}
        if any(chunks.values()):
            links = m.get("reame_chunk_link_tokens_total", 0.0)
            lines.append(f"  chunks: {chunks['memory']:.0f} in memory, {chunks['store']:.0f} from the store, "
                         f"{chunks['read']:.0f} read alone; {links:.0f} link tokens read in context")
    return "\n".join(lines) + "\n"


def run(config: Config, json_output: bool = False) -> int:
    """Print the status; exit 1 if the dispatcher does not answer."""
    try:
        snap = collect(config)
    except (EndpointError, ConfigError) as err:
        print(f"reame: {err}")
        return EXIT_UNAVAILABLE
    if json_output:
        print(json.dumps({
            "dispatcher": msgspec.to_builtins(snap.dispatcher), "cache": msgspec.to_builtins(snap.cache),
            "cache_enabled": snap.cache_enabled, "metrics": snap.metrics,
        }))
    else:
        print(render(snap), end="")
    return 0 if snap.dispatcher is not None else EXIT_UNAVAILABLE

