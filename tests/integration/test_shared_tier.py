"""The shared cache tier on a real redis-server that each test starts (Debian's package).

Two servers sharing only Redis: a document read on the first is restored on the
second (cached tokens, the same greedy answer). Cachekeepers in this process over
the same Redis: a corrupt value is refused and deleted, and a frozen Redis costs one
request one timeout while lookups go on being answered from the local store.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reame.benchmarks.redis_server import RedisServer, running_redis
from reame.cachekeeper import tier_rules as rules
from reame.cachekeeper.main import shared_settings
from reame.cachekeeper.tier_remote import RedisRemote, RemoteError, Settings
from reame.shared import protocol as p
from reame.shared.config import Config, load
from reame.shared.prefix import entry_key
from tests.harness import Server, cache_stats, free_port, start_server, wait_for_entries
from tests.integration.test_cache import FACTS, QUESTIONS, ask
from tests.unit.test_shared_tier_keeper import DOC, FP, RAW, Host
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None,
                       reason="redis-server is not installed (make install-test installs Debian's as root)"),
]

PREFIX = "test:"
# A generous bound on each Redis reply for a loaded machine; only the frozen Redis waits it out.
TIMEOUT_S = 5.0
# Another document (new to every store), so a lookup while Redis is frozen does ask the tier.
OTHER_DOCUMENT = "Opening hours.\n" + "\n".join(
    f"Rule {i}. {fact} Staff at the counter can explain the details to any customer who asks."
    for i, fact in enumerate(reversed(FACTS * 2))
)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with running_redis(reply_timeout_s=TIMEOUT_S) as server:
        wait_for(server.answers, what="redis-server to answer")
        yield server


def shared_stats(server: Server) -> dict[str, Any]:
    shared: dict[str, Any] = cache_stats(server)["shared"]
    return shared


def test_a_second_server_sharing_only_redis_restores_the_document_and_serves_with_redis_frozen(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    tier = {"cache_shared_url": redis_server.url, "cache_shared_prefix": PREFIX,
            "cache_shared_timeout": str(TIMEOUT_S)}
    first = start_server(tmp_path / "a", workers=1, **tier)
    try:
        answer, _, cached = ask(first, QUESTIONS[0])
        assert cached == 0
        wait_for_entries(first, 1)
        wait_for(lambda: shared_stats(first)["pushes"] >= 1, what="the entry pushed to Redis")
    finally:
        assert not first.stop()
    # Another cache directory, run directory and port: only Redis is shared. A long cache.timeout
    # lets the lookup wait for the fetch however busy the machine (it waits half of it at most).
    second = start_server(tmp_path / "b", workers=1, cache_timeout="40", **tier)
    try:
        again, prompt_tokens, cached = ask(second, QUESTIONS[0])
        assert cached > prompt_tokens // 2, (cached, prompt_tokens)
        assert again == answer
        stats = shared_stats(second)
        assert stats["up"] and stats["hits"] == 1 and stats["corrupt"] == 0 and stats["bytes_fetched"] > 0
        assert cache_stats(second)["entries"] == 1  # fetched into its own store
        _, _, metrics = second.request("GET", "/metrics")
        assert b"reame_cache_shared_hits_total" in metrics and b"reame_cache_shared_up" in metrics

        redis_server.freeze()
        for question in QUESTIONS[1:3]:
            status, _, body = second.post_json("/v1/chat/completions", {
                "model": "m", "messages": [{"role": "system", "content": OTHER_DOCUMENT},
                                           {"role": "user", "content": question}],
                "temperature": 0, "max_tokens": 8,
            })
            assert status == 200, body
        stats = shared_stats(second)
        # The first lookup of the new document paid the one timeout; the rest skipped Redis.
        assert not stats["up"] and stats["errors"] == 1, stats
        wait_for(lambda: shared_stats(second)["push_drops"] >= 1, what="the new document's push dropped")
        redis_server.thaw()
        wait_for(lambda: shared_stats(second)["up"], what="the cachekeeper to find Redis back")
        assert "shared cache tier" in second.log() and " is back" in second.log()
    finally:
        redis_server.thaw()
        assert not second.stop()


@pytest.fixture
def top() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="reame-t"))  # ipc:// paths must stay short
    yield path
    shutil.rmtree(path)


def remote(redis_server: RedisServer) -> RedisRemote:
    return RedisRemote(Settings(redis_server.url, PREFIX, TIMEOUT_S))


def test_a_corrupt_value_in_redis_is_refused_deleted_and_never_served(top: Path, redis_server: RedisServer) -> None:
    hosts = [Host(top, "a", remote(redis_server)), Host(top, "b", remote(redis_server))]
    client = redis_server.client()
    try:
        a, b = hosts
        stored = a.put("put", DOC, RAW)
        assert isinstance(stored, p.CacheStored) and stored.stored
        name = rules.entry_name(PREFIX, entry_key(FP, DOC))
        wait_for(lambda: client.exists(name), what="the push to Redis")
        data = client.get(name)
        assert isinstance(data, bytes) and data == next(a.store.directory.glob("*.kv")).read_bytes()
        client.setrange(name, len(data) - 100, bytes([data[-100] ^ 0x01]))  # one payload bit
        miss, _ = b.lookup("look", [*DOC, 1, 2, 3, 4])
        assert isinstance(miss, p.CacheMiss)
        assert not list(b.store.directory.glob("*.kv"))
        assert not client.exists(name)
        report = b.report()
        assert (report.corrupt, report.hits, report.misses) == (1, 0, 1)
    finally:
        client.close()
        for host in hosts:
            host.close()


def test_an_acl_user_authenticates_with_the_password_file_and_a_wrong_password_is_refused(
    tmp_path: Path
) -> None:
    password = tmp_path / "redis-password"
    password.write_text("s3cret-fleet\n")
    with running_redis("--user", "fleet", "on", ">s3cret-fleet", "~*", "&*", "+@all",
                       "--user", "default", "off") as server:
        env = {"REAME_CACHE_SHARED_URL": server.url, "REAME_CACHE_SHARED_USER": "fleet",
               "REAME_CACHE_SHARED_PASSWORD_FILE": str(password)}
        wait_for(lambda: _pings(load(None, environ=env)), what="redis-server to let the fleet user in")
        password.write_text("wrong\n")
        assert not _pings(load(None, environ=env))
        assert "wrong" not in repr(shared_settings(load(None, environ=env)))


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """Return a test CA's certificate and a server certificate (for 127.0.0.1) and key it signed."""
    ca_key, ca, key, request, cert = (directory / name for name in ("ca.key", "ca.crt", "s.key", "s.csr", "s.crt"))
    (directory / "san").write_text("subjectAltName=IP:127.0.0.1\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for argv in (
        ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=reame test CA"],
        ["req", *ec, "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2",
         "-extfile", directory / "san"],
    ):
        subprocess.run(["openssl", *map(str, argv)], check=True, capture_output=True, timeout=120)
    return ca, cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed (it makes the test's CA)")
def test_rediss_checks_the_server_certificate_against_the_ca_file(tmp_path: Path) -> None:
    ca, cert, key = make_certificates(tmp_path)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other_ca, _, _ = make_certificates(other_dir)
    port = free_port()
    tls = ["--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
           "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"]
    with running_redis(*tls):
        env = {"REAME_CACHE_SHARED_URL": f"rediss://127.0.0.1:{port}", "REAME_CACHE_SHARED_CA_FILE": str(ca)}
        wait_for(lambda: _pings(load(None, environ=env)), what="redis-server to answer over TLS")
        env["REAME_CACHE_SHARED_CA_FILE"] = str(other_ca)  # a server this CA did not vouch for
        assert not _pings(load(None, environ=env))


def _pings(config: Config) -> bool:
    remote = RedisRemote(shared_settings(config))
    try:
        remote.ping()
    except RemoteError:
        return False
    finally:
        remote.close()
    return True


def test_a_frozen_redis_costs_one_lookup_one_timeout_and_the_store_goes_on_answering(
    top: Path, redis_server: RedisServer
) -> None:
    settings = Settings(redis_server.url, PREFIX, 0.5)
    host = Host(top, "a", RedisRemote(settings), rules.Health(first_s=0.05, max_s=0.05))
    try:
        assert isinstance(host.put("put", DOC, RAW), p.CacheStored)
        wait_for(lambda: host.report().pushes == 1, what="the push to Redis")
        redis_server.freeze()
        for i in range(5):
            hit, raw = host.lookup(f"look-{i}", [*DOC, 1, 2, 3, 4, i])
            assert isinstance(hit, p.CacheHit) and raw == RAW
        report = host.report()
        assert not report.up and report.errors == 1 and report.misses == 0
        redis_server.thaw()
        wait_for(lambda: host.report().up, what="the retry to find Redis back")
        assert host.report().errors == 1
    finally:
        redis_server.thaw()
        host.close()
