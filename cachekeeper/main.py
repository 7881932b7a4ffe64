"""Start the cachekeeper: ``python -m reame.cachekeeper [--config FILE]``."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import Final

from reame.cachekeeper.answers import SUBDIR as ANSWERS_SUBDIR
from reame.cachekeeper.answers import AnswerStore
from reame.cachekeeper.server import Keeper
from reame.cachekeeper.store import Store, StoreLocked
from reame.cachekeeper.tier import SharedTier
from reame.cachekeeper.tier_remote import RedisRemote, RemoteError, Settings
from reame.cachekeeper.tier_rules import min_gain_blocks
from reame.shared.config import Config
from reame.shared.endpoints import BindError, EndpointError, link_keys
from reame.shared.lifecycle import EXIT_BOOT_FAILURE, StopFlag, boot

log = logging.getLogger("cachekeeper")

MB: Final = 1e6


class StoreUnavailable(Exception):
    """The cache directory cannot be opened by this process."""


def open_store(config: Config) -> Store:
    """Open (creating it 0700 if needed) and lock the cache directory; StoreUnavailable if impossible."""
    directory = config.cache_dir
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Store(directory, config.cache.max_size, config.cache.min_free)
    except StoreLocked as err:
        raise StoreUnavailable(f"{err} (is another cachekeeper running?)") from err
    except (OSError, sqlite3.Error, ValueError) as err:
        raise StoreUnavailable(f"cannot open the cache directory {directory}: {err}") from err


def open_answers(config: Config) -> AnswerStore | None:
    """Open the answer cache beside the KV store; None when it is off or unusable (answers are optional)."""
    if not config.cache.answers:
        return None
    try:
        return AnswerStore(config.cache_dir / ANSWERS_SUBDIR, config.cache.answers_max_size)
    except OSError as err:
        log.warning("serving without the answer cache: %s", err)
        return None


def shared_settings(config: Config) -> Settings:
    """Return how to reach the shared tier; OSError if its password file cannot be read."""
    c = config.cache
    password = ""
    if c.shared_password_file:
        with open(c.shared_password_file, encoding="utf-8") as handle:
            password = handle.read().strip()
    return Settings(c.shared_url, c.shared_prefix, c.shared_timeout, c.shared_user, password, c.shared_ca_file)


def open_shared(config: Config, store: Store) -> SharedTier | None:
    """Set up the shared tier (not yet started); None when it is off or unusable (it is optional)."""
    if not config.cache.shared_url:
        return None
    try:
        remote = RedisRemote(shared_settings(config))
    except (OSError, UnicodeDecodeError, RemoteError) as err:
        log.error("serving without the shared cache tier: %s", err)
        return None
    gain = min_gain_blocks(config.cache.min_tokens, config.cache.block_tokens)
    return SharedTier(store, remote, config.cache.shared_url, min_gain=gain)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cachekeeper until SIGTERM/SIGINT; return the process exit code."""
    booted = boot(
        "cachekeeper",
        "Keep the persistent KV cache: serve stored prompt states to workers and store new ones.",
        argv,
    )
    if booted is None:
        return EXIT_BOOT_FAILURE
    _, config = booted
    stop = StopFlag()
    stop.install()
    try:
        keys = link_keys(config.security, binds=(config.cache_address,))
        store = open_store(config)
    except (EndpointError, StoreUnavailable) as err:
        log.error("cannot start: %s", err)
        return EXIT_BOOT_FAILURE
    shared = open_shared(config, store)
    keeper = Keeper(
        store, config.cache_address, block_tokens=config.cache.block_tokens, level=config.cache.compression_level,
        keys=keys, answers=open_answers(config), shared=shared,
    )
    try:
        keeper.bind()
    except BindError as err:
        log.error("cannot start: %s", err)
        keeper.close()
        return EXIT_BOOT_FAILURE
    stats = store.stats()
    log.info(
        "cache at %s: %d entries, %.1f MB of %.1f MB; listening on %s",
        store.directory, stats.entries, stats.bytes / MB, stats.max_bytes / MB, config.cache_address,
    )
    if shared is not None:
        log.info("shared cache tier: %s (keys under %r)", config.cache.shared_url, config.cache.shared_prefix)
    try:
        keeper.run(stop)
    finally:
        keeper.close()
    log.info("stopped")
    return 0
