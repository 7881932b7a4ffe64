"""Configuration: one INI file, overridden by ``REAME_<SECTION>_<KEY>`` variables.

The section dataclasses below are the single place where keys, types, parsers and
defaults live (:data:`SCHEMA` is read off them); ``config/reame.conf`` documents each
key (a unit test keeps the two in step).
An unknown key or a malformed value raises :class:`ConfigError` naming the key,
the value and what was expected, so start-up stops with a clear message.
"""

from __future__ import annotations

import configparser
import dataclasses
import os
import tempfile
import typing
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from reame.shared.apikeys import Secrets, exposure_problem, parse_api_keys
from reame.shared.config_parsers import address as _address
from reame.shared.config_parsers import boolean as _bool
from reame.shared.config_parsers import choice as _choice
from reame.shared.config_parsers import integer as _int
from reame.shared.config_parsers import mode as _mode
from reame.shared.config_parsers import number as _float
from reame.shared.config_parsers import size as _size
from reame.shared.config_parsers import text as _text
from reame.shared.kv_entry import MAX_LEVEL, MIN_LEVEL
from reame.shared.modes import ChunkMode, CompressMode, SpeculativeMode

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ENV_PREFIX: Final = "REAME_"
# Set by `reame serve` for its children so that they read the same file.
CONFIG_PATH_ENV: Final = "REAME_CONFIG"


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


_Section = TypeVar("_Section", bound="DataclassInstance")


@dataclasses.dataclass(frozen=True)
class Key:
    """How a key's text is parsed, and its default as written in the file."""

    parse: Callable[[str], Any]
    default: str
    secret: bool = False  # an error message never shows the value


def key(parse: Callable[[str], Any], default: str, secret: bool = False) -> Any:
    """Declare a section's key: the dataclass field carries its parser and default (see SCHEMA)."""
    return dataclasses.field(metadata={"key": Key(parse, default, secret)})


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    host: str = key(_text, "127.0.0.1")
    port: int = key(_int(1, 65535), "8080")
    gateway_processes: int = key(_int(1, 64), "1")
    gateway_threads: int = key(_int(1, 1024), "32")
    max_body_bytes: int = key(_int(1024), "8388608")
    request_timeout: float = key(_float(1.0), "600")
    queue_size: int = key(_int(0), "64")
    retry_after: int = key(_int(1), "2")
    run_dir: str = key(_text, "")
    api_keys: Secrets = key(parse_api_keys, "", secret=True)  # noqa: RUF009
    api_key_file: str = key(_text, "")
    allow_unauthenticated: bool = key(_bool, "false")
    max_messages: int = key(_int(1), "1024")
    read_timeout: float = key(_float(0.1), "20")
    read_deadline: float = key(_float(0.1), "30")
    max_connections_per_client: int = key(_int(0), "0")
    cors_origins: str = key(_text, "")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    path: str = key(_text, "")
    alias: str = key(_text, "")
    n_ctx: int = key(_int(0), "4096")
    n_batch: int = key(_int(1), "512")
    special_tokens_in_prompt: bool = key(_bool, "true")


@dataclasses.dataclass(frozen=True)
class WorkersConfig:
    count: int = key(_int(0, 256), "0")
    threads: int = key(_int(1, 256), "1")
    lend_threads: bool = key(_bool, "true")


@dataclasses.dataclass(frozen=True)
class DispatcherConfig:
    frontend: str = key(_address, "")
    backend: str = key(_address, "")
    affinity_slack: float = key(_float(0.0, 100.0), "2.0")


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """A request's sampling defaults; shared.protocol.SamplingParams takes its defaults from here."""

    temperature: float = key(_float(0.0, 2.0), "1.0")
    top_p: float = key(_float(0.0, 1.0), "1.0")
    top_k: int = key(_int(0), "40")
    min_p: float = key(_float(0.0, 1.0), "0.05")
    repeat_penalty: float = key(_float(0.0), "1.0")
    repeat_last_n: int = key(_int(-1), "64")
    chat_max_tokens: int = key(_int(0), "0")
    completion_max_tokens: int = key(_int(0), "16")


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    kv_type: str = key(_choice("f16", "q8_0", "q4_0"), "f16")
    use_mmap: bool = key(_bool, "true")
    use_mlock: bool = key(_bool, "false")
    repack: bool = key(_bool, "true")


