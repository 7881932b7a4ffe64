"""One logging format for every process, so the merged output of `reame serve` reads as one log."""

from __future__ import annotations

import logging
import sys


def setup(process: str, level: str) -> None:
    """Log to stderr, each line tagged with the process role and pid."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s [{process} %(process)d] %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
