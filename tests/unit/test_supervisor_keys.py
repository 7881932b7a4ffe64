"""`reame keys generate`: zmq certificates, secret files 0600, a client directory, and the config lines."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from zmq.auth import load_certificate, load_certificates

from reame.shared import endpoints
from reame.shared.config import load
from reame.supervisor import cli, keys


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generate_writes_a_server_pair_a_client_pair_and_the_accepted_clients(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    written = keys.generate(directory)
    names = sorted(str(path.relative_to(directory)) for path in written)
    assert names == ["authorized/client.key", "client.key", "client.key_secret", "server.key", "server.key_secret"]
    assert mode(directory) == 0o700
    for secret in ("server.key_secret", "client.key_secret"):
        assert mode(directory / secret) == 0o600
        public, secret_key = load_certificate(directory / secret)
        assert public and secret_key
    for public_file in ("server.key", "client.key", "authorized/client.key"):
        assert mode(directory / public_file) == 0o644
        assert load_certificate(directory / public_file)[1] is None  # no secret in a public file
    client_public, _ = load_certificate(directory / "client.key")
    assert set(load_certificates(directory / "authorized")) == {client_public}


def test_another_client_keeps_the_server_pair_and_nothing_is_overwritten(tmp_path: Path) -> None:
    keys.generate(tmp_path)
    server_before = (tmp_path / "server.key_secret").read_bytes()
    written = keys.generate(tmp_path, "worker-b")
    assert {path.name for path in written} == {"worker-b.key", "worker-b.key_secret"}
    assert (tmp_path / "server.key_secret").read_bytes() == server_before
    assert len(load_certificates(tmp_path / "authorized")) == 2
    with pytest.raises(keys.KeysError, match="already exist"):
        keys.generate(tmp_path, "worker-b")
    with pytest.raises(keys.KeysError, match="client name"):
        keys.generate(tmp_path, "../evil")


def test_printed_lines_configure_both_sides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["keys", "generate", str(tmp_path / "k")]) == 0
    conf = tmp_path / "reame.conf"
    conf.write_text(capsys.readouterr().out)
    config = load(conf, environ={})
    address = "tcp://10.0.0.1:5555"
    both = endpoints.link_keys(config.security, binds=[address], connects=[address])
    assert both.server_secret and both.client_secret and both.authorized == (tmp_path / "k" / "authorized").resolve()
