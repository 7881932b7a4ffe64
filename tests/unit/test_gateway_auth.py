"""API keys: the configuration, the key file, matching a request's headers, the cache scope."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from reame.gateway.http import auth
from reame.gateway.http.auth import Keys, cache_scope, key_id, load_keys, parse_key_file, presented_key
from reame.shared import config
from reame.shared.config import ConfigError

KEY_A = "sk-test-a-0123456789abcdef"
KEY_B = "sk-test-b-0123456789abcdef"


def server(**environ: str) -> config.ServerConfig:
    return config.load(environ={f"REAME_SERVER_{k.upper()}": v for k, v in environ.items()}).server


# -- configuration ---------------------------------------------------------------------


def test_the_key_list_is_split_on_commas_and_never_shown() -> None:
    keys = server(api_keys=f" {KEY_A} ,{KEY_B},, ").api_keys
    assert keys == (KEY_A, KEY_B)
    assert KEY_A not in repr(keys) and KEY_A not in str(keys) and "2 keys" in repr(keys)
    assert KEY_A not in repr(config.load(environ={"REAME_SERVER_API_KEYS": KEY_A}))


def test_a_malformed_key_list_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as raised:
        server(api_keys=f"{KEY_A},has space")
    assert "REAME_SERVER_API_KEYS" in str(raised.value) and KEY_A not in str(raised.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_hosts_need_no_key(host: str) -> None:
    assert server(host=host).host == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.5", "example.com"])
def test_a_public_host_without_a_key_is_refused(host: str) -> None:
    with pytest.raises(ConfigError) as raised:
        server(host=host)
    message = str(raised.value)
    assert "REAME_SERVER_HOST" in message
    assert "server.api_keys" in message and "server.allow_unauthenticated" in message


@pytest.mark.parametrize(
    "more", [{"api_keys": KEY_A}, {"api_key_file": "/some/keys"}, {"allow_unauthenticated": "true"}]
)
def test_a_public_host_serves_with_a_key_or_when_allowed(more: dict[str, str]) -> None:
    assert server(host="0.0.0.0", **more).host == "0.0.0.0"


# -- the key file ----------------------------------------------------------------------


def test_the_key_file_takes_one_key_a_line_with_comments() -> None:
    text = f"# keys for the team\n\n{KEY_A}\n  {KEY_B}   # the bot\n#{KEY_A}x\n"
    assert parse_key_file(text, "f") == [KEY_A, KEY_B]


def test_a_malformed_line_names_the_file_and_line_but_not_the_key() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_key_file(f"{KEY_A}\nsk-with space\n", "server.api_key_file /k")
    assert "server.api_key_file /k, line 2" in str(raised.value) and "sk-with" not in str(raised.value)


def test_keys_come_from_the_list_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"{KEY_B}\n")
    keys = load_keys(server(api_keys=KEY_A, api_key_file=str(path)))
    assert len(keys) == 2 and keys.match(KEY_A) and keys.match(KEY_B)
    assert len(load_keys(server())) == 0


@pytest.mark.parametrize("content", [None, "# no key here\n\n", b"\xff\xfe"])
def test_a_missing_empty_or_unreadable_key_file_is_a_config_error(tmp_path: Path, content: str | bytes | None) -> None:
    path = tmp_path / "keys"
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        load_keys(server(api_key_file=str(path)))
    assert f"server.api_key_file {path}" in str(raised.value)


# -- matching a request ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("authorization", "x_api_key", "presented"),
    [
        (f"Bearer {KEY_A}", None, KEY_A),
        (f"bearer   {KEY_A}  ", None, KEY_A),
        (None, KEY_B, KEY_B),
        (f"Bearer {KEY_A}", KEY_B, KEY_A),
        (f"Basic {KEY_A}", KEY_B, KEY_B),
        ("Bearer ", None, None),
        (KEY_A, None, None),
        (None, "  ", None),
        (None, None, None),
    ],
)
def test_presented_key(authorization: str | None, x_api_key: str | None, presented: str | None) -> None:
    assert presented_key(authorization, x_api_key) == presented


def test_match_names_the_tenant_and_refuses_near_misses() -> None:
    keys = Keys([KEY_A, KEY_B, KEY_A])
    a, b = keys.match(KEY_A), keys.match(KEY_B)
    assert a is not None and b is not None and a != b and len(keys) == 2
    for near in (KEY_A[:-1], KEY_A + "x", KEY_A.upper(), "", "é" * 3):
        assert keys.match(near) is None
    assert a.key_id == key_id(KEY_A) and len(a.key_id) == auth.KEY_ID_CHARS
    assert KEY_A not in repr(a) and KEY_A not in repr(keys) and a.scope != a.key_id


def test_key_id_is_the_start_of_the_sha256_an_operator_can_compute() -> None:
    # printf %s sk-test-a-0123456789abcdef | sha256sum
    assert key_id(KEY_A) == hashlib.sha256(KEY_A.encode()).hexdigest()[:8]


def test_short_keys_are_counted_for_a_warning() -> None:
    assert Keys(["ka", KEY_A]).short == 1


# -- cache scopes ----------------------------------------------------------------------


def test_cache_scope_is_shared_only_without_key_and_salt() -> None:
    a, b = Keys([KEY_A]).match(KEY_A), Keys([KEY_B]).match(KEY_B)
    assert a is not None and b is not None
    scopes = [cache_scope("", None), cache_scope(a.scope, None), cache_scope(b.scope, None),
              cache_scope("", "salt"), cache_scope(a.scope, "salt"), cache_scope(b.scope, "salt")]
    assert scopes[0] == "" and len(set(scopes)) == len(scopes)
    assert cache_scope(a.scope, "salt") == cache_scope(a.scope, "salt")
    assert KEY_A not in "".join(scopes)


@pytest.mark.parametrize(
    ("scope", "keys", "per_key"),
    [("auto", "", False), ("auto", KEY_A, True), ("shared", KEY_A, False), ("per_key", "", True)],
)
def test_per_key_scope(scope: str, keys: str, per_key: bool) -> None:
    loaded = config.load(environ={"REAME_CACHE_SCOPE": scope, "REAME_SERVER_API_KEYS": keys})
    assert auth.per_key_scope(loaded) is per_key
