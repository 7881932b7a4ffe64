"""Tell systemd how the service is doing: sd_notify(3) over $NOTIFY_SOCKET, in a few lines.

A ``Type=notify`` unit waits for ``READY=1`` before ``systemctl start`` returns and
before units ordered after it start; ``STOPPING=1`` says a stop is under way. The
protocol is one datagram of ``KEY=VALUE`` lines to the unix socket systemd names
in ``NOTIFY_SOCKET`` (a leading ``@`` is the abstract namespace), so no library is
needed. Without the variable (not under systemd) nothing is sent.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Final

log = logging.getLogger(__name__)

NOTIFY_SOCKET: Final = "NOTIFY_SOCKET"


def notify(state: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. ``"READY=1"``) to systemd; False if not under systemd or it failed."""
    address = (os.environ if environ is None else environ).get(NOTIFY_SOCKET, "")
    if not address or address[0] not in "/@":
        return False  # unset, or a transport (vsock) this does not speak
    target = "\0" + address[1:] if address.startswith("@") else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall(state.encode())
    except OSError as err:
        log.warning("could not notify systemd (%s) of %s: %s", address, state.split("\n")[0], err)
        return False
    return True
