"""Each systemd unit's ExecStart, run by hand as a service user without a home, with the unit's environment.

systemd itself is not running here (no PID 1 to start units), so this does what the
units do: the directories RuntimeDirectory= and CacheDirectory= would create, owned
by the user; the unit's Environment= lines; its ExecStart with only the install
prefix and the config path replaced; and `nobody` (home /nonexistent) as the user.
Then a request must be served: by reame.service alone, and by the four split units
together.
"""

from __future__ import annotations

import configparser
import http.client
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.harness import READY_TIMEOUT_S, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED_REAME = "/opt/reame/venv/bin/reame"
INSTALLED_CONFIG = "/etc/reame/reame.conf"
USER = "nobody"
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Account(NamedTuple):
    uid: int
    gid: int
    name: str
    home: str
    prefix: list[str]  # the command that switches to it


def as_whom(who: str) -> Account:
    """Return the account to run the units' commands as."""
    if who == "current user":
        me = pwd.getpwuid(os.geteuid())
        # Still without a home: HOME=/nonexistent, as for a system user.
        return Account(me.pw_uid, me.pw_gid, me.pw_name, "/nonexistent", [])
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the units' commands as another user")
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        pytest.skip(f"no user {USER!r} on this machine")
    prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
    # `reame serve` starts its children with its own interpreter: that must work as the user too.
    spawn = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    probe = subprocess.run([*prefix, sys.executable, "-c", spawn], capture_output=True, text=True)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"{USER} cannot run this venv's interpreter {sys.executable} (in a directory closed to it): {why}")
    return Account(user.pw_uid, user.pw_gid, user.pw_name, user.pw_dir, prefix)


@pytest.fixture
def root() -> Iterator[Path]:
    """A directory the service user can traverse (pytest's tmp_path is private to root)."""
    directory = Path(tempfile.mkdtemp(prefix="reame-units-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def service(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((UNITS / name).read_text())
    return parser["Service"]


class Unit:
    """One unit's ExecStart, started as systemd would, minus systemd."""

    def __init__(
        self, name: str, root: Path, user: Account, config: Path, instance: str = ""
    ) -> None:
        unit = service(name)
        specifiers = {"%t": str(root / "run"), "%C": str(root / "cache"), "%i": instance}

        def expand(text: str) -> str:
            return re.sub(r"%[tCi]", lambda m: specifiers[m.group()], text)

        for base, key in ((root / "run", "RuntimeDirectory"), (root / "cache", "CacheDirectory")):
            directory = base / unit[key]
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o700)
            os.chown(directory, user.uid, user.gid)
        env = {"PATH": SYSTEMD_PATH, "LANG": "C.UTF-8", "HOME": user.home, "USER": user.name}
        env.update(item.split("=", 1) for item in shlex.split(expand(unit["Environment"])))
        argv = [expand(arg) for arg in shlex.split(unit["ExecStart"])]
        assert argv[0] == INSTALLED_REAME and INSTALLED_CONFIG in argv
        argv[0] = str(Path(sys.executable).with_name("reame"))
        argv[argv.index(INSTALLED_CONFIG)] = str(config)
        self.log = root / f"{name}{instance}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [*user.prefix, *argv],
                env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait()


def config_file(root: Path, port: int) -> Path:
    """The shipped reame.conf with only the port and the worker count changed."""
    text = (ROOT / "config" / "reame.conf").read_text()
    text = re.sub(r"(?m)^port = 8080$", f"port = {port}", text)
    text = re.sub(r"(?m)^count = 0$", "count = 1", text)
    path = root / "reame.conf"
    path.write_text(text)
    path.chmod(0o644)
    return path


def serves_a_request(port: int, units: list[Unit]) -> None:
    def ready() -> bool:
        for unit in units:
            assert unit.proc.poll() is None, unit.log.read_text()[-5000:]
        try:
            return get(port, "/ready")[0] == 200
        except OSError:
            return False

    wait_for(ready, READY_TIMEOUT_S, interval=0.2, what="the gateway to be ready")
    body = json.dumps({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 200, answer
    assert answer["usage"]["completion_tokens"] >= 1


def get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


WHO = ["service user", "current user"]


@pytest.mark.parametrize("who", WHO)
def test_reame_service_serves_as_a_user_without_a_home(root: Path, who: str) -> None:
    whom = as_whom(who)
    port = free_port()
    unit = Unit("reame.service", root, whom, config_file(root, port))
    try:
        serves_a_request(port, [unit])
        assert any((root / "cache" / "reame" / "kv").iterdir())  # the store lives where CacheDirectory= is
    finally:
        code = unit.stop()
    assert code == 0, unit.log.read_text()[-5000:]


@pytest.mark.parametrize("who", WHO)
def test_the_split_units_serve_together(root: Path, who: str) -> None:
    whom = as_whom(who)
    port = free_port()
    config = config_file(root, port)
    units = [Unit("reame-dispatcher.service", root, whom, config),
             Unit("reame-cachekeeper.service", root, whom, config),
             Unit("reame-worker@.service", root, whom, config, instance="0"),
             Unit("reame-gateway.service", root, whom, config)]
    try:
        serves_a_request(port, units)
    finally:
        codes = [unit.stop() for unit in reversed(units)]
    assert codes == [0, 0, 0, 0], "\n".join(u.log.read_text()[-3000:] for u in units)
