"""Links: the plain-tcp rule, reading CURVE keys, and a CURVE server that accepts only listed clients."""

from __future__ import annotations

import dataclasses
import logging
import stat
from pathlib import Path
from typing import Any

import pytest
import zmq

from reame.shared import endpoints
from reame.shared import protocol as p
from reame.shared.config import SecurityConfig
from reame.supervisor import keys as keygen
from tests.harness import free_port
from tests.waiting import wait_for

REFUSAL_LOGGER = "reame.shared.endpoints"


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("tcp://127.0.0.1:5555", True),
        ("tcp://127.8.9.10:5555", True),
        ("tcp://[::1]:5555", True),
        ("tcp://localhost:5555", True),
        ("tcp://10.0.0.1;127.0.0.1:5555", True),  # from a source address: the peer decides
        ("tcp://0.0.0.0:5555", False),
        ("tcp://*:5555", False),
        ("tcp://10.1.2.3:5555", False),
        ("tcp://eth0:5555", False),
        ("tcp://reame.example:5555", False),
        ("ipc:///tmp/x.ipc", False),
    ],
)
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert endpoints.is_loopback(address) is loopback


def test_plain_tcp_off_this_machine_is_refused_unless_keyed_or_allowed() -> None:
    public = "tcp://0.0.0.0:5555"
    refusal = endpoints.plain_refusal(public, server=True, keyed=False, allowed=False)
    assert refusal is not None
    assert "curve_server_key" in refusal and "curve_authorized_dir" in refusal and "allow_plain_tcp" in refusal
    client = endpoints.plain_refusal("tcp://10.0.0.2:5555", server=False, keyed=False, allowed=False)
    assert client is not None and "curve_client_key" in client and "curve_server_public" in client
    assert endpoints.plain_refusal(public, server=True, keyed=True, allowed=False) is None
    assert endpoints.plain_refusal(public, server=True, keyed=False, allowed=True) is None
    assert endpoints.plain_refusal("tcp://127.0.0.1:5555", server=True, keyed=False, allowed=False) is None
    assert endpoints.plain_refusal("ipc:///run/reame/b.ipc", server=False, keyed=False, allowed=False) is None


def test_link_keys_refuses_a_plain_public_bind_and_names_the_keys() -> None:
    with pytest.raises(endpoints.EndpointError, match="curve_server_key"):
        endpoints.link_keys(SecurityConfig("", "", "", "", False), binds=["tcp://*:5555"])
    allowed = endpoints.link_keys(SecurityConfig("", "", "", "", True), binds=["tcp://*:5555"])
    assert allowed == endpoints.PLAIN


def security(directory: Path, client: str = "client", allow_plain: bool = False) -> SecurityConfig:
    return SecurityConfig(
        curve_server_key=str(directory / "server.key_secret"),
        curve_authorized_dir=str(directory / "authorized"),
        curve_client_key=str(directory / f"{client}.key_secret"),
        curve_server_public=str(directory / "server.key"),
        allow_plain_tcp=allow_plain,
    )


def test_link_keys_reads_only_what_the_process_needs(tmp_path: Path) -> None:
    keygen.generate(tmp_path)
    config = security(tmp_path)
    server = endpoints.link_keys(config, binds=["tcp://0.0.0.0:5555"])
    assert server.server_secret and server.authorized == tmp_path / "authorized" and server.client_secret is None
    client = endpoints.link_keys(config, connects=["tcp://10.0.0.1:5555"])
    assert client.client_secret and client.server_public == server.server_public and client.server_secret is None
    assert endpoints.link_keys(config, binds=["ipc:///x/b.ipc"], connects=["ipc:///x/f.ipc"]) == endpoints.PLAIN


