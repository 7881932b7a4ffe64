"""Share each host's threads among its busy workers: the cores of idle workers are lent.

A worker owns ``workers.threads`` threads. While some workers on its host are idle,
their threads would sit unused, so the busy ones share them: a lone request gets
every core of the host, and as requests arrive each worker's share shrinks back
toward its own. The dispatcher sends a worker its share before each Generate and
whenever the share changes; the worker applies it at its next batch
(llama_set_n_threads), so the host is oversubscribed for at most one batch.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import NamedTuple


class Seat(NamedTuple):
    identity: bytes
    host: str
    threads: int  # its own
    busy: bool


def allot(seats: Iterable[Seat]) -> dict[bytes, int]:
    """Return the threads each busy worker may use: its own plus an even share of its idle neighbours'.

    What does not divide evenly goes to the busy workers first in identity order,
    so that the same situation always gives the same shares.
    """
    hosts: dict[str, list[Seat]] = collections.defaultdict(list)
    for seat in seats:
        hosts[seat.host].append(seat)
    shares: dict[bytes, int] = {}
    for seated in hosts.values():
        busy = sorted((s for s in seated if s.busy), key=lambda s: s.identity)
        if not busy:
            continue
        spare = sum(s.threads for s in seated if not s.busy)
        each, rest = divmod(spare, len(busy))
        for rank, seat in enumerate(busy):
            shares[seat.identity] = seat.threads + each + (1 if rank < rest else 0)
    return shares
