"""Whether llama.cpp's extra weight buffers (repacked layouts, AMX tiles) run on this machine.

Some VMs advertise Intel AMX in CPUID and grant the tile permission, yet fault on its
first instruction: on a Firecracker VM with a Xeon (``amx_int8`` in /proc/cpuinfo),
``ldtilecfg`` in libggml-cpu raises a general protection fault, and the process dies
of SIGSEGV at its first prefill. llama.cpp offers its AMX buffer type among the "extra
buffer types" (``use_extra_bufts``, reame's ``memory.repack``) whenever the build has
AMX, so there every worker would crash in a restart loop. A child process tries it
first; where it dies, models load without extra buffers (the crash cannot be caught
in-process). Builds without AMX skip the probe.

Run as ``python -m reame.worker.extra_buffers MODEL.gguf`` the module is the probe itself.
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import llama_cpp
import llama_cpp.llama_cpp as raw

log = logging.getLogger(__name__)

# Loading a 1.5B model and decoding two tokens takes seconds; a probe that has not ended
# by then is stuck, and loading without extra buffers is the safe answer.
PROBE_TIMEOUT_S: Final = 300.0
_AMX_FEATURE: Final = "AMX_INT8 = 1"


def build_has_amx() -> bool:
    """Tell whether this llama.cpp build uses AMX (then its buffer type is among the extra ones)."""
    info: bytes = llama_cpp.llama_print_system_info()
    return _AMX_FEATURE in info.decode(errors="replace")


@functools.cache
def usable(path: Path) -> bool:
    """Tell whether ``path`` loads and decodes with extra buffers here (probed once per process and file)."""
    if not build_has_amx():
        return True
    command = [sys.executable, "-m", "reame.worker.extra_buffers", str(path)]
    try:
        probe = subprocess.run(command, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        log.warning("the probe of llama.cpp's extra buffers (AMX) on %s did not end in %.0f s: "
                    "loading without them (as memory.repack = false)", path.name, PROBE_TIMEOUT_S)
        return False
    if probe.returncode >= 0:
        # Success, or a failure of its own (a file llama.cpp cannot load): the real load reports that.
        return True
    log.warning("llama.cpp's AMX kernels crash on this machine (the probe died of signal %d: the CPU "
                "advertises AMX but this VM does not let it run): %s loads without extra buffers, as with "
                "memory.repack = false", -probe.returncode, path.name)
    return False


def llama_cpp_like_reame(path: Path) -> None:
    """Make ``llama_cpp.Llama`` in this process load as reame's workers do on this machine.

    llama-cpp-python's high-level class (the peer, in-process references) always asks for
    extra buffers; where they crash (see :func:`usable`) its default model parameters turn
    them off, process-wide. Elsewhere nothing changes.
    """
    if usable(path) or getattr(raw.llama_model_default_params, "reame_without_extra_buffers", False):
        return
    default = raw.llama_model_default_params

    def without_extra_buffers() -> Any:
        params = default()
        params.use_extra_bufts = False
        return params

    without_extra_buffers.reame_without_extra_buffers = True  # type: ignore[attr-defined]
    raw.llama_model_default_params = without_extra_buffers


def probe(path: Path) -> None:
    """Load ``path`` with extra buffers and decode two tokens; crash if the machine cannot."""
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.use_extra_bufts = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise SystemExit(1)
    context_params = llama_cpp.llama_context_default_params()
    context_params.n_ctx = context_params.n_batch = context_params.n_ubatch = 64
    context_params.n_threads = context_params.n_threads_batch = 1
    context = llama_cpp.llama_init_from_model(model, context_params)
    if not context:
        raise SystemExit(1)
    vocab = llama_cpp.llama_model_get_vocab(model)
    token = llama_cpp.llama_vocab_bos(vocab)
    token = token if token >= 0 else 0
    # Two tokens: the matrix kernels for a batch and, next, for a single row.
    for tokens in ([token, token], [token]):
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        if llama_cpp.llama_decode(context, llama_cpp.llama_batch_get_one(array, len(tokens))) != 0:
            raise SystemExit(1)
    llama_cpp.llama_free(context)
    llama_cpp.llama_model_free(model)


if __name__ == "__main__":
    probe(Path(sys.argv[1]))
