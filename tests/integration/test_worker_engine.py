"""The decode loop on the real default model (about 5 s in all).

Marked ``integration`` because it loads the 98 MB model; it needs no sockets.
The greedy-equality tests hold the engine to what ``llama_cpp.Llama`` produces
in-process for the same request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from reame.shared.config import load
from reame.shared.model_file import ModelFileError, model_path
from reame.shared.protocol import (
    ChatMessage,
    Delta,
    Done,
    Error,
    ErrorCode,
    FinishReason,
    Generate,
    Message,
    SamplingParams,
)
from reame.worker import extra_buffers
from reame.worker.engine import Engine
from reame.worker.kv import MIN_FRESH
from reame.worker.model import DecodeError, Model

pytestmark = pytest.mark.integration

N_CTX = 512
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
BAN_EOG = [(0, -100.0), (2, -100.0)]  # <|endoftext|> and <|im_end|> in SmolLM2


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    try:
        path = model_path(load(None, {}))
    except ModelFileError as err:
        pytest.skip(str(err))
    loaded = Model(path, N_CTX, 512, 1)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def llama(model: Model) -> Any:
    llama_cpp = pytest.importorskip("llama_cpp")
    extra_buffers.llama_cpp_like_reame(model.path)
    return llama_cpp.Llama(str(model.path), n_ctx=N_CTX, n_threads=1, verbose=False)


@pytest.fixture
def engine(model: Model) -> Engine:
    engine = Engine(model)
    engine.kv.reset()
    return engine


def run(
    engine: Engine,
    sampling: SamplingParams = GREEDY,
    *,
    prompt: str | None = None,
    messages: list[ChatMessage] | None = None,
    cancel: threading.Event | None = None,
    deadline: float | None = None,
) -> tuple[str, list[Message]]:
    out: list[Message] = []
    request = Generate(
        "r1", sampling, deadline=time.time() + 60 if deadline is None else deadline,
        prompt=prompt, messages=messages,
    )
    engine.run(request, out.append, cancel or threading.Event())
    assert isinstance(out[-1], (Done, Error))
    assert all(isinstance(m, Delta) and m.text and m.tokens > 0 for m in out[:-1])
    return "".join(m.text for m in out if isinstance(m, Delta)), out


def done_of(out: list[Message]) -> Done:
    last = out[-1]
    assert isinstance(last, Done), last
    return last


def error_of(out: list[Message]) -> Error:
    last = out[-1]
    assert isinstance(last, Error), last
    return last


@pytest.mark.parametrize("prompt", ["The capital of France is", "def fibonacci(n):", "Hello 🙂 1, 2,"])
def test_greedy_completion_equals_llama_cpp_python(engine: Engine, llama: Any, prompt: str) -> None:
    text, out = run(engine, prompt=prompt)
    theirs = llama.create_completion(prompt, temperature=0, max_tokens=24, repeat_penalty=1.0)
    assert text == theirs["choices"][0]["text"]
    done = done_of(out)
    assert done.prompt_tokens == theirs["usage"]["prompt_tokens"]
    assert done.completion_tokens == theirs["usage"]["completion_tokens"]
    assert done.finish_reason.value == theirs["choices"][0]["finish_reason"]


@pytest.mark.parametrize(
    "messages",
    [
        [ChatMessage("user", "What is the capital of France?")],
        [ChatMessage("system", "You are terse."), ChatMessage("user", "Name three colors.")],
        [ChatMessage("user", "Hi"), ChatMessage("assistant", "Hello!"), ChatMessage("user", "Tell me a joke.")],
    ],
)
def test_greedy_chat_equals_llama_cpp_python(engine: Engine, llama: Any, messages: list[ChatMessage]) -> None:
    sampling = SamplingParams(temperature=0.0, max_tokens=48)
    text, out = run(engine, sampling, messages=messages)
    theirs = llama.create_chat_completion(
        [{"role": m.role, "content": m.content} for m in messages], temperature=0, max_tokens=48
    )
    assert text == theirs["choices"][0]["message"]["content"]
    assert done_of(out).prompt_tokens == theirs["usage"]["prompt_tokens"]
    assert "<|im_end|>" not in text


def test_seeded_sampling_equals_llama_cpp_python(engine: Engine, llama: Any) -> None:
    sampling = SamplingParams(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=1234, max_tokens=24)
    first, _ = run(engine, sampling, prompt="Once upon a time")
    again, _ = run(engine, sampling, prompt="Once upon a time")
    theirs = llama.create_completion(
        "Once upon a time", temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=1234,
        max_tokens=24, repeat_penalty=1.0,
    )
    assert first == again == theirs["choices"][0]["text"]


def test_second_request_reuses_the_prompt_prefix(engine: Engine) -> None:
    text1, out1 = run(engine, prompt="The capital of France is")
    text2, out2 = run(engine, prompt="The capital of France is")
    done1, done2 = done_of(out1), done_of(out2)
    assert text1 == text2
    assert done1.cached_tokens == 0
    assert done2.cached_tokens == done2.prompt_tokens - MIN_FRESH
    assert len(engine.kv) == done2.prompt_tokens + done2.completion_tokens - 1


def test_delta_token_counts_add_up(engine: Engine) -> None:
    _, out = run(engine, prompt="Emoji party: 🎉🎉🎉", sampling=SamplingParams(temperature=0, max_tokens=20))
    done = done_of(out)
    assert done.finish_reason is FinishReason.LENGTH
    assert done.completion_tokens == 20
    assert sum(m.tokens for m in out if isinstance(m, Delta)) == 20
    assert done.prompt_ms > 0 and done.generation_ms > 0


def test_stop_string_ends_the_text_before_it(engine: Engine) -> None:
    full, _ = run(engine, prompt="1, 2, 3, 4,")
    stop = full[6:9]
    assert stop and stop in full
    text, out = run(engine, SamplingParams(temperature=0, max_tokens=24, stop=[stop]), prompt="1, 2, 3, 4,")
    assert text == full[: full.index(stop)]
    assert done_of(out).finish_reason is FinishReason.STOP


def test_logit_bias_forces_a_token(engine: Engine, model: Model) -> None:
    (token,) = model.tokenize(" banana", add_special=False)
    sampling = SamplingParams(temperature=0, max_tokens=1, logit_bias=[(token, 100.0)])
    text, _ = run(engine, sampling, prompt="The capital of France is")
    assert text == " banana"


def test_logit_bias_outside_the_vocabulary_is_refused(engine: Engine, model: Model) -> None:
    sampling = SamplingParams(logit_bias=[(model.n_vocab, 1.0)])
    _, out = run(engine, sampling, prompt="x")
    error = error_of(out)
    assert (error.code, error.param) == (ErrorCode.INVALID_REQUEST, "logit_bias")


def test_repeat_penalty_sees_the_prompt(engine: Engine) -> None:
    plain, _ = run(engine, prompt="1, 2, 3, 4, 5, 6,")
    penalised, _ = run(
        engine, SamplingParams(temperature=0, max_tokens=24, repeat_penalty=2.0), prompt="1, 2, 3, 4, 5, 6,"
    )
    assert plain.startswith(" 7,")
    assert not penalised.startswith(" 7,")  # "," and " " were in the prompt: penalised at once


def test_max_tokens_none_fills_the_context(engine: Engine, model: Model) -> None:
    prompt = "word " * 490
    n_prompt = len(model.tokenize(prompt, add_special=True))
    sampling = SamplingParams(temperature=0, max_tokens=None, logit_bias=BAN_EOG)
    _, out = run(engine, sampling, prompt=prompt)
    done = done_of(out)
    assert done.finish_reason is FinishReason.LENGTH
    assert done.completion_tokens == N_CTX - n_prompt


def test_prompt_longer_than_the_context_is_refused(engine: Engine) -> None:
    _, out = run(engine, prompt="word " * 600)
    error = error_of(out)
    assert (error.code, error.param) == (ErrorCode.CONTEXT_LENGTH_EXCEEDED, "prompt")
    assert f"maximum context length is {N_CTX} tokens" in error.message


def test_prompt_plus_max_tokens_over_the_context_is_refused(engine: Engine) -> None:
    sampling = SamplingParams(temperature=0, max_tokens=N_CTX)
    _, out = run(engine, sampling, messages=[ChatMessage("user", "hi")])
    error = error_of(out)
    assert (error.code, error.param) == (ErrorCode.CONTEXT_LENGTH_EXCEEDED, "messages")
    assert f"{N_CTX} for the completion" in error.message


@pytest.mark.parametrize("both", [True, False])
def test_prompt_xor_messages(engine: Engine, both: bool) -> None:
    messages = [ChatMessage("user", "hi")] if both else None
    _, out = run(engine, prompt="x" if both else None, messages=messages)
    assert error_of(out).code is ErrorCode.INVALID_REQUEST


def test_cancelled_before_start(engine: Engine) -> None:
    cancel = threading.Event()
    cancel.set()
    _, out = run(engine, prompt="x", cancel=cancel)
    assert out == [Error("r1", ErrorCode.CANCELLED, "the request was cancelled")]


def test_cancel_midway_stops_generation(engine: Engine) -> None:
    cancel = threading.Event()
    out: list[Message] = []

    def send(message: Message) -> None:
        out.append(message)
        cancel.set()  # the client goes away after the first text

    sampling = SamplingParams(temperature=0, max_tokens=100, logit_bias=BAN_EOG)
    engine.run(Generate("r1", sampling, time.time() + 60, prompt="1, 2, 3,"), send, cancel)
    assert isinstance(out[0], Delta)
    assert len(out) == 2
    assert error_of(out).code is ErrorCode.CANCELLED


def test_deadline_passed_is_a_timeout(engine: Engine) -> None:
    _, out = run(engine, prompt="x", deadline=time.time() - 1)
    assert error_of(out).code is ErrorCode.TIMEOUT


def test_shutting_down(model: Model) -> None:
    engine = Engine(model, shutting_down=lambda: True)
    _, out = run(engine, prompt="x")
    assert error_of(out).code is ErrorCode.SHUTTING_DOWN


def test_decode_failure_is_internal_and_clears_the_cache(
    engine: Engine, model: Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(engine, prompt="The capital of France is")
    assert len(engine.kv) > 0

    def broken(*args: object) -> None:
        raise DecodeError("llama_decode returned -3")

    monkeypatch.setattr(model, "decode", broken)
    _, out = run(engine, prompt="The capital of France is not")
    assert error_of(out).code is ErrorCode.INTERNAL
    assert len(engine.kv) == 0


def test_small_batches_prefill_in_chunks(model: Model) -> None:
    small = Model(model.path, 256, 8, 1)
    try:
        engine = Engine(small)
        prompt = "The quick brown fox jumps over the lazy dog. " * 3
        sampling = SamplingParams(temperature=0, max_tokens=10, logit_bias=BAN_EOG)
        _, out = run(engine, sampling, prompt=prompt)
        done = done_of(out)
        assert done.prompt_tokens > 3 * 8
        assert done.finish_reason is FinishReason.LENGTH
        # The last sampled token is never evaluated: nothing follows it.
        assert len(engine.kv) == done.prompt_tokens + done.completion_tokens - 1
    finally:
        small.close()
