"""The [speculative] configuration, and which mode a request runs in."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import cast

import pytest

from reame.shared import config
from reame.shared.modes import SpeculativeMode
from reame.shared.protocol import Error, ErrorCode, Generate, Message, SamplingParams
from reame.worker.engine import Engine
from reame.worker.model import Model, ModelError
from reame.worker.speculative.adaptive import LookupController, ModelController, StepCosts
from reame.worker.speculative.loop import Tally
from reame.worker.speculative.setup import (
    PARAM,
    Speculation,
    SpeculationError,
    check_mode,
    from_config,
)


def test_defaults() -> None:
    section = config.load(None, environ={}).speculative
    assert section.mode in (SpeculativeMode.OFF, SpeculativeMode.LOOKUP)
    assert (section.draft_min, section.draft_max, section.draft_model_path) == (1, 15, "")


def test_environment_picks_the_mode() -> None:
    assert config.load(None, environ={"REAME_SPECULATIVE_MODE": "off"}).speculative.mode == SpeculativeMode.OFF


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("[speculative]\ndraft_min = 9\ndraft_max = 4\n", ["draft_min", "'9'", "at most speculative.draft_max (4)"]),
        ("[speculative]\nmode = model\n", ["mode", "'model'", "draft_model_path"]),
        ("[speculative]\nmode = fast\n", ["mode", "'fast'", "one of off, lookup, model"]),
        ("[speculative]\ndraft_max = 0\n", ["draft_max", "'0'", "from 1 to 64"]),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = tmp_path / "r.conf"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path, environ={})
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_check_mode() -> None:
    check_mode(None, has_draft=False)
    check_mode(SpeculativeMode.LOOKUP, has_draft=False)
    check_mode(SpeculativeMode.MODEL, has_draft=True)
    with pytest.raises(SpeculationError, match="draft_model_path"):
        check_mode(SpeculativeMode.MODEL, has_draft=False)
    with pytest.raises(SpeculationError, match=r"reame.speculative must be one of off, lookup, model; got 'fast'"):
        check_mode("fast", has_draft=True)


def test_resolve_takes_the_request_over_the_default() -> None:
    speculation = Speculation(SpeculativeMode.LOOKUP, 1, 15)
    assert speculation.resolve(None) == SpeculativeMode.LOOKUP
    assert speculation.resolve(SpeculativeMode.OFF) == SpeculativeMode.OFF
    with pytest.raises(SpeculationError):
        speculation.resolve(SpeculativeMode.MODEL)
    speculation.available = False  # a cache that cannot drop positions
    assert speculation.resolve(SpeculativeMode.LOOKUP) == SpeculativeMode.OFF


def test_model_mode_decodes_plainly_when_the_draft_model_cannot_pay() -> None:
    speculation = Speculation(SpeculativeMode.LOOKUP, 1, 15, draft=cast(Model, StubModel()))
    # Measured here: Qwen2.5-Coder-1.5B at one thread, its 0.5B draft at half the cost per token.
    speculation.costs = StepCosts.from_timings({1: 1.0, 2: 1.92, 4: 3.49, 8: 6.39, 16: 6.85}, draft=0.5)
    assert not speculation.model_pays
    assert speculation.resolve(SpeculativeMode.MODEL) == SpeculativeMode.OFF
    assert speculation.resolve(SpeculativeMode.LOOKUP) == SpeculativeMode.LOOKUP
    speculation.costs = StepCosts.from_timings({1: 1.0, 2: 1.1, 4: 1.2, 8: 1.5, 16: 2.0}, draft=0.1)
    assert speculation.model_pays
    assert speculation.resolve(SpeculativeMode.MODEL) == SpeculativeMode.MODEL


def test_controllers_and_counters() -> None:
    speculation = Speculation(SpeculativeMode.OFF, 2, 7, adaptive=False)
    lookup = speculation.controller(SpeculativeMode.LOOKUP)
    assert isinstance(lookup, LookupController)
    assert (lookup.draft_min, lookup.draft_max, lookup.adaptive, lookup.costs.draft) == (2, 7, False, 0.0)
    model = speculation.controller(SpeculativeMode.MODEL)
    assert isinstance(model, ModelController)
    speculation.count(Tally(steps=3, drafted=12, accepted=5), lookup)
    speculation.count(Tally(steps=1, drafted=2, accepted=2), lookup)
    counters = speculation.counters
    assert (counters.requests, counters.steps, counters.draft_tokens, counters.accepted_tokens) == (2, 4, 14, 7)


def test_lengths_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="draft_min <= draft_max"):
        Speculation(SpeculativeMode.LOOKUP, 5, 2)


def test_a_missing_draft_model_is_a_model_error(tmp_path: Path) -> None:
    loaded = config.load(None, environ={"REAME_SPECULATIVE_DRAFT_MODEL_PATH": str(tmp_path / "none.gguf")})
    with pytest.raises(ModelError, match=r"none\.gguf is not a file"):
        from_config(loaded, cast(Model, None))


class StubModel:
    """Just enough of a Model for an Engine that refuses a request before using the model."""

    bos = eos = -1
    can_shift = True

    def chat_template(self) -> str | None:
        return None

    def special_tokens(self, user_defined_only: bool = False) -> dict[str, int]:
        return {}


@pytest.mark.parametrize(
    ("speculation", "asked", "fragment"),
    [
        (None, SpeculativeMode.MODEL, "needs a draft model"),
        (Speculation(SpeculativeMode.LOOKUP, 1, 15), SpeculativeMode.MODEL, "needs a draft model"),
        (Speculation(SpeculativeMode.LOOKUP, 1, 15), "fast", "must be one of"),
        (None, "", "must be one of"),
    ],
)
def test_a_mode_the_worker_cannot_serve_is_an_invalid_request(
    speculation: Speculation | None, asked: str, fragment: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        engine = Engine(cast(Model, StubModel()), speculation=speculation)
    sent: list[Message] = []
    request = Generate("r", SamplingParams(), time.time() + 10, prompt="x", speculative=asked)
    engine.run(request, sent.append, threading.Event())
    assert len(sent) == 1
    error = sent[0]
    assert isinstance(error, Error)
    assert (error.code, error.param) == (ErrorCode.INVALID_REQUEST, PARAM)
    assert fragment in error.message
