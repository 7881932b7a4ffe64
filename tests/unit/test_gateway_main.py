"""`python -m reame.gateway`: gunicorn configuration and boot failures (no server is started)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from gunicorn.workers.gthread import ThreadWorker

from reame.gateway import main as gateway_main
from reame.gateway.http.auth import Keys
from reame.gateway.main import GatewayApplication
from reame.shared import config
from reame.shared.lifecycle import EXIT_BOOT_FAILURE


@pytest.fixture(autouse=True)
def quiet_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    # logs.setup replaces the root handlers, which would take pytest's capture away.
    monkeypatch.setattr("reame.shared.logs.setup", lambda process, level, fmt="text": None)


def test_gunicorn_is_configured_from_reame_config() -> None:
    cfg = config.load(environ={
        "REAME_SERVER_HOST": "::1", "REAME_SERVER_PORT": "9999",
        "REAME_SERVER_GATEWAY_PROCESSES": "2", "REAME_SERVER_GATEWAY_THREADS": "5",
    })
    settings = GatewayApplication(cfg, Keys([])).cfg
    assert settings.bind == ["[::1]:9999"]
    assert (settings.workers, settings.threads) == (2, 5)
    assert settings.worker_class_str == "reame.gateway.http.http_worker.ReameThreadWorker"
    assert issubclass(settings.worker_class, ThreadWorker)  # gthread, hardened
    assert settings.accesslog is None and settings.control_socket_disable


def test_port_in_use_is_a_boot_failure(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = tmp_path / "reame.conf"
        conf.write_text(f"[server]\nport = {port}\n")
        assert gateway_main.main(["--config", str(conf)]) == EXIT_BOOT_FAILURE
    (record,) = [r for r in caplog.records if r.name == "gateway"]
    assert f"cannot listen on 127.0.0.1:{port}" in record.getMessage()


def test_bad_config_is_a_boot_failure(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "reame.conf"
    conf.write_text("[server]\nport = eighty\n")
    assert gateway_main.main(["--config", str(conf)]) == EXIT_BOOT_FAILURE
    assert "port" in caplog.text and "eighty" in caplog.text


def test_a_missing_key_file_is_a_boot_failure_naming_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "reame.conf"
    conf.write_text(f"[server]\napi_key_file = {tmp_path / 'no-such-keys'}\n")
    assert gateway_main.main(["--config", str(conf)]) == EXIT_BOOT_FAILURE
    (record,) = [r for r in caplog.records if r.name == "gateway"]
    assert f"server.api_key_file {tmp_path / 'no-such-keys'}" in record.getMessage()


def test_a_public_address_without_a_key_is_a_boot_failure(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "reame.conf"
    conf.write_text("[server]\nhost = 0.0.0.0\n")
    assert gateway_main.main(["--config", str(conf)]) == EXIT_BOOT_FAILURE
    assert "server.api_keys" in caplog.text and "server.allow_unauthenticated" in caplog.text
