"""A lone request gets every core, gives one back when another arrives, and its text does not change."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reame.shared.config import load
from reame.shared.model_file import ModelFileError, model_path
from reame.shared.protocol import ChatMessage, Delta, Done, Generate, Message, SamplingParams
from reame.worker.engine import Engine
from reame.worker.model import Model
from tests.harness import Server, start_server
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

DOCUMENT = "\n\n".join(
    f"Note {i}. The ferry to the island leaves at {7 + i % 9}:{15 * (i % 4):02d} from pier {i % 6 + 1}."
    for i in range(40)
)
PROMPTS = [
    [ChatMessage("system", DOCUMENT), ChatMessage("user", "When does the ferry leave from pier 3?")],
    [ChatMessage("user", "Write a haiku about a lighthouse.")],
    [ChatMessage("user", "Repeat exactly: the quick brown fox jumps over the lazy dog.")],
]


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    try:
        path = model_path(load(None, {}))
    except ModelFileError as err:
        pytest.skip(str(err))
    loaded = Model(path, 2048, 512, 1)
    yield loaded
    loaded.close()


def greedy(engine: Engine, messages: list[ChatMessage]) -> str:
    engine.kv.reset()
    out: list[Message] = []
    request = Generate("r", SamplingParams(temperature=0.0, max_tokens=40), time.time() + 300, messages=messages)
    engine.run(request, out.append, threading.Event())
    assert isinstance(out[-1], Done), out[-1]
    return "".join(m.text for m in out if isinstance(m, Delta))


def test_greedy_text_is_the_same_at_one_and_two_threads(model: Model) -> None:
    engine = Engine(model)
    engine.warm_up()
    model.use_threads(1)
    one = [greedy(engine, prompt) for prompt in PROMPTS]
    model.use_threads(2)
    two = [greedy(engine, prompt) for prompt in PROMPTS]
    assert model.threads == 2
    model.use_threads(1)
    assert one == two


def chat(server: Server, question: str, document: str = DOCUMENT) -> None:
    status, _, body = server.post_json("/v1/chat/completions", {
        "model": "m", "temperature": 0, "max_tokens": 16,
        "messages": [{"role": "system", "content": document}, {"role": "user", "content": question}],
    })
    assert status == 200, body


@pytest.fixture(scope="module")
def debug_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("threads"), logging_level="debug")
    yield running
    running.stop()


def thread_lines(server: Server) -> list[str]:
    lines = server.log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if "thread(s) from now on" in line]


def test_a_lone_request_borrows_the_idle_worker_s_core_and_gives_it_back(debug_server: Server) -> None:
    chat(debug_server, "When does the ferry leave from pier 1?")
    assert any("decoding with 2 thread(s)" in line for line in thread_lines(debug_server))
    seen = len(thread_lines(debug_server))
    # Two other documents at once: each needs a worker, and a long prefill overlaps the other.
    others = [DOCUMENT.replace("ferry", "train"), DOCUMENT.replace("ferry", "bus")]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda document: chat(debug_server, "Pier 2?", document), others))
    # The worker that had both cores went back to one once the second request arrived.
    assert wait_for(lambda: any("decoding with 1 thread(s)" in line for line in thread_lines(debug_server)[seen:]))


def test_threads_off_lends_nothing(tmp_path: Path) -> None:
    server = start_server(tmp_path, logging_level="debug", workers_lend_threads="false")
    try:
        chat(server, "When does the ferry leave from pier 4?")
        assert thread_lines(server) == []
    finally:
        server.stop()
