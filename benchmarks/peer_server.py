"""``python -m llama_cpp.server`` as it is, except where llama.cpp's AMX buffers crash.

On a machine where the CPU advertises AMX but the VM faults on it (worker.extra_buffers),
the peer would die at its first prompt, as reame's workers would; it gets the same
fallback (models loaded without extra buffers), so the two are compared on equal terms.
Elsewhere nothing is changed. Arguments are llama_cpp.server's own.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from reame.worker import extra_buffers


def main() -> None:
    args = sys.argv[1:]
    if "--model" in args:
        extra_buffers.llama_cpp_like_reame(Path(args[args.index("--model") + 1]))
    sys.argv[0] = "llama_cpp.server"
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
