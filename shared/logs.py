"""One logging format for every process, so the merged output of `reame serve` reads as one log.

``logging.format = json`` writes one JSON object per line instead, for journald
and log shippers. A record may carry structured fields (``extra={FIELDS: {...}}``):
the request log line does, so in JSON each of its facts is a field of its own
rather than text to parse back.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final

# The attribute of a LogRecord holding its structured fields (logging's ``extra``).
FIELDS: Final = "reame_fields"


class JSONFormatter(logging.Formatter):
    """Format a record as one JSON object: time, level, process, pid, logger, message, fields."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            # UTC: a log read on another machine needs no time zone.
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "process": self.process,
            "pid": record.process,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        # default=str: a field that is not JSON (a Path, an enum) must not lose the line; ASCII
        # escapes keep one record one line even for readers that split on U+2028.
        return json.dumps(line, default=str)



def setup(process: str, level: str, fmt: str = "text") -> None:
    """Log to stderr, each line tagged with the process role and pid; ``fmt`` text or json."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JSONFormatter(process))
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s [{process} %(process)d] %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
