"""`reame compress FILE`: show what the gateway's compression makes of a document.

Prints the compressed text, or with ``--stats`` one JSON line: the mode, the token
counts before and after (the served model's tokenizer) and the time compression took.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Final

from reame.gateway.compress import compress
from reame.gateway.compress.tokenizer import Tokenizer, TokenizerError
from reame.shared.config import ConfigError, load
from reame.shared.model_file import ModelFileError, model_path
from reame.shared.modes import CompressMode

EXIT_USAGE: Final = 2


def run(config_path: str | None, file: str, mode: CompressMode | None, question: str, stats: bool) -> int:
    """Compress ``file`` (``-``: standard input) and print the text or the statistics."""
    try:
        config = load(config_path)
        text = _read(file)
    except (ConfigError, UsageError) as err:
        print(f"reame: {err}", file=sys.stderr)
        return EXIT_USAGE
    mode = mode or config.compress.mode
    tokenizer: Tokenizer | None = None
    if stats or mode == CompressMode.QUERY:
        try:
            tokenizer = Tokenizer(model_path(config))
            tokenizer.load()
        except (ModelFileError, TokenizerError) as err:
            print(f"reame: cannot count tokens: {err}", file=sys.stderr)
            return EXIT_USAGE
    count = tokenizer.count if tokenizer else None
    start = time.perf_counter()
    compressed = compress(text, mode, question=question, budget=config.compress.query_budget, count=count)
    seconds = time.perf_counter() - start
    if not stats or tokenizer is None:
        sys.stdout.write(compressed if compressed.endswith("\n") or not compressed else compressed + "\n")
        return 0
    before, after = tokenizer.count(text), tokenizer.count(compressed)
    print(json.dumps({
        "file": file,
        "mode": mode,
        "tokens_before": before,
        "tokens_after": after,
        "reduction": round(1 - after / before, 4) if before else 0.0,
        "chars_before": len(text),
        "chars_after": len(compressed),
        "seconds": round(seconds, 6),
    }))
    return 0


class UsageError(Exception):
    """The input cannot be read."""


def _read(file: str) -> str:
    try:
        if file == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        return Path(file).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{file}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{file}: is a directory") from None
    except OSError as err:
        raise UsageError(f"{file}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{file}: not UTF-8 text ({err.reason} at byte {err.start})") from None
