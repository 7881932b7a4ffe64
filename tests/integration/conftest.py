"""Start a real `reame serve` (real model, real processes, real ZeroMQ) for the tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness import Server, start_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One shared server with 2 workers for the tests that do not break it."""
    running = start_server(tmp_path_factory.mktemp("serve"))
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {left}"


@pytest.fixture(scope="session")
def reference_llama() -> Any:
    """The same model in-process through llama-cpp-python, for exact comparisons."""
    import llama_cpp

    from reame.shared.config import load
    from reame.shared.model_file import model_path
    from reame.worker import extra_buffers

    config = load(None, environ={})
    extra_buffers.llama_cpp_like_reame(model_path(config))
    return llama_cpp.Llama(
        model_path=str(model_path(config)), n_ctx=config.model.n_ctx, n_batch=config.model.n_batch,
        n_threads=1, n_threads_batch=1, verbose=False,
    )
