"""The config schema, the documented file and the environment overrides agree."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from reame.shared import config

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "config" / "reame.conf"


def test_documented_file_lists_every_key_with_its_default() -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(CONF, encoding="utf-8")
    documented = {(s, k): v for s in parser.sections() for k, v in parser.items(s)}
    schema = {(s, k): spec.default for s, keys in config.SCHEMA.items() for k, spec in keys.items()}
    assert documented == schema


def test_documented_file_loads_to_the_defaults() -> None:
    assert config.load(CONF, environ={}).server == config.load(None, environ={}).server


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.conf"
    path.write_text("[server]\nport = 9000\n")
    loaded = config.load(path, environ={"REAME_SERVER_PORT": "8099", "REAME_MODEL_PATH": "/m.gguf"})
    assert loaded.server.port == 8099
    assert loaded.model.path == "/m.gguf"


def test_unrelated_environment_is_ignored() -> None:
    loaded = config.load(None, environ={"REAME_CONFIG": "/x", "REAME_OTHER_THING": "1", "HOME": "/"})
    assert loaded.server.port == 8080


@pytest.mark.parametrize(
    ("text", "environ", "fragments"),
    [
        ("[server]\nprot = 1\n", {}, ["unknown key 'prot'", "[server]"]),
        ("[serve]\nport = 1\n", {}, ["unknown section [serve]"]),
        ("[server]\nport = eighty\n", {}, ["[server] port", "'eighty'", "an integer"]),
        ("[server]\nport = 70000\n", {}, ["'70000'", "from 1 to 65535"]),
        ("[sampling]\ntemperature = 3\n", {}, ["temperature", "'3'", "from 0.0 to 2.0"]),
        ("[logging]\nlevel = loud\n", {}, ["level", "'loud'", "one of debug"]),
        ("[dispatcher]\nbackend = http://x\n", {}, ["backend", "ipc://"]),
        ("[security]\ncurve_server_key = /k\n", {}, ["curve_server_key", "curve_authorized_dir"]),
        ("", {"REAME_SECURITY_CURVE_SERVER_PUBLIC": "/k"}, ["curve_server_public", "curve_client_key"]),
        ("", {"REAME_SERVER_PROT": "1"}, ["REAME_SERVER_PROT"]),
        ("", {"REAME_WORKERS_COUNT": "-1"}, ["REAME_WORKERS_COUNT", "'-1'"]),
        ("not an ini file\n", {}, ["not valid INI"]),
    ],
)
def test_bad_config_names_key_value_and_expectation(
    tmp_path: Path, text: str, environ: dict[str, str], fragments: list[str]
) -> None:
    path = tmp_path / "r.conf"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path, environ=environ)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="cannot read"):
        config.load(tmp_path / "absent.conf", environ={})


def test_addresses_default_to_ipc_in_a_per_port_run_dir() -> None:
    loaded = config.load(None, environ={"REAME_SERVER_PORT": "8123"})
    assert loaded.frontend_address.startswith("ipc://")
    assert "8123" in loaded.frontend_address
    assert loaded.frontend_address != loaded.backend_address
    assert loaded.worker_count >= 1


@pytest.mark.parametrize(
    ("text", "size"),
    [("20GB", 20 * 10**9), ("512MiB", 512 * 2**20), ("1000000", 10**6), ("1.5 GB", 1_500_000_000), ("0", 0)],
)
def test_sizes_take_units(text: str, size: int) -> None:
    assert config.load(None, environ={"REAME_CACHE_MAX_SIZE": text}).cache.max_size == size


@pytest.mark.parametrize("text", ["lots", "20XB", "-1GB", "GB"])
def test_bad_sizes_are_rejected(text: str) -> None:
    with pytest.raises(config.ConfigError, match="REAME_CACHE_MAX_SIZE"):
        config.load(None, environ={"REAME_CACHE_MAX_SIZE": text})


def test_chunk_mode_parts_applies_only_to_a_content_sent_in_parts_and_a_request_decides_first() -> None:
    from reame.shared.config import load
    from reame.shared.modes import ChunkMode
    from reame.shared.protocol import ChatMessage

    assert load(None, environ={}).cache.chunks is ChunkMode.PARTS
    joined = [ChatMessage("user", "DOC A\n\nDOC B\n\nWhat?")]
    parts = [ChatMessage("user", "DOC A\n\nWhat?", breaks=(7,))]
    assert not ChunkMode.PARTS.applies(None, joined) and ChunkMode.PARTS.applies(None, parts)
    assert not ChunkMode.PARTS.applies(None, None)  # a raw completions prompt
    assert ChunkMode.ON.applies(None, joined) and not ChunkMode.OFF.applies(None, parts)
    assert ChunkMode.OFF.applies(True, joined) and not ChunkMode.ON.applies(False, parts)
    for old, new in (("true", ChunkMode.ON), ("false", ChunkMode.OFF), ("On", ChunkMode.ON)):
        assert load(None, environ={"REAME_CACHE_CHUNKS": old}).cache.chunks is new
