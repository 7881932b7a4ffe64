"""/ready's cache field: the gateway asks the cachekeeper itself, briefly, and never waits on a missing one."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import zmq

from reame.gateway.upstream.cache_probe import DISABLED, OFF, ON, CacheProbe
from reame.shared import protocol as p
from reame.shared.upstream import Upstream


def test_disabled_cache_is_not_asked(context: zmq.Context[Any]) -> None:
    assert CacheProbe(None, Upstream(context)).state(0.01) == DISABLED


def test_missing_socket_file_is_off_at_once(context: zmq.Context[Any], tmp_path: Path) -> None:
    assert CacheProbe(f"ipc://{tmp_path}/cache.ipc", Upstream(context)).state(60.0) == OFF


def test_silent_cachekeeper_is_off(context: zmq.Context[Any]) -> None:
    address = f"inproc://silent-{uuid.uuid4().hex}"
    router = context.socket(zmq.ROUTER)
    router.bind(address)
    try:
        assert CacheProbe(address, Upstream(context)).state(0.05) == OFF
    finally:
        router.close(linger=0)


def test_answering_cachekeeper_is_on(context: zmq.Context[Any]) -> None:
    address = f"inproc://keeper-{uuid.uuid4().hex}"
    router = context.socket(zmq.ROUTER)
    router.bind(address)

    def answer() -> None:
        if router.poll(60_000):
            identity, payload = router.recv_multipart()
            admin = p.decode(payload)
            assert isinstance(admin, p.CacheAdmin) and admin.command is p.CacheCommand.STATS
            router.send_multipart([identity, p.encode(p.CacheReport(admin.request_id, 0, 0, 1, 0, 0, 0, 0, 0, 0))])

    keeper = threading.Thread(target=answer)
    keeper.start()
    try:
        assert CacheProbe(address, Upstream(context)).state(60.0) == ON
    finally:
        keeper.join()
        router.close(linger=0)
