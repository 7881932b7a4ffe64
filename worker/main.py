"""Start a worker: ``python -m reame.worker [--config FILE] --index N``.

The main thread loads the model and runs the engine; the link thread talks to
the dispatcher. One worker per core, each with its own context; the weights are
memory-mapped, so they are shared through the page cache.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import Final

import zmq

from reame.shared.config import Config
from reame.shared.endpoints import PLAIN, EndpointError, LinkKeys, link_keys
from reame.shared.lifecycle import EXIT_BOOT_FAILURE, StopFlag, boot
from reame.shared.model_file import ModelFileError, model_alias, model_path
from reame.shared.protocol import Error, ErrorCode, Ready
from reame.worker.cache_client import CacheClient
from reame.worker.chunk_memory import ChunkMemory
from reame.worker.chunk_plan import LINK_TOKENS
from reame.worker.chunk_store import ChunkStore
from reame.worker.engine import Engine
from reame.worker.fingerprint import model_fingerprint, short
from reame.worker.link import Link
from reame.worker.model import DecodeError, Model, ModelError
from reame.worker.prefix_cache import PrefixCache
from reame.worker.speculative import setup as speculative

log = logging.getLogger("worker")

# How long the idle engine thread waits for a job before looking at the stop flag.
POLL_S: Final = 0.1
# At a graceful stop, how long queued saves (a reply's chunks) may still be sent: well
# inside the supervisor's grace (supervisor.arbiter.GRACE_S) and systemd's TimeoutStopSec.
SAVE_DRAIN_S: Final = 5.0
SHUTDOWN_MESSAGE: Final = "the worker is shutting down; retry the request"


def index_argument(parser: argparse.ArgumentParser) -> None:
    """Add the worker's own argument to the common ones."""
    parser.add_argument("--index", type=int, default=0, metavar="N", help="this worker's number (for its id)")


def memory_summary() -> str:
    """Describe this process's resident memory from /proc/self/status (Linux)."""
    fields = {}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    fields[key] = int(value.split()[0]) // 1024
    except (OSError, ValueError, IndexError):
        return "rss unknown"
    if len(fields) < 3:
        return "rss unknown"
    return f"rss {fields['VmRSS']} MiB ({fields['RssAnon']} MiB own, {fields['RssFile']} MiB shared file pages)"


def load_model(config: Config) -> Model:
    """Load the configured model; raise ModelFileError or ModelError with a clear message."""
    path = model_path(config)
    memory = config.memory
    return Model(
        path, config.model.n_ctx, config.model.n_batch, config.workers.threads, memory.kv_type,
        use_mmap=memory.use_mmap, use_mlock=memory.use_mlock, repack=memory.repack,
    )


def open_cache(
    config: Config, context: zmq.Context[zmq.Socket[bytes]], model: Model, fingerprint: bytes, keys: LinkKeys = PLAIN
) -> tuple[CacheClient, PrefixCache]:
    """Connect to the cachekeeper (nothing is sent before the first lookup or save)."""
    client = CacheClient(context, config.cache_address, fingerprint, model.kv_type, config.cache.timeout, keys=keys)
    cache = PrefixCache(
        client, fingerprint, model.kv_type, model.n_ctx, config.cache.block_tokens, config.cache.min_tokens
    )
    return client, cache


def serve(engine: Engine, link: Link, stop: StopFlag) -> int:
    """Run requests until the stop flag is set; return the exit code."""
    while not stop.is_set:
        if not link.alive:
            log.error("the link to the dispatcher is down; exiting")
            return 1
        job = link.next_job(POLL_S)
        if job is not None:
            engine.run(job.request, link.send, job.cancel)
    # Accepted but never started: tell the dispatcher rather than let them time out.
    for job in link.drain_jobs():
        link.send(Error(job.request.request_id, ErrorCode.SHUTTING_DOWN, SHUTDOWN_MESSAGE))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run a worker until SIGTERM/SIGINT; return the process exit code."""
    booted = boot(
        "worker", "Serve completions from one llama.cpp context, fed by the dispatcher.", argv, index_argument
    )
    if booted is None:
        return EXIT_BOOT_FAILURE
    args, config = booted
    stop = StopFlag()
    stop.install()
    peers = (config.backend_address, *([config.cache_address] if config.cache.enabled else []))
    try:
        keys = link_keys(config.security, connects=peers)
    except EndpointError as err:
        log.error("cannot start: %s", err)
        return EXIT_BOOT_FAILURE

    started = time.perf_counter()
    try:
        model = load_model(config)
    except (ModelFileError, ModelError) as err:
        log.error("cannot load the model: %s", err)
        return EXIT_BOOT_FAILURE
    try:
        fingerprint = model_fingerprint(model.path, model.kv_type, model.flash_attn)
    except OSError as err:
        log.error("cannot read the model file %s: %s", model.path, err)
        model.close()
        return EXIT_BOOT_FAILURE
    try:
        speculation = speculative.from_config(config, model, fingerprint)
    except ModelError as err:
        log.error("cannot load the draft model: %s", err)
        model.close()
        return EXIT_BOOT_FAILURE
    draft = speculation.draft
    try:
        draft_fingerprint = b"" if draft is None else model_fingerprint(draft.path, draft.kv_type, draft.flash_attn)
    except OSError as err:
        log.error("cannot read the draft model file %s: %s", draft.path if draft else "", err)
        speculation.close()
        model.close()
        return EXIT_BOOT_FAILURE
    engine = Engine(
        model, shutting_down=lambda: stop.is_set, speculation=speculation,
        special_in_prompt=config.model.special_tokens_in_prompt,
    )
    try:
        engine.warm_up()
    except DecodeError as err:
        log.error("cannot run the model: %s", err)
        speculation.close()
        model.close()
        return EXIT_BOOT_FAILURE
    load_s = time.perf_counter() - started
    log.info(
        "loaded %s in %.2f s: n_ctx %d, n_batch %d, %d thread(s), KV %s, fingerprint %s, %s",
        model.path, load_s, model.n_ctx, model.n_batch, config.workers.threads, model.kv_type, short(fingerprint),
        memory_summary(),
    )

    pid = os.getpid()
    hello = Ready(
        worker_id=f"w{args.index}-{pid}", pid=pid, model=model_alias(config), n_ctx=model.n_ctx,
        threads=config.workers.threads, host=socket.gethostname(),
        # The gateway keys its answer cache by both (gateway.upstream.answers).
        fingerprint=fingerprint, draft_fingerprint=draft_fingerprint,
    )
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    link = Link(context, config.backend_address, hello, on_threads=model.use_threads, keys=keys)
    cache: CacheClient | None = None
    code = 1
    try:
        if config.cache.enabled:
            cache, engine.cache = open_cache(config, context, model, fingerprint, keys)
            engine.chunk_store = ChunkStore(
                cache, fingerprint, model.kv_type, model.n_ctx, config.cache.block_tokens, LINK_TOKENS,
                ChunkMemory(config.cache.chunk_memory),
            )
        link.start()
        log.info(
            "worker %s serving for %s; persistent KV cache %s", hello.worker_id, config.backend_address,
            config.cache_address if cache is not None else "off",
        )
        code = serve(engine, link, stop)
    finally:
        link.close()
        if cache is not None:
            cache.close(drain=SAVE_DRAIN_S)
        context.term()
        speculation.close()
        model.close()
    log.info("stopped")
    return code
