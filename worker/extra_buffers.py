"""Whether llama.cpp's extra weight buffers (repacked layouts, AMX tiles) run on this machine.

Some VMs advertise Intel AMX in CPUID and grant the tile permission, yet fault on its
first instruction: on a Firecracker VM with a Xeon (``amx_int8`` in /proc/cpuinfo),
``ldtilecfg`` in libggml-cpu raises a general protection fault, and the process dies
of SIGSEGV at its first prefill. llama.cpp offers its AMX buffer type among the "extra
buffer types" (``use_extra_bufts``, reame's ``memory.repack``) whenever the build has
AMX, so there every worker would crash in a restart loop. The crash cannot be caught
in-process, so a child process tries first. Where it dies, this process refuses itself
the AMX tile permission (a seccomp filter on that one request: ggml then leaves AMX out
and keeps its repacked layouts), and where even that fails, models load without extra
buffers. Builds without AMX skip all this.

Run as ``python -m reame.worker.extra_buffers [--without-amx] MODEL.gguf`` the module is
the probe itself.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import platform
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
WITHOUT_AMX: Final = "--without-amx"
_AMX_FEATURE: Final = "AMX_INT8 = 1"

# The seccomp filter (classic BPF): arch_prctl(ARCH_REQ_XCOMP_PERM, ...) on x86-64 fails
# with EPERM, every other system call is allowed. Offsets are those of struct seccomp_data.
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2
_FILTER: Final = (
    (0x20, 0, 0, 4),  # load seccomp_data.arch
    (0x15, 0, 5, 0xC000003E),  # AUDIT_ARCH_X86_64, else allow
    (0x20, 0, 0, 0),  # load seccomp_data.nr
    (0x15, 0, 3, 158),  # __NR_arch_prctl, else allow
    (0x20, 0, 0, 16),  # load the low half of args[0]
    (0x15, 0, 1, 0x1023),  # ARCH_REQ_XCOMP_PERM, else allow
    (0x06, 0, 0, 0x00050001),  # SECCOMP_RET_ERRNO | EPERM
    (0x06, 0, 0, 0x7FFF0000),  # SECCOMP_RET_ALLOW
)


class _SockFilter(ctypes.Structure):
    _fields_ = (("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32))


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


def build_has_amx() -> bool:
    """Tell whether this llama.cpp build uses AMX (then its buffer type is among the extra ones)."""
    info: bytes = llama_cpp.llama_print_system_info()
    return _AMX_FEATURE in info.decode(errors="replace")


@functools.cache
def refuse_amx() -> bool:
    """Refuse this process (and its children) the AMX tile permission; tell whether it took.

    ggml asks for it (arch_prctl ARCH_REQ_XCOMP_PERM) before it offers its AMX buffer type
    and leaves AMX out when refused ("AMX is not ready to be used!" on stderr). ggml lists
    its extra buffer types once per process, at the first model load or computation, so
    this must come before either. Also sets no_new_privs, which seccomp requires.
    """
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    program = (_SockFilter * len(_FILTER))(*(_SockFilter(*row) for row in _FILTER))
    fprog = _SockFprog(len(_FILTER), program)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return bool(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0)


def _survives(path: Path, *options: str) -> bool:
    """Run the probe in a child; False if it died of a signal or hung."""
    command = [sys.executable, "-m", "reame.worker.extra_buffers", *options, str(path)]
    try:
        probe = subprocess.run(command, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False
    # A failure of its own (a file llama.cpp cannot load) is the real load's to report.
    return probe.returncode >= 0


@functools.cache
def usable(path: Path) -> bool:
    """Tell whether ``path`` may load with extra buffers in this process (probed once per process and file).

    Call it before this process's first llama.cpp model load or computation: it may
    refuse the process AMX (see :func:`refuse_amx`).
    """
    if not build_has_amx() or _survives(path):
        return True
    if _survives(path, WITHOUT_AMX) and refuse_amx():
        log.warning("llama.cpp's AMX kernels crash on this machine (the CPU advertises AMX but this VM does not "
                    "let it run): AMX is refused to this process; %s keeps llama.cpp's repacked layouts", path.name)
        return True
    log.warning("llama.cpp's extra buffers crash on this machine (AMX advertised, not usable): %s loads without "
                "them, as with memory.repack = false", path.name)
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
    if sys.argv[1] == WITHOUT_AMX and not refuse_amx():
        raise SystemExit(1)
    probe(Path(sys.argv[-1]))
