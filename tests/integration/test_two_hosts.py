"""Two hosts on this machine: a worker in another network namespace attaches over CURVE tcp://.

Layout. The test makes two network namespaces, host A and host B, joined by a veth pair
created directly inside them (never in the root namespace): ``10.77.0.1/24`` in A,
``10.77.0.2/24`` in B, and ``lo`` up in each. ``reame serve`` runs in A as the harness
starts it (gateway, dispatcher, cachekeeper and one local worker): the test's thread
enters A (``setns``) around ``start_server``, so the supervisor and all its children are
born in A, and around every HTTP request, so the test talks to the gateway on A's own
loopback. The dispatcher's backend and the cachekeeper listen on ``tcp://10.77.0.1`` with
CURVE keys; the gateway reaches the dispatcher over ipc:// in A's run directory. Host B
runs one ``python -m reame.worker`` under ``ip netns exec`` with a config file naming
host A's addresses and only the client keys, as a worker VM's ``reame-worker@N`` unit
would (deploy/install.sh worker), and under ``unshare --uts`` with a hostname of its
own, as a second VM has (the dispatcher lends idle threads only within a host). No
address of the test is in the root namespace, so every byte between the hosts crosses
the veth and nothing else on the machine can reach or disturb it; keeping the server in
the root namespace would have put its ports beside everything else the machine runs.

Which worker served a request is read from the dispatcher's status (each worker's
``served`` count, by name: the local worker is ``w0-...``, host B's ``w7-...``). Ties
between idle workers go to the one idle longest (dispatcher/scheduler.py), so short
questions are sent until the wanted worker is the one left idle longest.

The link is cut by setting host B's end of the veth down, as when a worker VM loses
its network: host A keeps 10.77.0.1, so its own worker's link stays up. Liveness is the protocol's
(shared/protocol/base.py, not configurable): heartbeats every second both ways, a peer
silent for 3 of them is dead. So the dispatcher drops host B's worker and re-dispatches
the request it had sent there, and host B's worker reconnects every 3 s until the link
is back. Nothing here asserts how long that took; the tests wait on the events under
tests/waiting.py's bound and print what they measured.

The tests run in file order on one server: the link cut comes after the checks that
need both workers, and the last test checks host B's worker after the link is back.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any, Final

import pytest
from openai.types.chat import ChatCompletion

from reame.benchmarks.server import RESTORED, spawn, stop_process
from reame.gateway.upstream.client import Dispatcher
from reame.shared.config import load
from reame.shared.protocol import WorkerState
from reame.supervisor import keys as keygen
from tests.harness import Server, cmdline, start_server
from tests.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.integration

HOST_A: Final = "10.77.0.1"
HOST_B: Final = "10.77.0.2"
BACKEND: Final = f"tcp://{HOST_A}:5556"
CACHE: Final = f"tcp://{HOST_A}:5557"
REMOTE_INDEX: Final = 7  # host B's worker is w7-PID; the server's own is w0-PID
ROGUE_INDEX: Final = 8
CLONE_NEWNET: Final = 0x40000000
HOSTNAME_B: Final = "reame-host-b"  # its own UTS namespace too: the dispatcher lends threads only within a host
# Both hosts store and look up prompts from this many tokens (the default is 256): the
# document to store and restore is read in a cold prefill once, and shorter is sooner.
MIN_TOKENS: Final = 128
# About 230 tokens with the chat template, no line repeated (lossless compression would
# drop repeats): above MIN_TOKENS, so it is stored, and over 3 blocks of cache.block_tokens.
DOCUMENT: Final = "\n".join(
    f"Shelf {i} holds {i * 7 % 23} red marbles, {i * 5 % 17} blue ones and a note that says {i * 31 % 97}."
    for i in range(8)
)
_questions = count()
_libc = ctypes.CDLL(None, use_errno=True)


def ip_command() -> str | None:
    """Return iproute2's ``ip``: on PATH, or in /usr/sbin, which a non-root PATH may lack."""
    return shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")


