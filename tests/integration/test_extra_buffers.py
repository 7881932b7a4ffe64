"""The real probe of llama.cpp's extra buffers, and a model that decodes whatever it finds.

On most machines the probe is skipped (no AMX in the build) or passes; on a VM that
advertises AMX and faults on it, the probe's child dies and the model loads without
extra buffers. Either way the model decodes.
"""

from __future__ import annotations

import numpy as np
import pytest

from reame.shared.config import load
from reame.shared.model_file import ModelFileError, model_path
from reame.worker import extra_buffers
from reame.worker.model import Model


def test_a_model_asked_for_extra_buffers_decodes_whatever_the_cpu_does_with_them() -> None:
    try:
        path = model_path(load(None, {}))
    except ModelFileError as err:
        pytest.fail(f"the default model is missing: {err}")
    model = Model(path, 256, 64, 1, repack=True)
    try:
        assert model.repack == extra_buffers.usable(path)
        tokens = model.tokenize("The capital of France is", True)
        model.decode(tokens, 0, logits_last=True)
        assert np.isfinite(model.logits(-1)).all()
    finally:
        model.close()
