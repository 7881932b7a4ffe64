"""The worker's cache uploader at a graceful stop: queued saves are sent for a while, then dropped."""

from __future__ import annotations

import threading

import zmq

from reame.worker.cache_health import Health
from reame.worker.cache_uploader import Save, Uploader


class Recording(Uploader):
    """An uploader whose uploads are recorded instead of sent; the first waits for ``release``."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]]) -> None:
        super().__init__(context, "inproc://none", "f" * 32, "f16", 1.0, Health("inproc://none", 1.0), lambda: "id",
                         pending=2)
        self.release = threading.Event()
        self.uploading = threading.Event()
        self.sent: list[list[int]] = []

    def _upload(self, item: Save) -> bool:
        self.uploading.set()
        self.release.wait()
        self.sent.append(item.tokens)
        return True


def test_a_stop_with_time_to_drain_sends_the_queued_saves() -> None:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    uploader = Recording(context)
    uploader.start()
    told: dict[int, bool] = {}
    for n in range(3):  # one being sent, two queued
        assert uploader.submit([n], b"s", lambda stored, n=n: told.__setitem__(n, stored), wait=5.0)
        if n == 0:
            uploader.uploading.wait(5.0)
    uploader.release.set()
    uploader.stop(drain=30.0)
    assert uploader.sent == [[0], [1], [2]] and told == {0: True, 1: True, 2: True}
    assert not uploader.submit([3], b"s", None, wait=0.0)  # stopped
    context.term()


def test_a_stop_without_time_drops_the_queued_saves_and_says_so() -> None:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    uploader = Recording(context)
    uploader.start()
    told: dict[int, bool] = {}
    for n in range(3):
        assert uploader.submit([n], b"s", lambda stored, n=n: told.__setitem__(n, stored), wait=5.0)
        if n == 0:
            uploader.uploading.wait(5.0)
    stopper = threading.Thread(target=uploader.stop)
    stopper.start()
    assert uploader._stopping.wait(5.0)
    uploader.release.set()  # the save under way ends; the queued ones are never sent
    stopper.join(10.0)
    assert uploader.sent == [[0]] and told == {0: True, 1: False, 2: False}
    context.term()
