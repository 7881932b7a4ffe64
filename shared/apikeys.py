"""What the configuration knows of API keys: their syntax, a type that hides them, public hosts.

The gateway reads the key file and matches requests (gateway.http.auth); the config
loader needs only these pure pieces, to parse ``server.api_keys`` and to refuse a
public address served without a key, in every process and in `reame config check`.
"""

from __future__ import annotations

import ipaddress


class Secrets(tuple[str, ...]):
    """API keys: a tuple whose repr never shows them, so printing or logging a Config keeps them out."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"({len(self)} keys, hidden)"

    __str__ = __repr__


def api_key_problem(text: str) -> str | None:
    """Say what makes ``text`` unusable as an API key, or None.

    Keys travel in HTTP headers and as comma lists: visible ASCII without commas.
    """
    if not text:
        return "an empty key"
    if any(not "!" <= c <= "~" or c == "," for c in text):
        return "a key with a space, comma or non-ASCII character"
    return None


def parse_api_keys(text: str) -> Secrets:
    """Parse a comma list of keys (``server.api_keys``); ValueError that never echoes them."""
    keys = [part.strip() for part in text.split(",") if part.strip()]
    if any(api_key_problem(k) for k in keys):
        raise ValueError("keys of visible ASCII characters separated by commas")
    return Secrets(keys)


def is_loopback(host: str) -> bool:
    """Tell whether ``host`` (server.host) only accepts connections from this machine."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # "" (every address) or a name that may resolve to anything


def exposure_problem(host: str, has_keys: bool, allow_unauthenticated: bool) -> str | None:
    """Say why serving ``host`` this way is refused (a public address open to anyone), or None."""
    if is_loopback(host) or has_keys or allow_unauthenticated:
        return None
    return (
        "is not a loopback address and no API key is configured: set server.api_keys or "
        "server.api_key_file, or set server.allow_unauthenticated = true to serve anyone who can reach the port"
    )
