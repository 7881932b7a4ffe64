"""Fixtures shared by the unit tests, and the guard that keeps them free of the model."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
import zmq

from tests.unit.fakes import FakeDispatcher, make_app


@pytest.fixture(autouse=True)
def environment_kept() -> Iterator[None]:
    """Give back the environment each unit test found.

    Code under test sets variables for the processes it would start (the gateway's main
    sets REAME_CONFIG for its gunicorn workers): left behind, they would reach every
    server the integration tests start after the unit tests.
    """
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a unit test that loads a GGUF file: `make unit` must run without the model.

    Both the worker's Model and the gateway's vocabulary go through this one llama.cpp call.
    A path that is not a GGUF file (missing, or a fake) goes through: tests of the failure
    paths need llama.cpp's own refusal, and it reads no model.
    """
    try:
        llama_cpp = importlib.import_module("llama_cpp")
    except ImportError:
        yield
        return
    loads: list[bytes] = []
    real = llama_cpp.llama_model_load_from_file

    def refuse(path: bytes, params: Any) -> Any:
        if not _is_gguf(Path(path.decode())):
            return real(path, params)
        loads.append(path)
        raise AssertionError(f"a unit test loaded a model ({path!r}): it belongs in tests/integration")

    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", refuse)
    yield
    assert not loads, f"a unit test loaded a model: {loads}"


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(4) == b"GGUF"
    except OSError:
        return False


@pytest.fixture
def context() -> Iterator[zmq.Context[Any]]:
    ctx: zmq.Context[Any] = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture
def fake(context: zmq.Context[Any]) -> Iterator[FakeDispatcher]:
    dispatcher = FakeDispatcher(context)
    yield dispatcher
    dispatcher.stop()


@pytest.fixture
def client(fake: FakeDispatcher) -> falcon.testing.TestClient:
    return falcon.testing.TestClient(make_app(fake))