def ip(*args: str) -> None:
    """Run ``ip ARGS``; fail with its message if it fails."""
    command = [ip_command() or "ip", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"{' '.join(command)}: {result.stderr.strip()}"


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def inside(netns: str) -> Iterator[None]:
    """Put the calling thread in network namespace ``netns``; what it forks or connects meanwhile is there too."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


@dataclass
class Hosts:
    """Two network namespaces joined by a veth pair."""

    a: str
    b: str
    veth_a: str
    veth_b: str

    def link(self, up: bool) -> None:
        """Set host B's end of the link up or down."""
        ip("-n", self.b, "link", "set", self.veth_b, "up" if up else "down")


def namespaces_unavailable() -> str | None:
    """Say why this machine cannot make network namespaces, or None if it may."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if ip_command() is None:
        return "no `ip` command (Debian's iproute2)"
    return None


@contextlib.contextmanager
def two_namespaces() -> Iterator[Hosts]:
    """Make hosts A and B with the veth between them; remove both (and so the veth) at the end."""
    tag = os.getpid()
    hosts = Hosts(f"reame-a-{tag}", f"reame-b-{tag}", f"rva{tag}"[:15], f"rvb{tag}"[:15])
    made: list[str] = []
    try:
        for name in (hosts.a, hosts.b):
            result = subprocess.run([ip_command() or "ip", "netns", "add", name], capture_output=True, text=True)
            if result.returncode != 0:
                pytest.skip(f"cannot make a network namespace (ip netns add): {result.stderr.strip()}")
            made.append(name)
        ip("link", "add", hosts.veth_a, "netns", hosts.a, "type", "veth", "peer", "name", hosts.veth_b,
           "netns", hosts.b)
        for netns, veth, address in ((hosts.a, hosts.veth_a, HOST_A), (hosts.b, hosts.veth_b, HOST_B)):
            ip("-n", netns, "link", "set", "lo", "up")
            ip("-n", netns, "address", "add", f"{address}/24", "dev", veth)
            ip("-n", netns, "link", "set", veth, "up")
        yield hosts
    finally:
        for name in made:
            subprocess.run([ip_command() or "ip", "netns", "delete", name], capture_output=True)


@dataclass
class HostB:
    """Start workers in host B, as its ``reame-worker@N`` units would; remember them to stop them."""

    hosts: Hosts
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_worker(self, config: Path, index: int, log: Path) -> subprocess.Popen[bytes]:
        """Start ``python -m reame.worker --config CONFIG --index INDEX`` under ``ip netns exec``, named host B."""
        env = {name: value for name, value in os.environ.items() if not name.startswith("REAME_")}
        argv = [ip_command() or "ip", "netns", "exec", self.hosts.b,
                "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', HOSTNAME_B,
                sys.executable, "-P", "-m", "reame.worker", "--config", str(config), "--index", str(index)]
        proc = spawn(argv, env, log)  # each of these execs the next: proc.pid is the worker's
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        """SIGTERM every worker started here, SIGKILL one that does not exit."""
        for proc in self.started:
            stop_process(proc)


@dataclass
class Fleet:
    """The server on host A, host B's worker, and when the link came back."""

    hosts: Hosts
    server: Server
    host_b: HostB
    remote: subprocess.Popen[bytes]
    remote_log: Path
    config_a: Path
    key_dir: Path
    tmp: Path
    link_up_at: float | None = None


def host_b_config(path: Path, client_key: Path, server_public: Path) -> Path:
    """Write a worker host's reame.conf: host A's addresses and a client's keys only.

    Its cache.dir is host B's own (a worker keeps its measured speculative costs there).
    """
    path.write_text(
        f"[workers]\nthreads = 1\n[dispatcher]\nbackend = {BACKEND}\n"
        f"[cache]\naddress = {CACHE}\ndir = {path.parent / 'host-b-cache'}\nmin_tokens = {MIN_TOKENS}\n"
        f"[security]\ncurve_client_key = {client_key}\ncurve_server_public = {server_public}\n"
    )
    return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Hosts A and B, ``reame serve`` with one local worker in A, and one worker in B attached over CURVE."""
    reason = namespaces_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("two-hosts")
    key_dir = tmp / "keys"
    keygen.generate(key_dir)  # the server pair and the server host's own client
    keygen.generate(key_dir, "worker-b")  # host B's client key, listed in authorized/
    config_a = tmp / "host-a.conf"
    config_a.write_text(
        f"[dispatcher]\nbackend = {BACKEND}\n[cache]\naddress = {CACHE}\nmin_tokens = {MIN_TOKENS}\n[security]\n"
        f"curve_server_key = {key_dir / 'server.key_secret'}\ncurve_authorized_dir = {key_dir / 'authorized'}\n"
        f"curve_client_key = {key_dir / 'client.key_secret'}\ncurve_server_public = {key_dir / 'server.key'}\n"
    )
    config_b = host_b_config(tmp / "host-b.conf", key_dir / "worker-b.key_secret", key_dir / "server.key")
    with contextlib.ExitStack() as stack:  # undone in reverse, on failure too: workers, server, namespaces
        hosts = stack.enter_context(two_namespaces())
        host_b = HostB(hosts)
        stack.callback(host_b.stop_all)
        # Started first, as a worker VM may be: it knocks until the dispatcher is up (and
        # loads the model meanwhile).
        remote_log = tmp / "host-b.log"
        remote = host_b.start_worker(config_b, REMOTE_INDEX, remote_log)
        with inside(hosts.a):
            # REAME_CONFIG: the supervisor and its children read host A's file; the harness's
            # REAME_* settings (port, run dir, one worker) override it.
            server = start_server(tmp / "serve", workers=1, config=str(config_a))
        stack.callback(stop_server, server)
        running = Fleet(hosts, server, host_b, remote, remote_log, config_a, key_dir, tmp)
        # start_server waited for one worker: host B's may have been that one.
        wait_for(lambda: remote_state(running) and named(running, 0), PATIENCE_S * 2, interval=0.2,
                 what=f"both workers to attach (host B's log: {remote_log})")
        yield running


def stop_server(server: Server) -> None:
    left = server.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(pid) for pid in left]}"


def states(fleet: Fleet) -> list[WorkerState]:
    """The workers as the dispatcher sees them (over ipc:// in A's run directory, which any namespace can open)."""
    config = load(None, environ={"REAME_SERVER_RUN_DIR": str(fleet.server.run_dir)})
    dispatcher = Dispatcher(config.frontend_address)
    try:
        status = dispatcher.status(5.0)
    finally:
        dispatcher.close()
    assert status is not None, "the dispatcher did not answer a status query"
    return list(status.worker_states)


def named(fleet: Fleet, index: int) -> WorkerState | None:
    return next((w for w in states(fleet) if w.name.startswith(f"w{index}-")), None)


def remote_state(fleet: Fleet) -> WorkerState | None:
    """Host B's worker as the dispatcher sees it; None while it is not attached."""
    return named(fleet, REMOTE_INDEX)


def served(fleet: Fleet) -> dict[str, int]:
    """Requests each attached worker served since it attached, by name."""
    return {w.name: w.served for w in states(fleet)}


def ask(fleet: Fleet, content: str, max_tokens: int = 4) -> ChatCompletion:
    """Send one greedy chat completion to the gateway, from inside host A."""
    with inside(fleet.hosts.a), fleet.server.client(timeout=PATIENCE_S) as client:
        return client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": content}], max_tokens=max_tokens, temperature=0,
        )


def ask_served_by(fleet: Fleet, content: str) -> tuple[ChatCompletion, str]:
    """Send one request; return the reply and the name of the worker that served it."""
    before = served(fleet)
    reply = ask(fleet, content)
    after = served(fleet)
    movers = [name for name, n in after.items() if n > before.get(name, 0)]
    assert len(movers) == 1, f"served counts before {before}, after {after}"
    return reply, movers[0]


def short_question() -> str:
    return f"Say hello to visitor number {next(_questions)}."  # never the same: no previous turn to follow


def until_served_by(fleet: Fleet, index: int) -> str:
    """Send short questions until worker ``w{index}`` serves one (the other is then the one idle longest)."""
    for _ in range(3):  # idle workers take turns, so the second at most
        _, name = ask_served_by(fleet, short_question())
        if name.startswith(f"w{index}-"):
            return name
    raise AssertionError(f"w{index} served none of 3 questions: {served(fleet)}")


def ready(fleet: Fleet) -> dict[str, Any] | None:
    with inside(fleet.hosts.a):
        return fleet.server.ready()


def cache_entries(fleet: Fleet) -> int:
    """`reame cache stats --json` run in host A, over CURVE to the cachekeeper."""
    env = {**os.environ, "REAME_CACHE_DIR": str(fleet.server.cache_dir),
           "REAME_SERVER_RUN_DIR": str(fleet.server.run_dir)}
    with inside(fleet.hosts.a):
        result = subprocess.run(
            [sys.executable, "-P", "-m", "reame.supervisor", "cache", "stats", "--json", "--config",
             str(fleet.config_a)],
            capture_output=True, text=True, timeout=120, env=env,
        )
    assert result.returncode == 0, result.stderr
    entries: int = json.loads(result.stdout)["entries"]
    return entries


def test_requests_are_served_by_the_worker_on_host_b(fleet: Fleet) -> None:
    # It runs in host B's namespace, whose one way out is the veth to host A.
    assert os.stat(f"/proc/{fleet.remote.pid}/ns/net").st_ino == os.stat(f"/run/netns/{fleet.hosts.b}").st_ino
    assert " -m reame.worker " in cmdline(fleet.remote.pid)
    state = ready(fleet)
    assert state is not None and state["workers"] == 2 and state["cache"] == "on"
    name = until_served_by(fleet, REMOTE_INDEX)
    assert f"(pid {fleet.remote.pid})" in name
    assert f"worker {name.split(' ')[0]} serving for {BACKEND}" in fleet.remote_log.read_text()


def test_a_worker_with_an_unknown_key_is_refused_and_logged(fleet: Fleet) -> None:
    stranger = fleet.tmp / "stranger"
    keygen.generate(stranger, "rogue")  # a valid pair that knows host A's public key, but is not listed
    config = host_b_config(fleet.tmp / "rogue.conf", stranger / "rogue.key_secret", fleet.key_dir / "server.key")
    rogue_log = fleet.tmp / "rogue.log"
    rogue = fleet.host_b.start_worker(config, ROGUE_INDEX, rogue_log)

    def refusal() -> str | None:
        assert rogue.poll() is None, f"the rogue worker exited: {rogue_log.read_text()[-2000:]}"
        return next((line for line in fleet.server.log().splitlines()
                     if "[dispatcher " in line and f"refused a connection from {HOST_B}" in line), None)

    line = wait_for(refusal, PATIENCE_S * 2, interval=0.2, what="the dispatcher to log the refusal")
    assert "WARNING" in line
    # It loaded the model and knocks, and still is no worker: requests go to the two others.
    wait_for(lambda: "worker w8-" in rogue_log.read_text(), what="the rogue worker to try its link")
    for _ in range(2):
        assert ask(fleet, short_question()).choices[0].message.content
    assert named(fleet, ROGUE_INDEX) is None
    state = ready(fleet)
    assert state is not None and state["workers"] == 2
    stop_process(rogue)


def test_with_the_link_cut_requests_go_to_the_local_worker(fleet: Fleet) -> None:
    assert remote_state(fleet) is not None
    local = until_served_by(fleet, 0)  # host B's worker is now the one idle longest: it gets the next request
    cut_at = time.monotonic()
    fleet.hosts.link(up=False)
    try:
        # Sent to host B's worker before the dispatcher knows the link is gone: it is
        # re-dispatched once that worker misses its heartbeats, since it sent no token.
        # (Whether it reached the dispatcher before the drop depends on this machine's speed:
        # the log says "goes back to the front of the queue" when it did.)
        reply, name = ask_served_by(fleet, short_question())
        answered_at = time.monotonic()
        assert reply.choices[0].message.content and name == local
        wait_for(lambda: remote_state(fleet) is None, what="the dispatcher to drop host B's worker")
        assert any(f"worker w{REMOTE_INDEX}-" in line and " lost (silent for " in line
                   for line in fleet.server.log().splitlines())
        for _ in range(2):
            _, name = ask_served_by(fleet, short_question())
            assert name == local
        state = ready(fleet)
        assert state is not None and state["workers"] == 1
        # Host B's side notices too, and reconnects (a new socket) until the link is back.
        wait_for(lambda: "no word from the dispatcher" in fleet.remote_log.read_text(), interval=0.1,
                 what="host B's worker to notice the silence")
        print(f"\nlink cut: the request sent after the cut answered by the local worker after "
              f"{answered_at - cut_at:.1f} s; host B's worker noticed after {time.monotonic() - cut_at:.1f} s at most")
    finally:
        fleet.hosts.link(up=True)
        fleet.link_up_at = time.monotonic()


def test_the_worker_on_host_b_attaches_again_and_restores_from_the_cache(fleet: Fleet) -> None:
    assert fleet.link_up_at is not None, "runs after the link cut (file order)"
    wait_for(lambda: remote_state(fleet), interval=0.1, what="host B's worker to attach again")
    attached_at = time.monotonic()
    print(f"\nlink back: host B's worker attached again after {attached_at - fleet.link_up_at:.1f} s")
    assert "no word from the dispatcher" in fleet.remote_log.read_text()

    # The local worker reads the document and stores it; host B's worker has never seen it.
    until_served_by(fleet, REMOTE_INDEX)  # the local worker is now the one idle longest
    entries = cache_entries(fleet)
    question = f"{DOCUMENT}\n\nHow many red marbles does shelf 3 hold?"
    _, reader = ask_served_by(fleet, question)
    assert reader.startswith("w0-")
    wait_for(lambda: cache_entries(fleet) > entries, interval=0.2, what="the document's entry in the store")
    until_served_by(fleet, 0)  # the local worker holds a short question now, not the document

    restores = fleet.remote_log.read_text().count(RESTORED)
    reply, name = ask_served_by(fleet, question)
    assert name.startswith(f"w{REMOTE_INDEX}-")
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    cached = reply.usage.prompt_tokens_details.cached_tokens or 0
    assert cached * 2 > reply.usage.prompt_tokens, reply.usage
    # ...from the store over the link, not from its own memory.
    assert fleet.remote_log.read_text().count(RESTORED) == restores + 1
    # Host B's worker went silent once, at the cut: a socket it gave up on after the link
    # came back said Disconnect, so no request waited for a worker that was not there.
    silent = [line for line in fleet.server.log().splitlines()
              if f"worker w{REMOTE_INDEX}-" in line and " lost (silent for " in line]
    assert len(silent) == 1, silent