def _chunk_mode(text: str) -> ChunkMode:
    """off, parts or on; true and false (the key's values before parts existed) mean on and off."""
    value = text.strip().lower()
    legacy = {"true": ChunkMode.ON, "false": ChunkMode.OFF}
    return legacy[value] if value in legacy else _mode(ChunkMode)(value)


SHARED_SCHEMES: Final = ("redis", "rediss", "unix")
MAX_SHARED_PREFIX: Final = 64


def _shared_url(text: str) -> str:
    """An empty URL (no shared tier) or a redis://, rediss:// or unix:// one holding no password."""
    value = text.strip()
    if not value:
        return value
    expected = "empty, or a redis://host:port, rediss://host:port or unix:///path URL"
    try:
        url = urllib.parse.urlsplit(value)
        _ = url.port  # a port out of range or not a number raises here
    except ValueError:
        raise ValueError(expected) from None
    if url.scheme not in SHARED_SCHEMES:
        raise ValueError(expected)
    if url.password is not None or url.username is not None:
        raise ValueError(f"{expected}, without credentials (cache.shared_user, cache.shared_password_file)")
    if url.query or url.fragment:
        raise ValueError(f"{expected}, without options (the cache.shared_* keys hold them)")
    if url.scheme == "unix" and (url.netloc or not url.path.startswith("/")):
        raise ValueError(f"{expected} (unix:// needs an absolute path: unix:///run/redis/redis.sock)")
    if url.scheme != "unix" and (not url.hostname or (url.path not in ("", "/") and not url.path[1:].isdigit())):
        raise ValueError(f"{expected}, with a host and at most a database number (redis://host:6379/0)")
    return value


def _shared_prefix(text: str) -> str:
    value = text.strip()
    if not value or len(value) > MAX_SHARED_PREFIX or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"1 to {MAX_SHARED_PREFIX} printable characters without spaces, such as reame:")
    return value


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    enabled: bool = key(_bool, "true")
    dir: str = key(_text, "")
    max_size: int = key(_size, "20GB")
    min_free: int = key(_size, "1GB")
    block_tokens: int = key(_int(1, 4096), "64")
    min_tokens: int = key(_int(1), "256")
    compression_level: int = key(_int(MIN_LEVEL, MAX_LEVEL), "1")
    timeout: float = key(_float(0.01), "1.0")
    address: str = key(_address, "")
    scope: str = key(_choice("auto", "shared", "per_key"), "auto")
    answers: bool = key(_bool, "true")  # the answer cache (gateway.upstream.answers, cachekeeper.answers)
    answers_max_size: int = key(_size, "256MB")
    chunks: ChunkMode = key(_chunk_mode, "parts")  # noqa: RUF009  # which requests chunk mode reads (worker.chunk_plan)
    chunk_memory: int = key(_size, "256MB")  # per worker: chunk states held in RAM (worker.chunk_memory)
    # The shared tier (cachekeeper.tier). The URL is secret to error messages: a mistaken
    # password in it must not reach a log.
    shared_url: str = key(_shared_url, "", secret=True)
    shared_user: str = key(_text, "")
    shared_password_file: str = key(_text, "")
    shared_ca_file: str = key(_text, "")
    shared_prefix: str = key(_shared_prefix, "reame:")
    shared_timeout: float = key(_float(0.01, 60.0), "0.25")


@dataclasses.dataclass(frozen=True)
class SpeculativeConfig:
    # key() returns a dataclasses.field, which RUF009 cannot see through for an enum type.
    mode: SpeculativeMode = key(_mode(SpeculativeMode), "lookup")  # noqa: RUF009
    draft_min: int = key(_int(1, 64), "1")
    draft_max: int = key(_int(1, 64), "15")
    draft_model_path: str = key(_text, "")


@dataclasses.dataclass(frozen=True)
class CompressConfig:
    mode: CompressMode = key(_mode(CompressMode), "auto")  # noqa: RUF009
    min_tokens: int = key(_int(0), "256")
    query_budget: int = key(_int(16), "512")
    excerpt_budget: int = key(_int(16), "96")


