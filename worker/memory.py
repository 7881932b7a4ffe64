"""How a worker holds the model's weights in memory: llama.cpp's load mode, repacking, mlock."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Final

import llama_cpp

log = logging.getLogger(__name__)

# A GGUF file's header and metadata are not weights: locking most of the file is locking it.
LOCKED_ENOUGH: Final = 0.9


def load_mode(use_mmap: bool, use_mlock: bool) -> int:
    """Return llama.cpp's load mode for memory.use_mmap and memory.use_mlock."""
    if use_mmap:
        return llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK if use_mlock else llama_cpp.LLAMA_LOAD_MODE_MMAP
    return llama_cpp.LLAMA_LOAD_MODE_MLOCK if use_mlock else llama_cpp.LLAMA_LOAD_MODE_NONE


def model_params(use_mmap: bool, use_mlock: bool, repack: bool) -> Any:
    """Return llama.cpp's model parameters for memory.use_mmap, memory.use_mlock and memory.repack (CPU only)."""
    params = llama_cpp.llama_model_default_params()
    params.load_mode = load_mode(use_mmap, use_mlock)
    params.n_gpu_layers = 0
    # llama.cpp's "extra buffer types": on the CPU, its repacked weight layouts (CPU_REPACK).
    params.use_extra_bufts = repack
    return params


def status_bytes(field: str, status: Path = Path("/proc/self/status")) -> int | None:
    """Return a kB field of /proc/self/status (VmLck, RssAnon ...) in bytes, None where the kernel does not say."""
    try:
        for line in status.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def locked_bytes(status: Path = Path("/proc/self/status")) -> int | None:
    """Return this process's locked memory (VmLck), None where the kernel does not say."""
    return status_bytes("VmLck", status)


def check_locked(path: Path, locked: int | None) -> bool:
    """Log a warning with the fix if less than the model's weights are locked; False then.

    llama.cpp treats a failed mlock as a warning and serves anyway (the weights may
    then be paged out under memory pressure), and so does reame: it is not fatal.
    """
    size = path.stat().st_size
    if locked is None or locked >= size * LOCKED_ENOUGH:
        return True
    log.warning(
        "memory.use_mlock: only %d of the model's %d bytes are locked in RAM, so they may be paged out; "
        "raise the locked-memory limit: LimitMEMLOCK=infinity in the systemd unit, or `ulimit -l unlimited` "
        "(or a size above the model's) in the shell that starts reame; or set memory.use_mlock = false",
        locked, size,
    )
    return False
