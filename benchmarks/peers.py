"""The servers reame is measured against (`reame bench --peer`), and one way to run either.

Two peers, each run as a user who read its README would run it on one small box:
llama.cpp's own `llama-server` (benchmarks.llama_server: one slot, its prompt cache in RAM,
`--cache-reuse`) and llama-cpp-python's OpenAI server (benchmarks.common.Peer: its prompt
cache on, logits for the last token only). By default every peer found here runs; one
asked for by name and not found is an error, not a silently shorter report.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import openai

from reame.benchmarks import llama_server
from reame.benchmarks.common import PEER_CACHE_FLAGS, Peer, Setup

LLAMA_SERVER: Final = "llama-server"
LLAMA_CPP_PYTHON: Final = "llama-cpp-python"
PEERS: Final = (LLAMA_SERVER, LLAMA_CPP_PYTHON)
CHOICES: Final = ("both", *PEERS)
# llama-server's prompt-lookup decoding: drafts from the prompt's own n-grams, as reame's `lookup`.
LLAMA_SERVER_LOOKUP: Final = ("--spec-type", "ngram-simple")
LLAMA_CPP_PYTHON_LOOKUP: Final = ("--draft_model", "prompt-lookup-decoding")
NOT_BUILT: Final = ("llama-server not found: build it with `make peer` (15-25 min on 2 cores), "
                    "or pass --llama-server PATH")
NOT_INSTALLED: Final = "llama-cpp-python's server is not installed: `pip install 'reame[bench]'`"


class PeerError(Exception):
    """A peer was asked for by name and is not here."""


def llama_cpp_python_installed() -> bool:
    return importlib.util.find_spec("llama_cpp.server") is not None


def choose(choice: str | None, binary: Path | None, installed: bool) -> tuple[str, ...]:
    """Return the peers to run for ``--peer choice`` (None: every one found), in PEERS' order.

    ``binary`` is the llama-server found (None: none), ``installed`` whether llama-cpp-python's
    server is; a peer named (alone or by "both") that is missing raises PeerError.
    """
    here = {LLAMA_SERVER: binary is not None, LLAMA_CPP_PYTHON: installed}
    if choice is None:
        return tuple(peer for peer in PEERS if here[peer])
    if choice not in CHOICES:
        raise PeerError(f"no peer {choice!r}; choose from {', '.join(CHOICES)}")
    wanted = PEERS if choice == "both" else (choice,)
    missing = [NOT_BUILT if peer == LLAMA_SERVER else NOT_INSTALLED for peer in wanted if not here[peer]]
    if missing:
        raise PeerError("; ".join(missing))
    return wanted


def describe(peer: str, threads: int, *, slots: int = 1, lookup: bool = False, cache: bool = True) -> str:
    """The peer's command line as run, for the report's *How:* line."""
    if peer == LLAMA_SERVER:
        return f"llama-server {llama_server.flags(threads, slots)}" + (
            f" {' '.join(LLAMA_SERVER_LOOKUP)}" if lookup else "")
    words = [f"llama_cpp.server --n_threads {threads}", *(["--cache true"] if cache else []),
             *([" ".join(LLAMA_CPP_PYTHON_LOOKUP)] if lookup else [])]
    return " ".join(words)


def missing_lines(setup: Setup, peers: Sequence[str] = PEERS) -> list[str]:
    """A report line for each of ``peers`` not run, saying why (a shorter table is never read as the whole)."""
    found = {LLAMA_SERVER: setup.llama_server is not None, LLAMA_CPP_PYTHON: llama_cpp_python_installed()}
    missing = {LLAMA_SERVER: NOT_BUILT, LLAMA_CPP_PYTHON: NOT_INSTALLED}
    return [f"{peer} not run (--peer {', '.join(setup.peers)}): no ratio to it" if found[peer]
            else f"{missing[peer]}: no ratio to it" for peer in peers if peer not in setup.peers]


@contextmanager
def serving(setup: Setup, peer: str, tag: str, *, threads: int | None = None, n_ctx: int | None = None,
            slots: int = 1, lookup: bool = False, cache: bool = True) -> Iterator[openai.OpenAI]:
    """Start ``peer`` on the run's model, yield a client once a first request has loaded what requests share.

    ``cache`` False turns llama-cpp-python's prompt cache off (llama-server's stays: it is
    not a switch there but a request field, and decode speed does not depend on it).
    """
    threads = threads or setup.threads
    n_ctx = n_ctx or setup.n_ctx
    log = setup.tmp / f"{tag}-{peer}.log"
    if peer == LLAMA_SERVER:
        if setup.llama_server is None:
            raise PeerError(NOT_BUILT)
        with llama_server.running(setup.llama_server, setup.model, threads, n_ctx, log, slots=slots,
                                  extra=LLAMA_SERVER_LOOKUP if lookup else ()) as client:
            yield client
        return
    extra = PEER_CACHE_FLAGS if cache else ()
    python = Peer(setup.model, threads, n_ctx, log, extra=(*extra, *(LLAMA_CPP_PYTHON_LOOKUP if lookup else ())))
    python.launch()
    try:
        python.wait()
        client = python.client()
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hello."}], max_tokens=1)
        yield client
    finally:
        python.stop()
