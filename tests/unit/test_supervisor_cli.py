"""The `reame` command line: subcommand table, delegation, config check, serve's pre-flight."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from reame.shared.config import CONFIG_PATH_ENV
from reame.supervisor import arbiter, cli


@pytest.fixture(autouse=True)
def no_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_PATH_ENV, raising=False)
    for name in ("REAME_MODEL_PATH", "REAME_WORKERS_COUNT"):
        monkeypatch.delenv(name, raising=False)


def fake_main(monkeypatch: pytest.MonkeyPatch, module: str, calls: list[list[str]]) -> None:
    fake = types.ModuleType(module)

    def main(argv: list[str]) -> int:
        calls.append(argv)
        return 7

    fake.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module, fake)


@pytest.mark.parametrize(
    ("argv", "module", "expected"),
    [
        (["dispatcher"], "reame.dispatcher.main", []),
        (["dispatcher", "--config", "a.conf"], "reame.dispatcher.main", ["--config", "a.conf"]),
        (["worker", "--index", "3"], "reame.worker.main", ["--index", "3"]),
        (["worker", "--config", "a.conf", "--index", "0"], "reame.worker.main", ["--config", "a.conf", "--index", "0"]),
        (["gateway", "--config", "a.conf"], "reame.gateway.main", ["--config", "a.conf"]),
        (["cachekeeper"], "reame.cachekeeper.main", []),
        (["cachekeeper", "--config", "a.conf"], "reame.cachekeeper.main", ["--config", "a.conf"]),
    ],
)
def test_process_subcommands_call_the_process_main(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], module: str, expected: list[str]
) -> None:
    calls: list[list[str]] = []
    fake_main(monkeypatch, module, calls)
    assert cli.main(argv) == 7
    assert calls == [expected]


def test_config_file_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    fake_main(monkeypatch, "reame.gateway.main", calls)
    monkeypatch.setenv(CONFIG_PATH_ENV, "/etc/reame.conf")
    cli.main(["gateway"])
    assert calls == [["--config", "/etc/reame.conf"]]


def test_worker_needs_an_index(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["worker"])
    assert exit_info.value.code == 2
    assert "--index" in capsys.readouterr().err


def test_unknown_or_missing_subcommand_is_a_usage_error() -> None:
    for argv in ([], ["frobnicate"], ["config"], ["cache"], ["cache", "shrink"], ["cache", "stats", "--timeout", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 2


def test_config_check_prints_the_effective_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    conf = tmp_path / "reame.conf"
    conf.write_text(f"[server]\nport = 9001\n[model]\npath = {model}\n")
    monkeypatch.setenv("REAME_WORKERS_COUNT", "3")
    assert cli.main(["config", "check", "--config", str(conf)]) == 0
    out = capsys.readouterr().out
    assert "[server]\nhost = 127.0.0.1\nport = 9001\n" in out
    assert "[workers]\ncount = 3\n" in out
    assert "# worker processes: 3" in out
    assert f"# model file: {model}" in out


def test_config_check_reports_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "reame.conf"
    conf.write_text("[server]\nprot = 1\n")
    assert cli.main(["config", "check", "--config", str(conf)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("reame: ") and "unknown key 'prot'" in captured.err


def test_config_check_reports_a_missing_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REAME_MODEL_PATH", "/nonexistent/model.gguf")
    assert cli.main(["config", "check"]) == 2
    assert "reame: model.path = '/nonexistent/model.gguf': no such file" in capsys.readouterr().err


def test_serve_refuses_a_bad_config_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "reame.conf"
    conf.write_text("[server]\nport = 0\n")
    assert cli.main(["serve", "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("reame: ") and "port" in err


def test_serve_refuses_a_missing_model(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REAME_MODEL_PATH", "/nonexistent/model.gguf")
    assert cli.main(["serve"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_serve_refuses_plain_tcp_off_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(arbiter.Arbiter, "run", lambda self: pytest.fail("reame serve started its children"))
    conf = tmp_path / "reame.conf"
    conf.write_text("[dispatcher]\nbackend = tcp://192.0.2.1:5555\n")  # TEST-NET: never bound
    assert cli.main(["serve", "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert "tcp://192.0.2.1:5555" in err and "curve_server_key" in err and "allow_plain_tcp" in err


def test_serve_does_not_import_the_engine() -> None:
    # `reame serve` only supervises: importing the CLI and the arbiter must not pull llama_cpp.
    code = "import sys, reame.supervisor.cli, reame.supervisor.arbiter; print('llama_cpp' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.stdout.strip() == "False"


def test_the_command_line_builds_without_the_benchmarks_dependencies() -> None:
    """`reame serve` on a plain install: nothing the bench extra brings may be needed to parse."""
    import subprocess
    import sys

    blocked = "import sys; sys.modules.update(dict.fromkeys(['openai', 'httpx', 'matplotlib', 'tqdm']))"
    script = f"{blocked}; from reame.supervisor import cli; cli.build_parser().parse_args(['serve'])"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
