"""The `reame` command line: one table of subcommands, each a function of its arguments.

Process subcommands import their package only when run, so that `reame serve`
(which just supervises) never imports llama_cpp or gunicorn.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Final

from reame.shared.config import CONFIG_PATH_ENV, SCHEMA, Config, ConfigError, load
from reame.shared.model_file import ModelFileError, model_path
from reame.shared.modes import CompressMode

EXIT_USAGE: Final = 2

Run = Callable[[argparse.Namespace], int]


def _config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE", default=os.environ.get(CONFIG_PATH_ENV) or None,
        help=f"configuration file (default: ${CONFIG_PATH_ENV}, else built-in defaults)",
    )


def _worker_arguments(parser: argparse.ArgumentParser) -> None:
    _config_argument(parser)
    parser.add_argument("--index", metavar="N", type=int, required=True, help="this worker's index, from 0")


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: its arguments and what runs it, or its own subcommands."""

    name: str
    help: str
    run: Run | None = None
    arguments: Callable[[argparse.ArgumentParser], None] = _config_argument
    subcommands: tuple[Command, ...] = ()


def _delegate(module: str) -> Run:
    """Run ``module.main(argv)`` with the arguments given to reame, importing it only now."""

    def run(args: argparse.Namespace) -> int:
        argv = ["--config", args.config] if args.config else []
        index = vars(args).get("index")  # workers only
        if index is not None:
            argv += ["--index", str(index)]
        code: int = importlib.import_module(module).main(argv)
        return code

    return run


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _cache_arguments(parser: argparse.ArgumentParser) -> None:
    _config_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument(
        "--timeout", metavar="SECONDS", type=_seconds,
        help="how long to wait for the running cachekeeper (default: 5 for stats, 60 for purge, 3600 for verify)",
    )


def _cache(command: str) -> Run:
    """Run one `reame cache` command, importing the cache modules (and zmq) only now."""

    def run(args: argparse.Namespace) -> int:
        from reame.cachekeeper import admin
        from reame.shared.protocol import CacheCommand

        try:
            config = load(args.config)
        except ConfigError as err:
            print(f"reame: {err}", file=sys.stderr)
            return EXIT_USAGE
        return admin.run(config, CacheCommand(command), json_output=args.json, timeout=args.timeout)

    return run


def _compress_arguments(parser: argparse.ArgumentParser) -> None:
    _config_argument(parser)
    parser.add_argument("file", metavar="FILE", help="the text to compress; - reads standard input")
    parser.add_argument(
        "--mode", choices=list(CompressMode), type=CompressMode, default=None,
        help="compression mode (default: compress.mode of the configuration)",
    )
    parser.add_argument("--question", default="", help="the question, for --mode query")
    parser.add_argument(
        "--stats", action="store_true",
        help="print one JSON line with the token counts before and after and the time taken, not the text",
    )


def _compress(args: argparse.Namespace) -> int:
    from reame.gateway.compress import cli as compress_cli

    return compress_cli.run(args.config, args.file, args.mode, args.question, args.stats)


def _keys_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="where to write the keys (created 0700 if needed)")
    parser.add_argument(
        "--client", metavar="NAME", default="client",
        help="name of the client pair to add (default: client); the server pair is kept if DIR has one",
    )


def _keys_generate(args: argparse.Namespace) -> int:
    from reame.supervisor import keys

    return keys.run(args.directory, args.client)


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    _config_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the screen")


def _status(args: argparse.Namespace) -> int:
    from reame.supervisor import status

    try:
        config = load(args.config)
    except ConfigError as err:
        print(f"reame: {err}", file=sys.stderr)
        return EXIT_USAGE
    return status.run(config, json_output=args.json)


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    from reame.benchmarks import cli

    cli.add_arguments(parser)


def _bench(args: argparse.Namespace) -> int:
    from reame.benchmarks import cli

    return cli.run(args)


def _serve(args: argparse.Namespace) -> int:
    from reame.supervisor.arbiter import serve

    return serve(args.config)


def _config_check(args: argparse.Namespace) -> int:
    try:
        config = load(args.config)
    except ConfigError as err:
        print(f"reame: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(render_config(config), end="")
    try:
        print(f"# model file: {model_path(config)}")
    except ModelFileError as err:
        print(f"reame: {err}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def render_config(config: Config) -> str:
    """Write ``config`` back as an INI file, with the values derived from it as comments."""
    lines = [f"# effective configuration: {config.source}, then REAME_* environment variables"]
    values = dataclasses.asdict(config)
    for section, keys in SCHEMA.items():
        lines += ["", f"[{section}]"]
        lines += [f"{key} = {values[section][key]}" for key in keys]
    lines += [
        "",
        f"# run directory: {config.run_dir}",
        f"# dispatcher frontend: {config.frontend_address}",
        f"# dispatcher backend: {config.backend_address}",
        f"# cache directory: {config.cache_dir}",
        f"# cachekeeper address: {config.cache_address}",
        f"# worker processes: {config.worker_count}",
    ]
    return "\n".join(lines) + "\n"


COMMANDS: Final[tuple[Command, ...]] = (
    Command("serve", "run the dispatcher, the workers and the gateway, and keep them running", _serve),
    Command("status", "one screen: workers, queue, cache, tokens saved since start", _status, _status_arguments),
    Command("dispatcher", "run only the dispatcher", _delegate("reame.dispatcher.main")),
    Command("worker", "run only one worker", _delegate("reame.worker.main"), _worker_arguments),
    Command("gateway", "run only the HTTP gateway", _delegate("reame.gateway.main")),
    Command("cachekeeper", "run only the cachekeeper (the persistent KV cache)", _delegate("reame.cachekeeper.main")),
    Command("cache", "inspect or clean the persistent KV cache", subcommands=(
        Command("stats", "print entries, size, hit rate and the other counters", _cache("stats"), _cache_arguments),
        Command("verify", "check every entry's checksums and delete the bad ones (exit 1 if any)",
                _cache("verify"), _cache_arguments),
        Command("purge", "delete every entry", _cache("purge"), _cache_arguments),
    )),
    Command("keys", "CURVE keys for the tcp:// links of a split deployment", subcommands=(
        Command("generate", "write a server key pair, a client key pair and the directory of accepted clients",
                _keys_generate, _keys_arguments),
    )),
    Command("compress", "print a document as the gateway's prompt compression rewrites it", _compress,
            _compress_arguments),
    Command("bench", "measure reame side by side with llama-cpp-python's server: tables and plots", _bench,
            _bench_arguments),
    Command("config", "inspect the configuration", subcommands=(
        Command("check", "print the effective configuration, or what is wrong with it", _config_check),
    )),
)


def _add_commands(parser: argparse.ArgumentParser, commands: Sequence[Command], depth: int) -> None:
    sub = parser.add_subparsers(dest=f"command_{depth}", metavar="COMMAND", required=True)
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        if command.subcommands:
            _add_commands(child, command.subcommands, depth + 1)
        else:
            command.arguments(child)
            child.set_defaults(run=command.run)


def build_parser() -> argparse.ArgumentParser:
    """Build the parser for every subcommand in :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="reame", description="An OpenAI-compatible LLM server for small CPU machines."
    )
    _add_commands(parser, COMMANDS, 0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `reame` subcommand; return the exit code."""
    args = build_parser().parse_args(argv)
    run: Run = args.run
    return run(args)