def test_link_keys_names_a_missing_or_public_only_file(tmp_path: Path) -> None:
    keygen.generate(tmp_path)
    missing = SecurityConfig(str(tmp_path / "nope.key_secret"), str(tmp_path / "authorized"), "", "", False)
    with pytest.raises(endpoints.EndpointError, match="curve_server_key"):
        endpoints.link_keys(missing, binds=["tcp://127.0.0.1:5555"])
    public_only = SecurityConfig("", "", str(tmp_path / "client.key"), str(tmp_path / "server.key"), False)
    with pytest.raises(endpoints.EndpointError, match="no secret key"):
        endpoints.link_keys(public_only, connects=["tcp://127.0.0.1:5555"])
    no_dir = SecurityConfig(str(tmp_path / "server.key_secret"), str(tmp_path / "absent"), "", "", False)
    with pytest.raises(endpoints.EndpointError, match="curve_authorized_dir"):
        endpoints.link_keys(no_dir, binds=["tcp://127.0.0.1:5555"])


def test_socket_directory_is_made_private(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    endpoints.prepare(f"ipc://{directory}/backend.ipc")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_curve_server_serves_a_listed_client_and_refuses_and_logs_another(
    tmp_path: Path, context: zmq.Context[Any], caplog: pytest.LogCaptureFixture
) -> None:
    keygen.generate(tmp_path)
    stranger_dir = tmp_path / "elsewhere"
    keygen.generate(stranger_dir, "stranger")  # a valid pair, but listed only in its own directory
    address = f"tcp://127.0.0.1:{free_port()}"
    server_keys = endpoints.link_keys(security(tmp_path), binds=[address])
    guard = endpoints.Guard(server_keys)
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    caplog.set_level(logging.WARNING, logger=REFUSAL_LOGGER)
    try:
        endpoints.bind(router, address, "the test server", guard)

        stranger = context.socket(zmq.DEALER)
        stranger.setsockopt(zmq.LINGER, 0)
        # It knows the server's public key (it is public), not a listed client key.
        stranger_config = dataclasses.replace(
            security(stranger_dir, "stranger"), curve_server_public=str(tmp_path / "server.key")
        )
        stranger_keys = endpoints.link_keys(stranger_config, connects=[address])
        endpoints.secure_client(stranger, address, stranger_keys)
        stranger.connect(address)
        stranger.send(p.encode(p.Heartbeat()))

        friend = context.socket(zmq.DEALER)
        friend.setsockopt(zmq.LINGER, 0)
        endpoints.secure_client(friend, address, endpoints.link_keys(security(tmp_path), connects=[address]))
        friend.connect(address)
        friend.send(p.encode(p.StatusQuery()))

        assert router.poll(60_000), "the listed client's message never arrived"
        identity, payload = router.recv_multipart()
        assert isinstance(p.decode(payload), p.StatusQuery)
        router.send_multipart([identity, p.encode(p.Heartbeat())])
        assert friend.poll(60_000) and isinstance(p.decode(friend.recv()), p.Heartbeat)

        wait_for(lambda: any("refused a connection" in r.getMessage() for r in caplog.records),
                 what="the refusal warning")
        refusal = next(r for r in caplog.records if "refused a connection" in r.getMessage())
        assert refusal.levelno == logging.WARNING and "127.0.0.1" in refusal.getMessage()
        assert str(tmp_path / "authorized") in refusal.getMessage()
        # The stranger's message never got through, however often it reconnects.
        assert not router.poll(200)
        stranger.close()
        friend.close()
    finally:
        router.close(linger=0)
        guard.close()


def test_refusals_are_warned_once_a_minute_per_key(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    refusals = endpoints.RefusalLog(logging.getLogger(REFUSAL_LOGGER), Path("/keys"), lambda: now[0])
    caplog.set_level(logging.DEBUG, logger=REFUSAL_LOGGER)

    def knock(key: bytes) -> None:
        refusals.debug("version: %r, request_id: %r, domain: %r, address: %r, identity: %r, mechanism: %r",
                       b"1.0", b"1", "", "10.0.0.9", b"", b"CURVE")
        refusals.debug("%s (CURVE) domain=%s client_key=%s", "DENIED", "*", key)

    for _ in range(3):
        knock(b"AAAA")
    knock(b"BBBB")
    now[0] = endpoints.REFUSAL_LOG_INTERVAL_S + 1
    knock(b"AAAA")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "AAAA" in warnings[0] and "10.0.0.9" in warnings[0]
    assert "BBBB" in warnings[1]
    assert "AAAA" in warnings[2] and "2 more refusals" in warnings[2]
