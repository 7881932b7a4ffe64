"""The systemd units in deploy/systemd: `systemd-analyze verify` passes, each is hardened as documented."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reame.shared.config import WorkersConfig, defaults

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
INSTALLED_REAME = "/opt/reame/venv/bin/reame"
HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
    "PrivateDevices": "yes", "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "RuntimeDirectory": "reame", "CacheDirectory": "reame", "User": "reame",
}


def unit_files() -> list[Path]:
    return sorted(UNITS.glob("*.service"))


def service(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser["Service"]


def test_there_are_units_for_one_vm_and_for_a_split_deployment() -> None:
    assert {p.name for p in unit_files()} == {
        "reame.service", "reame-dispatcher.service", "reame-gateway.service", "reame-cachekeeper.service",
        "reame-worker@.service",
    }


@pytest.mark.parametrize("path", unit_files(), ids=lambda p: p.name)
def test_each_unit_is_hardened(path: Path) -> None:
    unit = service(path)
    for key, value in HARDENING.items():
        assert unit.get(key) == value, f"{path.name}: {key}"
    assert "REAME_SERVER_RUN_DIR=%t/reame" in unit["Environment"]
    assert "REAME_CACHE_DIR=%C/reame/kv" in unit["Environment"]
    assert unit["ExecStart"].startswith(INSTALLED_REAME + " ")
    assert unit.get("RestartPreventExitStatus")  # a bad configuration does not loop
    text = path.read_text()
    assert "Wants=network-online.target" in text and "After=network-online.target" in text


def test_the_one_vm_unit_notifies_and_a_worker_may_lend_its_threads() -> None:
    assert service(UNITS / "reame.service")["Type"] == "notify"
    worker = service(UNITS / "reame-worker@.service")
    assert worker["LimitMEMLOCK"] == "infinity"
    # Lending is on by default: a worker pinned to one CPU would run its borrowed threads there.
    assert defaults(WorkersConfig).lend_threads
    assert "CPUAffinity" not in worker


def test_systemd_analyze_verify_passes_on_every_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (make install-test installs Debian's systemd as root)")
    # verify checks that ExecStart's program exists: point it at this venv's reame.
    reame = Path(sys.executable).with_name("reame")
    assert reame.exists()
    names = []
    for path in unit_files():
        (tmp_path / path.name).write_text(path.read_text().replace(INSTALLED_REAME, str(reame)))
        # A template is verified as an instance (%i is the worker's --index).
        names.append(path.name.replace("@.", "@0."))
    result = subprocess.run(
        [analyze, "verify", *(str(tmp_path / name) for name in names)],
        capture_output=True, text=True, timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert str(tmp_path) not in output, output  # systemd reports a bad line, even when it exits 0
