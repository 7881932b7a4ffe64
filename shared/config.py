"""Configuration: one INI file, overridden by ``REAME_<SECTION>_<KEY>`` variables.

The schema below is the single place where keys, types and defaults live;
``config/reame.conf`` documents each of them (a unit test keeps the two in step).
An unknown key or a malformed value raises :class:`ConfigError` naming the key,
the value and what was expected, so start-up stops with a clear message.
"""

from __future__ import annotations

import configparser
import dataclasses
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

ENV_PREFIX: Final = "REAME_"
# Set by `reame serve` for its children so that they read the same file.
CONFIG_PATH_ENV: Final = "REAME_CONFIG"


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("an integer") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"from {lo}" + (f" to {hi}" if hi is not None else " up")
            raise ValueError(f"an integer {bounds}")
        return value

    return parse


def _float(lo: float | None = None, hi: float | None = None) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError("a number") from None
        if value != value or (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"from {lo}" + (f" to {hi}" if hi is not None else " up")
            raise ValueError(f"a number {bounds}")
        return value

    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError("one of " + ", ".join(options))
        return value

    return parse


_SIZE_UNITS: Final = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
                      "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def _size(text: str) -> int:
    """Parse a byte size such as ``20GB``, ``512MiB`` or ``1000000``."""
    value = text.strip().upper().replace(" ", "")
    number = value.rstrip("KMGTIB")
    unit = value[len(number):]
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    if unit not in _SIZE_UNITS or not amount >= 0:
        raise ValueError("a size in bytes such as 20GB, 512MiB or 1000000")
    return int(amount * _SIZE_UNITS[unit])


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0"):
        return False
    raise ValueError("true or false")


def _text(text: str) -> str:
    return text.strip()


def _address(text: str) -> str:
    value = text.strip()
    if value and not value.startswith(("ipc://", "tcp://")):
        raise ValueError("empty, or a ZeroMQ address starting with ipc:// or tcp://")
    return value


@dataclasses.dataclass(frozen=True)
class Key:
    parse: Callable[[str], Any]
    default: str


# section -> key -> (parser, default as written in the file)
SCHEMA: Final[dict[str, dict[str, Key]]] = {
    "server": {
        "host": Key(_text, "127.0.0.1"),
        "port": Key(_int(1, 65535), "8080"),
        "gateway_processes": Key(_int(1, 64), "1"),
        "gateway_threads": Key(_int(1, 1024), "32"),
        "max_body_bytes": Key(_int(1024), "8388608"),
        "request_timeout": Key(_float(1.0), "600"),
        "queue_size": Key(_int(0), "64"),
        "retry_after": Key(_int(1), "2"),
        "run_dir": Key(_text, ""),
    },
    "model": {
        "path": Key(_text, ""),
        "alias": Key(_text, ""),
        "n_ctx": Key(_int(0), "4096"),
        "n_batch": Key(_int(1), "512"),
    },
    "workers": {
        "count": Key(_int(0, 256), "0"),
        "threads": Key(_int(1, 256), "1"),
    },
    "dispatcher": {
        "frontend": Key(_address, ""),
        "backend": Key(_address, ""),
    },
    "sampling": {
        "temperature": Key(_float(0.0, 2.0), "1.0"),
        "top_p": Key(_float(0.0, 1.0), "1.0"),
        "top_k": Key(_int(0), "40"),
        "min_p": Key(_float(0.0, 1.0), "0.05"),
        "repeat_penalty": Key(_float(0.0), "1.0"),
        "repeat_last_n": Key(_int(-1), "64"),
        "chat_max_tokens": Key(_int(0), "0"),
        "completion_max_tokens": Key(_int(0), "16"),
    },
    "memory": {
        "kv_type": Key(_choice("f16", "q8_0", "q4_0"), "f16"),
    },
    "cache": {
        "enabled": Key(_bool, "true"),
        "dir": Key(_text, ""),
        "max_size": Key(_size, "20GB"),
        "min_free": Key(_size, "1GB"),
        "block_tokens": Key(_int(1, 4096), "64"),
        "min_tokens": Key(_int(1), "256"),
        "compression_level": Key(_int(-7, 19), "1"),
        "timeout": Key(_float(0.01), "1.0"),
        "address": Key(_address, ""),
    },
    "speculative": {
        "mode": Key(_choice("off", "lookup", "model"), "lookup"),
        "draft_min": Key(_int(1, 64), "1"),
        "draft_max": Key(_int(1, 64), "15"),
        "draft_model_path": Key(_text, ""),
    },
    "compress": {
        "mode": Key(_choice("off", "lossless", "facts", "query"), "lossless"),
        "min_tokens": Key(_int(0), "256"),
        "query_budget": Key(_int(16), "512"),
    },
    "logging": {
        "level": Key(_choice("debug", "info", "warning", "error"), "info"),
    },
}


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    host: str
    port: int
    gateway_processes: int
    gateway_threads: int
    max_body_bytes: int
    request_timeout: float
    queue_size: int
    retry_after: int
    run_dir: str


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    path: str
    alias: str
    n_ctx: int
    n_batch: int


@dataclasses.dataclass(frozen=True)
class WorkersConfig:
    count: int
    threads: int


@dataclasses.dataclass(frozen=True)
class DispatcherConfig:
    frontend: str
    backend: str


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repeat_penalty: float
    repeat_last_n: int
    chat_max_tokens: int
    completion_max_tokens: int


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    kv_type: str


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    enabled: bool
    dir: str
    max_size: int
    min_free: int
    block_tokens: int
    min_tokens: int
    compression_level: int
    timeout: float
    address: str


@dataclasses.dataclass(frozen=True)
class SpeculativeConfig:
    mode: str
    draft_min: int
    draft_max: int
    draft_model_path: str


@dataclasses.dataclass(frozen=True)
class CompressConfig:
    mode: str
    min_tokens: int
    query_budget: int


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    level: str


@dataclasses.dataclass(frozen=True)
class Config:
    server: ServerConfig
    model: ModelConfig
    workers: WorkersConfig
    dispatcher: DispatcherConfig
    sampling: SamplingConfig
    memory: MemoryConfig
    cache: CacheConfig
    speculative: SpeculativeConfig
    compress: CompressConfig
    logging: LoggingConfig
    source: str  # the file it came from, or "(defaults)"

    @property
    def run_dir(self) -> Path:
        """Where the ipc:// sockets live; one per port so servers never collide."""
        if self.server.run_dir:
            return Path(self.server.run_dir)
        return Path(tempfile.gettempdir()) / f"reame-{os.getuid()}-{self.server.port}"

    @property
    def frontend_address(self) -> str:
        return self.dispatcher.frontend or f"ipc://{self.run_dir}/frontend.ipc"

    @property
    def backend_address(self) -> str:
        return self.dispatcher.backend or f"ipc://{self.run_dir}/backend.ipc"

    @property
    def cache_address(self) -> str:
        return self.cache.address or f"ipc://{self.run_dir}/cache.ipc"

    @property
    def cache_dir(self) -> Path:
        """The store's directory: cache.dir, else $XDG_CACHE_HOME/reame/kv (~/.cache/reame/kv)."""
        if self.cache.dir:
            return Path(self.cache.dir).expanduser()
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "reame" / "kv"

    @property
    def worker_count(self) -> int:
        return self.workers.count or len(os.sched_getaffinity(0))


_SECTION_CLASSES: Final[dict[str, type[Any]]] = {
    "server": ServerConfig,
    "model": ModelConfig,
    "workers": WorkersConfig,
    "dispatcher": DispatcherConfig,
    "sampling": SamplingConfig,
    "memory": MemoryConfig,
    "cache": CacheConfig,
    "speculative": SpeculativeConfig,
    "compress": CompressConfig,
    "logging": LoggingConfig,
}


def load(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (defaults only if None), then apply environment overrides."""
    environ = os.environ if environ is None else environ
    raw: dict[str, dict[str, tuple[str, str]]] = {s: {} for s in SCHEMA}  # value, origin
    source = "(defaults)"
    if path is not None:
        source = str(path)
        parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        try:
            with open(path, encoding="utf-8") as handle:
                parser.read_file(handle)
        except OSError as err:
            raise ConfigError(f"cannot read config file {path}: {err.strerror}") from err
        except configparser.Error as err:
            raise ConfigError(f"config file {path} is not valid INI: {err}") from err
        for section in parser.sections():
            if section not in SCHEMA:
                raise ConfigError(
                    f"{path}: unknown section [{section}]; known sections: {', '.join(SCHEMA)}"
                )
            for key, value in parser.items(section):
                if key not in SCHEMA[section]:
                    raise ConfigError(
                        f"{path}: unknown key '{key}' in [{section}]; "
                        f"known keys: {', '.join(SCHEMA[section])}"
                    )
                raw[section][key] = (value, f"{path} [{section}] {key}")
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_PATH_ENV:
            continue
        env_section, env_key = _env_target(name)
        if env_section is None:
            continue
        if env_key is None:
            raise ConfigError(
                f"unknown environment variable {name}: [{env_section}] has no such key; "
                f"known keys: {', '.join(SCHEMA[env_section])}"
            )
        raw[env_section][env_key] = (value, f"environment variable {name}")

    sections: dict[str, Any] = {}
    for section, keys in SCHEMA.items():
        values: dict[str, Any] = {}
        for key, spec in keys.items():
            text, origin = raw[section].get(key, (spec.default, f"default [{section}] {key}"))
            try:
                values[key] = spec.parse(text)
            except ValueError as err:
                raise ConfigError(f"{origin} = {text!r}: expected {err}") from None
        sections[section] = _SECTION_CLASSES[section](**values)
    _check_speculative(sections["speculative"], raw["speculative"])
    return Config(source=source, **sections)


def _check_speculative(section: SpeculativeConfig, raw: dict[str, tuple[str, str]]) -> None:
    """Refuse speculative settings that contradict each other."""
    if section.draft_min > section.draft_max:
        text, origin = raw.get("draft_min", (str(section.draft_min), "default [speculative] draft_min"))
        raise ConfigError(f"{origin} = {text!r}: expected at most speculative.draft_max ({section.draft_max})")
    if section.mode == "model" and not section.draft_model_path:
        text, origin = raw.get("mode", (section.mode, "default [speculative] mode"))
        raise ConfigError(
            f"{origin} = {text!r}: expected speculative.draft_model_path to name a draft GGUF file with it"
        )


def _env_target(name: str) -> tuple[str | None, str | None]:
    """Map REAME_SERVER_PORT to ("server", "port"); (section, None) for a bad key."""
    rest = name[len(ENV_PREFIX):].lower()
    for section in SCHEMA:
        if rest.startswith(section + "_"):
            key = rest[len(section) + 1:]
            return section, key if key in SCHEMA[section] else None
    return None, None
