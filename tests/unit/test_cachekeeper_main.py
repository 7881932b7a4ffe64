"""The cachekeeper process and `reame cache`: start, refuse a second owner, stop cleanly, report."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from reame.cachekeeper.store import PendingPut, Store
from reame.shared import protocol as p
from reame.shared.config import CONFIG_PATH_ENV
from reame.shared.kv_entry import EntryHeader, encode_payload
from reame.shared.lifecycle import EXIT_BOOT_FAILURE
from reame.shared.prefix import entry_key
from reame.supervisor import cli
from tests.waiting import PATIENCE_S, wait_for

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = PATIENCE_S  # an upper bound for a busy machine: only a failure waits it out
FP = b"fp"


@pytest.fixture(autouse=True)
def no_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_PATH_ENV, raising=False)
    for name in list(os.environ):
        if name.startswith("REAME_"):
            monkeypatch.delenv(name)


@pytest.fixture
def top() -> Iterator[Path]:
    # ipc:// paths are limited to about 100 bytes: keep them short.
    path = Path(tempfile.mkdtemp(prefix="reame-t"))
    yield path
    shutil.rmtree(path)


def write_config(top: Path, name: str = "reame.conf", **cache: str) -> Path:
    conf = top / name
    lines = [f"[server]\nrun_dir = {top / 'run'}\n", f"[cache]\ndir = {top / 'kv'}\n"]
    lines += [f"{key} = {value}\n" for key, value in cache.items()]
    conf.write_text("".join(lines))
    return conf


def store_entry(directory: Path, tokens: list[int], raw: bytes) -> str:
    """Write an entry as the cachekeeper would, with the store closed again afterwards."""
    with Store(directory, 10**9, 0) as store:
        payload = encode_payload(raw)
        header = EntryHeader.build(FP, "f16", tokens, 4, payload, created=1.0)
        pending = store.begin_put(header)
        assert isinstance(pending, PendingPut)
        pending.write(payload.data)
        store.commit(pending)
        return header.key()


def start(conf: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-P", "-m", "reame.cachekeeper", "--config", str(conf)], env=env,
                            stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen[str]) -> str:
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
        proc.wait()
    return err


def cache_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["cache", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_process_serves_reports_and_stops_cleanly(top: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = write_config(top)
    key = store_entry(top / "kv", [1, 2, 3, 4], bytes(5000))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = start(conf)
    socket_file = top / "run" / "cache.ipc"
    try:
        wait_for(lambda: socket_file.exists() or proc.poll() is not None, what="the socket")
        assert proc.poll() is None
        assert oct((top / "run").stat().st_mode & 0o777) == "0o700"

        # A second cachekeeper on the same directory cannot take it, whatever its address.
        other = write_config(top, "other.conf", address=f"ipc://{top}/other.ipc")
        second = subprocess.run([sys.executable, "-P", "-m", "reame.cachekeeper", "--config", str(other)],
                                cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=TIMEOUT_S)
        assert second.returncode == EXIT_BOOT_FAILURE
        assert "in use by another process" in second.stderr

        # A worker's lookup is answered by the process.
        context: zmq.Context[Any] = zmq.Context()
        worker = context.socket(zmq.DEALER)
        worker.setsockopt(zmq.LINGER, 0)
        worker.connect(f"ipc://{socket_file}")
        worker.send(p.encode(p.CacheLookup("l1", FP.hex(), [b"\0" * 16])))
        assert worker.poll(int(TIMEOUT_S * 1000))
        assert p.decode(worker.recv()) == p.CacheMiss("l1")
        worker.close()
        context.term()

        code, out, _ = cache_cli(capsys, "stats", "--config", str(conf), "--json")
        assert code == 0
        report = json.loads(out)
        assert report["source"] == "cachekeeper" and report["entries"] == 1
        assert (report["hits"], report["misses"], report["hit_rate"]) == (0, 1, 0.0)

        code, out, _ = cache_cli(capsys, "stats", "--config", str(conf))
        assert code == 0 and "entries: 1\n" in out and "hit rate: 0.0 %" in out

        code, out, _ = cache_cli(capsys, "purge", "--config", str(conf), "--json")
        assert code == 0 and json.loads(out)["removed"] == [key]
    finally:
        err = stop(proc)
    assert proc.returncode == 0, err
    assert "1 entries" in err and "stopped" in err
    assert not socket_file.exists()


def test_a_bad_config_or_an_unusable_directory_is_a_boot_failure(top: Path) -> None:
    conf = top / "bad.conf"
    conf.write_text("[cache]\nmax_size = lots\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-P", "-m", "reame.cachekeeper", "--config", str(conf)], env=env,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == EXIT_BOOT_FAILURE and "max_size" in result.stderr

    (top / "kv").write_text("a file where the directory should be")
    result = subprocess.run([sys.executable, "-P", "-m", "reame.cachekeeper", "--config", str(write_config(top))],
                            env=env,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == EXIT_BOOT_FAILURE and "cannot open the cache directory" in result.stderr


def test_cache_commands_work_without_a_cachekeeper(top: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = write_config(top)
    code, out, _ = cache_cli(capsys, "stats", "--config", str(conf), "--json")
    assert code == 0 and json.loads(out)["entries"] == 0
    assert not (top / "kv").exists()  # looking does not create anything

    good = store_entry(top / "kv", [1, 2, 3, 4], bytes(5000))
    bad = store_entry(top / "kv", [5, 6, 7, 8], bytes(6000))
    path = top / "kv" / f"{bad}.kv"
    damaged = bytearray(path.read_bytes())
    damaged[-3] ^= 0x01
    path.write_bytes(damaged)

    code, out, _ = cache_cli(capsys, "stats", "--config", str(conf), "--json")
    report = json.loads(out)
    assert code == 0 and report["source"] == "offline" and report["entries"] == 2 and report["hit_rate"] is None

    code, out, _ = cache_cli(capsys, "verify", "--config", str(conf))
    assert code == 1
    assert f"verify: deleted 1 entry that failed the check:\n  {bad}: payload checksum mismatch\n" in out
    code, out, _ = cache_cli(capsys, "verify", "--config", str(conf))
    assert code == 0 and "verify: all 1 entry intact" in out
    code, out, _ = cache_cli(capsys, "verify", "--config", str(conf), "--json")
    assert code == 0 and json.loads(out)["removed"] == []

    code, out, _ = cache_cli(capsys, "purge", "--config", str(conf))
    assert code == 0 and "purge: removed 1 entry" in out
    assert not (top / "kv" / f"{good}.kv").exists()
    assert entry_key(FP, [1, 2, 3, 4]) == good


def test_a_cachekeeper_that_does_not_answer_is_reported(top: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing listens at this tcp address, yet the directory is locked (as by a hung cachekeeper).
    conf = write_config(top, address="tcp://127.0.0.1:9")
    (top / "kv").mkdir()
    with Store(top / "kv", 10**9, 0):
        code, out, err = cache_cli(capsys, "stats", "--config", str(conf), "--timeout", "0.2")
    assert code == 1 and out == ""
    assert "owns" in err and "does not answer at tcp://127.0.0.1:9" in err
