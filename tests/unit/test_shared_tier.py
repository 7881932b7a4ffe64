"""The shared cache tier's pure parts: key names, the deepest hit, health and backoff, config, entry bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reame.cachekeeper import admin, entry, tier_remote
from reame.cachekeeper import tier_rules as rules
from reame.shared import config, kv_entry
from reame.shared import protocol as p
from reame.shared.kv_entry import CorruptEntry
from reame.shared.prefix import block_hashes, entry_key
from reame.supervisor import status
from tests.unit.entries import write_file

FP = b"model-fingerprint"
KEY_A = "a" * 32
KEY_B = "b" * 32


def test_keys_are_named_under_the_fleet_prefix() -> None:
    blocks = block_hashes(FP, list(range(12)), 4)
    assert rules.entry_name("fleet1:", KEY_A) == f"fleet1:e:{KEY_A}"
    assert rules.block_name("fleet1:", FP, blocks[0]) == f"fleet1:b:{FP.hex()}:{blocks[0].hex()}"
    assert rules.block_names("r:", FP, blocks, 1) == [rules.block_name("r:", FP, b) for b in blocks[1:]]
    assert rules.block_names("r:", FP, blocks, 3) == []


def test_candidates_are_deepest_first_each_entry_once_and_garbage_ignored() -> None:
    # Depths 3..8: A covers 3-5, B covers 6-7, depth 8 is absent, one value is not an entry key.
    found: list[bytes | str | None] = [KEY_A.encode(), b"junk", KEY_A.encode(), KEY_B.encode(), KEY_B, None]
    assert rules.candidates(found, 3) == [rules.Candidate(KEY_B, 7), rules.Candidate(KEY_A, 5)]
    assert rules.candidates([None, None], 1) == []
    assert rules.candidates([], 1) == []


def test_only_a_lookup_the_tier_could_answer_deeper_by_min_tokens_is_worth_a_probe() -> None:
    gain = rules.min_gain_blocks(256, 64)
    assert gain == 4
    assert rules.min_gain_blocks(1, 64) == 1 and rules.min_gain_blocks(65, 64) == 2
    assert rules.worth_probing(10, 6, gain)
    assert not rules.worth_probing(10, 7, gain)  # a question of < 256 tokens after a stored document
    assert not rules.worth_probing(0, 0, 1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_health_goes_down_once_backs_off_doubling_and_comes_back_once() -> None:
    clock = Clock()
    health = rules.Health(first_s=1.0, max_s=4.0)
    assert health.up and health.retry_in(clock()) is None
    assert health.failed(clock())  # took it down: log it
    assert not health.up and health.retry_in(clock()) == 1.0
    clock.now += 0.25
    assert health.retry_in(clock()) == 0.75
    clock.now += 1.0
    assert health.retry_in(clock()) == 0.0  # due
    assert not health.failed(clock())  # still down: not logged again
    assert health.retry_in(clock()) == 2.0
    for expected in (4.0, 4.0):  # capped
        assert not health.failed(clock())
        assert health.retry_in(clock()) == expected
    assert health.succeeded()  # back: log it
    assert health.up and not health.succeeded()
    assert health.failed(clock()) and health.retry_in(clock()) == 1.0  # the backoff starts over


def test_health_refuses_nonsense_limits() -> None:
    with pytest.raises(ValueError):
        rules.Health(first_s=0.0)
    with pytest.raises(ValueError):
        rules.Health(first_s=2.0, max_s=1.0)


def entry_bytes(tmp_path: Path, tokens: list[int]) -> tuple[kv_entry.EntryHeader, bytes]:
    payload = kv_entry.encode_payload(bytes(range(256)) * 64)
    header = kv_entry.EntryHeader.build(FP, "f16", tokens, 4, payload, created=1.0)
    path = tmp_path / (header.key() + entry.ENTRY_SUFFIX)
    write_file(path, header, payload.data)
    return header, path.read_bytes()


def test_an_entry_split_from_its_file_bytes_has_the_files_header_and_payload(tmp_path: Path) -> None:
    header, data = entry_bytes(tmp_path, list(range(10)))
    parsed, payload = entry.split_entry(data)
    assert parsed == header and parsed.key() == entry_key(FP, list(range(10)))
    assert bytes(payload) == data[len(data) - header.payload_len :]
    with entry.EntryReader(tmp_path / (header.key() + entry.ENTRY_SUFFIX)) as reader:
        assert reader.header_bytes() + b"".join(reader.chunks()) == data


@pytest.mark.parametrize("damage", ["truncated", "trailing", "header bit", "tiny", "empty"])
def test_damaged_entry_bytes_are_refused(tmp_path: Path, damage: str) -> None:
    _, data = entry_bytes(tmp_path, list(range(10)))
    bad = {
        "truncated": data[:-1], "trailing": data + b"\0", "tiny": data[:10], "empty": b"",
        "header bit": data[:30] + bytes([data[30] ^ 1]) + data[31:],
    }[damage]
    with pytest.raises(CorruptEntry):
        entry.split_entry(bad)


def test_a_payload_bit_flip_passes_the_split_and_fails_the_write(tmp_path: Path) -> None:
    _, data = entry_bytes(tmp_path, list(range(10)))
    flipped = data[:-5] + bytes([data[-5] ^ 0x10]) + data[-4:]
    parsed, payload = entry.split_entry(flipped)
    writer = entry.EntryWriter(tmp_path / "copy.kv", parsed)
    writer.write(payload)
    with pytest.raises(CorruptEntry, match="checksum"):
        writer.commit()
    assert not (tmp_path / "copy.kv").exists()


def test_the_report_round_trips_with_and_without_the_tier() -> None:
    shared = p.SharedTierReport(True, hits=2, misses=3, pushes=4, push_drops=1, bytes_fetched=10, bytes_pushed=20,
                                fetch_seconds=0.5, errors=1, corrupt=1)
    for tier in (shared, None):
        report = p.CacheReport("r", 1, 2, 3, 4, 5, 6, 7, 8, 9, shared=tier)
        assert p.decode(p.encode(report)) == report


def test_cache_stats_show_the_tier_in_json_and_as_lines() -> None:
    shared = p.SharedTierReport(False, hits=2, errors=1)
    outcome = admin.Outcome(p.CacheReport("r", 1, 2, 3, 4, 5, 6, 7, 8, 9, shared=shared), "cachekeeper")
    conf = config.load(None, environ={})
    fields = json.loads(json.dumps(admin.as_json(outcome, p.CacheCommand.STATS, conf)))
    assert fields["shared"]["up"] is False and fields["shared"]["hits"] == 2
    assert "shared tier: DOWN, hits: 2" in admin.render(outcome, p.CacheCommand.STATS, conf)
    without = admin.Outcome(p.CacheReport("r", 1, 2, 3, 4, 5, 6, 7, 8, 9), "cachekeeper")
    assert admin.as_json(without, p.CacheCommand.STATS, conf)["shared"] is None
    assert "shared tier" not in admin.render(without, p.CacheCommand.STATS, conf)


def test_reame_status_shows_the_tier_under_the_cache_line() -> None:
    report = p.CacheReport("r", 1, 2, 3, 4, 5, 6, 7, 8, 9, shared=p.SharedTierReport(True, hits=3, pushes=5))
    screen = status.render(status.Snapshot(None, report, True, None))
    assert "  shared tier: up, hits: 3, misses: 0" in screen and "pushes: 5" in screen
    assert "shared tier" not in status.render(status.Snapshot(None, p.CacheReport("r", *range(9)), True, None))


def test_redis_options_have_no_retries_of_their_own_and_tls_only_for_rediss() -> None:
    settings = tier_remote.Settings("rediss://h:6380", "r:", 0.3, "fleet", "pw", "/etc/ca.pem")
    options = tier_remote.client_options(settings)
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 0.3
    assert options["retry"].get_retries() == 0
    assert (options["username"], options["password"], options["ssl_ca_certs"]) == ("fleet", "pw", "/etc/ca.pem")
    plain = tier_remote.client_options(tier_remote.Settings("unix:///run/r.sock", "r:", 0.3))
    assert not {"username", "password", "ssl_ca_certs"} & set(plain)
    assert "pw" not in repr(settings)


def load(**cache: str) -> config.Config:
    return config.load(None, environ={f"REAME_CACHE_{name.upper()}": value for name, value in cache.items()})


def test_shared_tier_keys_default_to_off() -> None:
    c = load().cache
    assert (c.shared_url, c.shared_user, c.shared_password_file, c.shared_ca_file) == ("", "", "", "")
    assert (c.shared_prefix, c.shared_timeout) == ("reame:", 0.25)


@pytest.mark.parametrize("url", ["redis://cache.internal:6379", "rediss://10.0.0.5:6380/2", "unix:///run/redis/r.sock",
                                 "redis://[::1]:6379/"])
def test_shared_urls_accepted(url: str) -> None:
    assert load(shared_url=url).cache.shared_url == url


@pytest.mark.parametrize("url", ["http://h:6379", "redis://", "redis://h:99999", "redis://h:port", "redis://u:pw@h",
                                 "redis://user@h", "redis://h/db", "redis://h?db=1", "unix://relative.sock", "h:6379"])
def test_bad_shared_urls_are_refused_naming_the_key_and_never_showing_the_url(url: str) -> None:
    with pytest.raises(config.ConfigError, match="REAME_CACHE_SHARED_URL") as caught:
        load(shared_url=url)
    assert "(hidden)" in str(caught.value) and "pw" not in str(caught.value)


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("shared_prefix", "", "printable"), ("shared_prefix", "my fleet:", "printable"),
    ("shared_prefix", "x" * 65, "printable"), ("shared_timeout", "0", "number"), ("shared_timeout", "soon", "number"),
])
def test_bad_shared_values_are_refused_naming_the_key(name: str, value: str, problem: str) -> None:
    with pytest.raises(config.ConfigError, match=f"REAME_CACHE_{name.upper()}.*{problem}"):
        load(shared_url="redis://h:6379", **{name: value})


@pytest.mark.parametrize("name", ["shared_user", "shared_password_file", "shared_ca_file"])
def test_shared_settings_without_a_tier_are_refused(name: str) -> None:
    with pytest.raises(config.ConfigError, match=f"cache.{name} is set but cache.shared_url is not"):
        load(**{name: "x"})


def test_a_ca_file_needs_a_tls_url() -> None:
    with pytest.raises(config.ConfigError, match="rediss://"):
        load(shared_url="redis://h:6379", shared_ca_file="/etc/ca.pem")
    assert load(shared_url="rediss://h:6380", shared_ca_file="/etc/ca.pem").cache.shared_ca_file == "/etc/ca.pem"


def test_unknown_shared_key_in_the_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "reame.conf"
    path.write_text("[cache]\nshared_host = redis\n")
    with pytest.raises(config.ConfigError, match="unknown key 'shared_host' in \\[cache\\]"):
        config.load(path, environ={})