@dataclasses.dataclass(frozen=True)
class SecurityConfig:
    """CURVE keys for the tcp:// links between processes (shared.endpoints reads the files)."""

    curve_server_key: str = key(_text, "")
    curve_authorized_dir: str = key(_text, "")
    curve_client_key: str = key(_text, "")
    curve_server_public: str = key(_text, "")
    allow_plain_tcp: bool = key(_bool, "false")


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    level: str = key(_choice("debug", "info", "warning", "error"), "info")
    format: str = key(_choice("text", "json"), "text")


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
    security: SecurityConfig
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


# section name -> its dataclass, in the order of Config's fields (and of the file)
_SECTION_CLASSES: Final[dict[str, type[Any]]] = {
    name: cls for name, cls in typing.get_type_hints(Config).items() if name != "source"
}
# section -> key -> Key (parser, default as written in the file), read off the dataclasses
SCHEMA: Final[dict[str, dict[str, Key]]] = {
    section: {f.name: f.metadata["key"] for f in dataclasses.fields(cls)} for section, cls in _SECTION_CLASSES.items()
}


def defaults(section: type[_Section]) -> _Section:
    """Return a section with every key at its default, e.g. ``defaults(SamplingConfig)``."""
    return section(**{f.name: f.metadata["key"].parse(f.metadata["key"].default) for f in dataclasses.fields(section)})


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
                shown = "(hidden)" if spec.secret else repr(text)
                raise ConfigError(f"{origin} = {shown}: expected {err}") from None
        sections[section] = _SECTION_CLASSES[section](**values)
    _check_speculative(sections["speculative"], raw["speculative"])
    _check_security(sections["security"])
    _check_shared(sections["cache"])
    _check_exposure(sections["server"], raw["server"])
    return Config(source=source, **sections)


def _check_exposure(section: ServerConfig, raw: dict[str, tuple[str, str]]) -> None:
    """Refuse to serve a non-loopback address to anyone without a key, unless asked to."""
    has_keys = bool(section.api_keys or section.api_key_file)
    problem = exposure_problem(section.host, has_keys, section.allow_unauthenticated)
    if problem is not None:
        text, origin = raw.get("host", (section.host, "default [server] host"))
        raise ConfigError(f"{origin} = {text!r} {problem}")


def _check_speculative(section: SpeculativeConfig, raw: dict[str, tuple[str, str]]) -> None:
    """Refuse speculative settings that contradict each other."""
    if section.draft_min > section.draft_max:
        text, origin = raw.get("draft_min", (str(section.draft_min), "default [speculative] draft_min"))
        raise ConfigError(f"{origin} = {text!r}: expected at most speculative.draft_max ({section.draft_max})")
    if section.mode == SpeculativeMode.MODEL and not section.draft_model_path:
        text, origin = raw.get("mode", (section.mode, "default [speculative] mode"))
        raise ConfigError(
            f"{origin} = {text!r}: expected speculative.draft_model_path to name a draft GGUF file with it"
        )


def _check_security(section: SecurityConfig) -> None:
    """Refuse half a key setting: each side needs its key and what it checks the peer against."""
    pairs = (("curve_server_key", "curve_authorized_dir"), ("curve_client_key", "curve_server_public"))
    for first, second in pairs:
        given = [name for name in (first, second) if getattr(section, name)]
        if len(given) == 1:
            missing = second if given[0] == first else first
            raise ConfigError(f"security.{given[0]} is set but security.{missing} is not: set both or neither")


def _check_shared(section: CacheConfig) -> None:
    """Refuse shared-tier settings that have no tier to apply to, and a CA for a link without TLS."""
    for name in ("shared_user", "shared_password_file", "shared_ca_file"):
        if getattr(section, name) and not section.shared_url:
            raise ConfigError(f"cache.{name} is set but cache.shared_url is not: set both or neither")
    if section.shared_ca_file and not section.shared_url.startswith("rediss://"):
        raise ConfigError("cache.shared_ca_file is set but cache.shared_url is not a rediss:// (TLS) URL")


def _env_target(name: str) -> tuple[str | None, str | None]:
    """Map REAME_SERVER_PORT to ("server", "port"); (section, None) for a bad key."""
    rest = name[len(ENV_PREFIX):].lower()
    for section in SCHEMA:
        if rest.startswith(section + "_"):
            key = rest[len(section) + 1:]
            return section, key if key in SCHEMA[section] else None
    return None, None
