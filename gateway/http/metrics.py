"""GET /metrics: Prometheus figures of the gateway, the dispatcher, the workers and the cachekeeper.

Where each figure is counted, and why there:

- Everything about a request is counted in the gateway process that served it,
  when its log line is written (``RequestLog.on_end``): status, latencies and token
  counts, which every worker already reports in its ``Done`` (cached tokens from
  memory and from the store, speculative tokens, the time the dispatcher kept the
  request queued). The gunicorn processes share these through prometheus-client's
  multiprocess mode (one mmap file per process in a directory the gateway's master
  empties at start), so any process's scrape counts all of them. Workers need no
  channel of their own: their per-request figures already travel in ``Done``.
- What the dispatcher and the cachekeeper count since they started (full prefills,
  prefix reuse, queue and worker gauges; entries, hits, evictions...) is asked at
  scrape time, by a custom collector, with one StatusQuery and one CacheAdmin STATS
  under :data:`PEER_TIMEOUT_S` each: one process owns each of those numbers, so
  there is nothing to add up and nothing to keep in step. A peer that does not
  answer is reported by ``reame_dispatcher_up`` / ``reame_cache_up`` = 0 and its
  figures are left out of that scrape.

Names follow vLLM's and llama-server's (``reame_`` prefix, ``_total``, ``_seconds``,
``_bytes``, a ``model`` label).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import falcon
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from reame.gateway.http.requestlog import RequestLog
from reame.gateway.upstream.client import Dispatcher
from reame.shared import protocol as p

MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
# A scrape waits at most this long for each of the dispatcher and the cachekeeper.
PEER_TIMEOUT_S: Final = 0.25
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
# Paths named in the endpoint label; anything else is "other", so a client cannot
# grow the label set by asking for made-up paths.
ENDPOINTS: Final = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/cache/warm", "/v1/models", "/health", "/ready", "/metrics",
})
# A CPU prefill of a long document takes minutes: the buckets reach 10 minutes.
LATENCY_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)
TOKEN_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)


def use_multiprocess(directory: Path) -> None:
    """Share the metrics of this process's forked children through files in ``directory``.

    Call it in gunicorn's master before it forks: the directory is emptied (counters
    start at zero with the gateway, as Prometheus expects of a restart), and
    metrics created afterwards write to per-process files there.
    """
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(mode=0o700, parents=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    # prometheus-client picks its value class when first imported, from the same
    # variable; it was imported before the configuration was read.
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]


def multiprocess_dir() -> Path | None:
    """The directory set by :func:`use_multiprocess`, None in a single process."""
    directory = os.environ.get(MULTIPROC_ENV)
    return Path(directory) if directory and values.ValueClass is not values.MutexValue else None


def endpoint(path: str) -> str:
    """The endpoint label for ``path``."""
    if path in ENDPOINTS:
        return path
    return "/v1/models/{id}" if path.startswith("/v1/models/") else "other"


class Metrics:
    """The gateway's metrics, the collector of its peers' figures, and the /metrics resource."""

    def __init__(self, model: str, dispatcher: Dispatcher) -> None:
        self.model = model
        shared = multiprocess_dir()
        own: CollectorRegistry | None = None  # where this process's metrics register
        if shared is not None:
            # The scrape reads every process's files, not this process's objects.
            scrape = CollectorRegistry()
            MultiProcessCollector(scrape, path=str(shared))  # type: ignore[no-untyped-call]
        else:
            own = scrape = CollectorRegistry()
        scrape.register(PeerCollector(model, dispatcher))
        self.scrape_registry = scrape
        m = ("model",)
        self.requests = Counter("reame_requests", "HTTP requests by endpoint and status.",
                                ("model", "endpoint", "status"), registry=own)
        self.ttft = Histogram("reame_time_to_first_token_seconds", "Time from arrival to the first token.",
                              m, buckets=LATENCY_BUCKETS, registry=own)
        self.request_seconds = Histogram("reame_request_seconds", "Time from arrival to the last byte.",
                                         ("model", "endpoint"), buckets=LATENCY_BUCKETS, registry=own)
        self.tpot = Histogram("reame_time_per_output_token_seconds", "Time per output token after the first.",
                              m, buckets=TOKEN_BUCKETS, registry=own)
        self.queue_wait = Histogram("reame_queue_wait_seconds", "Time a request waited for a worker.",
                                    m, buckets=LATENCY_BUCKETS, registry=own)
        self.prompt_tokens = Counter("reame_prompt_tokens", "Prompt tokens the model read or reused.",
                                     m, registry=own)
        self.completion_tokens = Counter("reame_completion_tokens", "Tokens generated.", m, registry=own)
        self.cached_tokens = Counter("reame_cached_prompt_tokens", "Prompt tokens reused, not computed, by source.",
                                     ("model", "source"), registry=own)
        self.saved_tokens = Counter("reame_compression_saved_tokens", "Prompt tokens removed by compression.",
                                    ("model", "mode"), registry=own)
        self.draft_tokens = Counter("reame_speculative_draft_tokens", "Speculative tokens proposed.",
                                    m, registry=own)
        self.accepted_tokens = Counter("reame_speculative_accepted_tokens", "Speculative tokens accepted.",
                                       m, registry=own)
        self.chunks = Counter("reame_chunks", "Chunks of prompts read in chunk mode, by source: memory, store "
                              "or read (alone, then stored).", ("model", "source"), registry=own)
        self.link_tokens = Counter("reame_chunk_link_tokens", "Tokens read in context at the start of chunks.",
                                   m, registry=own)

    def observe(self, record: RequestLog, status: int) -> None:
        """Count one finished request (the request log's ``on_end``)."""
        model, path = self.model, endpoint(record.path)
        self.requests.labels(model, path, str(status)).inc()
        self.request_seconds.labels(model, path).observe(record.total)
        if record.compress_mode is None:
            return  # it never reached the dispatcher: no tokens, no generation
        u = record.usage
        if record.ttft is not None:
            self.ttft.labels(model).observe(record.ttft)
        if u.completion_tokens > 1 and record.generation_ms > 0:
            self.tpot.labels(model).observe(record.generation_ms / 1000 / (u.completion_tokens - 1))
        if u.prompt_tokens:
            self.queue_wait.labels(model).observe(record.queue_ms / 1000)
        self.prompt_tokens.labels(model).inc(u.prompt_tokens)
        self.completion_tokens.labels(model).inc(u.completion_tokens)
        self.cached_tokens.labels(model, "store").inc(record.restored_tokens)
        self.cached_tokens.labels(model, "memory").inc(u.cached_tokens - record.restored_tokens)
        self.saved_tokens.labels(model, record.compress_mode).inc(record.saved_tokens)
        self.draft_tokens.labels(model).inc(u.draft_tokens)
        self.accepted_tokens.labels(model).inc(u.accepted_draft_tokens)
        if u.chunks_in_memory + u.chunks_from_store + u.chunks_read:
            self.chunks.labels(model, "memory").inc(u.chunks_in_memory)
            self.chunks.labels(model, "store").inc(u.chunks_from_store)
            self.chunks.labels(model, "read").inc(u.chunks_read)
            self.link_tokens.labels(model).inc(u.link_tokens)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """GET /metrics, in the Prometheus text format."""
        resp.content_type = CONTENT_TYPE
        resp.data = generate_latest(self.scrape_registry)

    on_head = on_get


class PeerCollector(Collector):
    """Ask the dispatcher and the cachekeeper for their figures at each scrape."""

    def __init__(self, model: str, dispatcher: Dispatcher) -> None:
        self.model = model
        self.dispatcher = dispatcher

    def collect(self) -> Iterator[Metric]:
        # Both peers are asked at once: on a loaded machine each answer waits for a busy
        # loop to come round, and a scrape should not wait for the two in turn.
        reports: list[p.CacheReport | None] = []
        asking = None
        if self.dispatcher.cache.address is not None:
            asking = threading.Thread(
                target=lambda: reports.append(self.dispatcher.cache.report(PEER_TIMEOUT_S)), daemon=True
            )
            asking.start()
        yield from self._dispatcher()
        if asking is not None:
            asking.join()
            yield from self._cache(reports[0] if reports else None)

    def _gauge(self, name: str, help_text: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, help_text, labels=["model"])
        family.add_metric([self.model], value)
        return family

    def _counter(self, name: str, help_text: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, help_text, labels=["model"])
        family.add_metric([self.model], value)
        return family

    def _dispatcher(self) -> Iterator[Metric]:
        status = self.dispatcher.status(PEER_TIMEOUT_S)
        yield self._gauge("reame_dispatcher_up", "1 if the dispatcher answered this scrape.", float(status is not None))
        if status is None:
            return
        yield self._gauge("reame_requests_waiting", "Requests queued for a worker.", status.queued)
        yield self._gauge("reame_requests_running", "Requests a worker is serving.", status.running)
        yield self._gauge("reame_workers", "Workers attached to the dispatcher.", status.workers)
        yield self._gauge("reame_workers_busy", "Workers serving a request.", status.workers - status.idle_workers)
        yield self._counter("reame_full_prefills", "Requests that reused nothing of their prompt.",
                            status.full_prefills)
        reuse = CounterMetricFamily("reame_prefix_reuse", "Requests that reused part of their prompt, by source.",
                                    labels=["model", "source"])
        reuse.add_metric([self.model, "memory"], status.reused_from_memory)
        reuse.add_metric([self.model, "store"], status.reused_from_store)
        yield reuse
        yield self._counter("reame_affinity_waits", "Requests that waited for the worker holding their text.",
                            status.affinity_waits)
        warms = CounterMetricFamily(
            "reame_background_warms", "Background reads of documents (gateway.api.plan), by what became of them.",
            labels=["model", "event"],
        )
        warms.add_metric([self.model, "started"], status.warms_started)
        warms.add_metric([self.model, "finished"], status.warms_finished)
        warms.add_metric([self.model, "preempted"], status.warms_preempted)
        yield warms

    def _cache(self, report: p.CacheReport | None) -> Iterator[Metric]:
        yield self._gauge("reame_cache_up", "1 if the cachekeeper answered this scrape.", float(report is not None))
        if report is None:
            return
        yield self._gauge("reame_cache_entries", "Entries in the KV cache store.", report.entries)
        yield self._gauge("reame_cache_bytes", "Bytes of the stored entries.", report.bytes)
        yield self._gauge("reame_cache_max_bytes", "cache.max_size.", report.max_bytes)
        yield self._counter("reame_cache_hits", "Lookups that found a stored prefix.", report.hits)
        yield self._counter("reame_cache_misses", "Lookups that found none.", report.misses)
        yield self._counter("reame_cache_evictions", "Entries evicted to stay under the cap.", report.evictions)
        yield self._counter("reame_cache_corrupt_entries", "Corrupt entries found and dropped.", report.corrupt)
        yield self._counter("reame_cache_read_bytes", "Bytes read from the store.", report.bytes_read)
        yield self._counter("reame_cache_written_bytes", "Bytes written to the store.", report.bytes_written)
        yield self._counter("reame_cache_save_seconds", "Time spent compressing and writing entries.",
                            report.save_seconds)
        yield self._counter("reame_cache_restore_seconds", "Time from each hit to its entry's last chunk sent.",
                            report.restore_seconds)
        yield self._gauge("reame_answer_cache_entries", "Answers in the answer cache.", report.answer_entries)
        yield self._gauge("reame_answer_cache_bytes", "Bytes of the stored answers.", report.answer_bytes)
        yield self._counter("reame_answer_cache_hits", "Requests answered from the answer cache.", report.answer_hits)
        yield self._counter("reame_answer_cache_misses", "Answer lookups that found none.", report.answer_misses)
        tier = report.shared
        if tier is None:  # cache.shared_url is empty
            return
        yield self._gauge("reame_cache_shared_up", "1 if the shared cache tier answered its last request.",
                          float(tier.up))
        for name, help_text, value in (
            ("hits", "Lookups answered deeper with an entry fetched from the shared tier.", tier.hits),
            ("misses", "Lookups the shared tier held nothing deeper (or intact) for.", tier.misses),
            ("pushes", "Entries stored here and pushed to the shared tier.", tier.pushes),
            ("push_drops", "Entries not pushed: the queue was full or the tier down.", tier.push_drops),
            ("fetched_bytes", "Entry bytes fetched from the shared tier.", tier.bytes_fetched),
            ("pushed_bytes", "Entry bytes pushed to the shared tier.", tier.bytes_pushed),
            ("fetch_seconds", "Time spent reading the tier's index and fetching entries.", tier.fetch_seconds),
            ("errors", "Requests to the shared tier that failed (one shared_timeout each).", tier.errors),
            ("corrupt_entries", "Entries from the shared tier refused by their checks.", tier.corrupt),
        ):
            yield self._counter(f"reame_cache_shared_{name}", help_text, value)
