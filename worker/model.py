"""Own one llama.cpp model and its context through the low-level C API.

The high-level ``llama_cpp.Llama`` class is not used: it keeps an n_batch x n_vocab
float32 logits buffer (100 MB at n_batch 512) in every process. Here the weights
are memory-mapped, so N workers share them in the page cache, and the only
per-process memory is the context (KV cache and compute buffers).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import llama_cpp
import numpy as np
import numpy.typing as npt

from reame.worker import extra_buffers
from reame.worker.memory import check_locked, locked_bytes, model_params

log = logging.getLogger(__name__)

SEQ_ID: Final = 0  # the request's sequence: requests are served one at a time
# A second sequence, empty between operations: a stored chunk is read into it, moved to
# its position, then handed to SEQ_ID (llama_state_seq_set_data replaces a sequence whole).
SPARE_SEQ: Final = 1
# memory.kv_type -> the ggml type of both K and V cache tensors.
KV_TYPES: Final = {
    "f16": llama_cpp.GGML_TYPE_F16,
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
}
_PIECE_BUFFER: Final = 64

# enum ggml_log_level (ggml.h; llama_cpp/_logger.py has an older numbering) -> logging.
# Level 5 continues the previous line.
_GGML_LEVELS: Final = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_GGML_CONT: Final = 5
_llama_log = logging.getLogger("llama.cpp")
_backend_lock = threading.Lock()
_backend_ready = False


def step_threads(threads: int) -> int:
    """Threads for a one-token step (llama.cpp's n_threads; batches of more get all ``threads``).

    With passive waiting at llama.cpp's barriers (worker/__main__.py) every thread after
    the first sleeps and wakes at each of a step's few hundred operations, which a
    one-token step is too short to pay back: at 2 threads the default model decoded 31-37
    tokens/s against 66-69 on one, the 1.5B 19-20 against 22-24, while prompt batches read
    nearly twice as fast on two. Threads that spin (OMP_WAIT_POLICY=ACTIVE, a dedicated
    box) do gain from more, so they keep them all.
    """
    passive = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
    return 1 if passive else threads


class ModelError(RuntimeError):
    """The model or its context could not be created."""


class DecodeError(RuntimeError):
    """llama_decode failed; the KV cache content is no longer known."""


def needs_flash_attention(kv_type: str) -> bool:
    """Tell whether a KV cache type needs flash attention (llama.cpp's quantized V cache does)."""
    return kv_type != "f16"


@llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
def _forward_llama_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp prints hundreds of INFO lines per load; keep only warnings and errors.
    if level == _GGML_CONT:
        return
    py_level = _GGML_LEVELS.get(level, logging.DEBUG)
    if py_level >= logging.WARNING and _llama_log.isEnabledFor(py_level):
        message = text.decode("utf-8", errors="replace").rstrip()
        if message:
            _llama_log.log(py_level, "%s", message)


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_log_set(_forward_llama_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True


class Model:
    """A loaded GGUF model with one context: tokenize, decode, read pieces."""

    def __init__(
        self, path: Path, n_ctx: int, n_batch: int, threads: int, kv_type: str = "f16",
        *, use_mmap: bool = True, use_mlock: bool = False, repack: bool = True,
    ) -> None:
        """Load ``path`` and create a context; ``n_ctx`` 0 = the training context.

        ``use_mmap`` maps the weights (workers share them in the page cache);
        ``use_mlock`` pins them in RAM, and a failure to do so is logged with its fix.
        ``repack`` lets llama.cpp copy the weights it has faster kernels for (Q4_0, Q4_K,
        IQ4_NL, ... on AVX2/NEON) into its interleaved CPU_REPACK layout: private memory
        of each process, even when the file is mapped (see memory.repack); ``self.repack``
        says whether it was done (not where llama.cpp's extra buffers crash: worker.extra_buffers).
        """
        if kv_type not in KV_TYPES:
            raise ModelError(f"unknown KV cache type {kv_type!r}; expected one of {', '.join(KV_TYPES)}")
        if not os.access(path, os.R_OK):
            raise ModelError(f"cannot read model file {path}")
        # First: it may refuse this process AMX, which must precede any llama.cpp work.
        buffers_usable = extra_buffers.usable(path)
        _init_backend()
        self.path = path
        self.kv_type = kv_type
        self.flash_attn = needs_flash_attention(kv_type)
        self._model: Any = None
        self._ctx: Any = None
        self._batch: Any = None
        self._batch_size = 0
        self.repack = repack and buffers_usable
        params = model_params(use_mmap, use_mlock, self.repack)
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            self._model = None
            raise ModelError(f"llama.cpp could not load {path} (not a GGUF model it supports?)")
        if use_mlock:
            check_locked(path, locked_bytes())
        try:
            self._vocab = llama_cpp.llama_model_get_vocab(self._model)
            self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
            self.n_ctx_train: int = llama_cpp.llama_model_n_ctx_train(self._model)
            self._create_context(n_ctx or self.n_ctx_train, n_batch, threads)
        except BaseException:
            self.close()
            raise
        self.bos: int = llama_cpp.llama_vocab_bos(self._vocab)
        self.eos: int = llama_cpp.llama_vocab_eos(self._vocab)
        self._pieces: dict[int, bytes] = {}

    def _create_context(self, n_ctx: int, n_batch: int, threads: int) -> None:
        # As llama_cpp.Llama does: a batch never exceeds the context.
        n_batch = min(n_batch, n_ctx)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        # One stream of cells for both sequences: the spare's cells become the request's
        # without a copy, and SEQ_ID may use the whole context.
        params.n_seq_max = 2
        params.kv_unified = True
        params.n_threads = step_threads(threads)
        params.n_threads_batch = threads
        self._threads = self._threads_wanted = threads
        # Off is Llama's default too: "auto" may pick flash attention, which is slower on
        # CPU here (prefill 132 tok/s instead of 215); a quantized V cache requires it.
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.type_k = params.type_v = KV_TYPES[self.kv_type]
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            self._ctx = None
            raise ModelError(f"llama.cpp could not create a context of {n_ctx} tokens (out of memory?)")
        self.n_ctx: int = llama_cpp.llama_n_ctx(self._ctx)
        self.n_batch: int = n_batch
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._batch_size = n_batch

    @property
    def ctx(self) -> Any:
        """The raw llama_context pointer, for the sampler."""
        return self._ctx

    # -- vocabulary ------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool, parse_special: bool = False) -> list[int]:
        """Return the tokens of ``text``; special-token text (``<|im_start|>``) is read as such only if asked.

        Parsing specials is quadratic in llama.cpp on text full of them: callers with
        untrusted text split it with shared.token_text instead (worker.prompt_tokens).
        """
        data = text.encode("utf-8")
        capacity = len(data) + 8  # a token covers at least one byte, plus BOS/EOS
        tokens = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            tokens = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), tokens, capacity, add_special, parse_special)
            if n < 0:
                raise ModelError(f"tokenizing {len(data)} bytes failed ({n})")
        return list(tokens[:n])

    def special_tokens(self, user_defined_only: bool = False) -> dict[str, int]:
        """Return the text -> id of every token llama.cpp reads as special in a text (control, user-defined).

        ``user_defined_only``: those it reads even with ``parse_special`` off (added words, not markup).
        """
        special = llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        if not user_defined_only:  # what llama.cpp's parse_special adds (its cache_special_tokens)
            special |= llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        found: dict[str, int] = {}
        for token in range(self.n_vocab):
            if llama_cpp.llama_vocab_get_attr(self._vocab, token) & special:
                found.setdefault(self.token_text(token), token)
        return found

    @property
    def byte_level(self) -> bool:
        """True for byte-level BPE vocabularies, whose pre-tokenizer splits text before a space and a word."""
        return bool(llama_cpp.llama_vocab_type(self._vocab) == llama_cpp.LLAMA_VOCAB_TYPE_BPE)

    def framing(self) -> tuple[list[int], list[int]]:
        """Return the tokens ``add_special`` puts before and after a text (BOS, EOS) for this vocabulary."""
        head = [self.bos] if self.bos >= 0 and llama_cpp.llama_vocab_get_add_bos(self._vocab) else []
        tail = [self.eos] if self.eos >= 0 and llama_cpp.llama_vocab_get_add_eos(self._vocab) else []
        return head, tail

    def piece(self, token: int) -> bytes:
        """Return the bytes a token stands for in output text (special tokens: empty)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(_PIECE_BUFFER)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, _PIECE_BUFFER, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
        data = buf.raw[: max(n, 0)]
        self._pieces[token] = data
        return data

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <|im_end|>...)."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @property
    def vocab(self) -> Any:
        """The llama_vocab pointer, for samplers that read token texts (a grammar)."""
        return self._vocab

    def token_text(self, token: int) -> str:
        """Return a token's vocabulary text ("" for -1), e.g. "<|im_end|>"."""
        if token < 0:
            return ""
        raw: bytes = llama_cpp.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        """Return the GGUF's default chat template (``tokenizer.chat_template``), if any."""
        raw: bytes | None = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    @property
    def threads(self) -> int:
        """Return the threads the last decode ran with."""
        return self._threads

    def use_threads(self, threads: int) -> None:
        """Run decodes with ``threads`` threads from the next one on; safe to call from any thread.

        llama.cpp takes a new count between decodes, and its CPU kernels split work
        by rows, so the logits do not depend on it (checked bit for bit at 1, 2 and 3
        threads on the default model).
        """
        self._threads_wanted = threads

    # -- KV cache ----------------------------------------------------------------

    def decode(self, tokens: Sequence[int], start: int, logits_last: bool, logits_all: bool = False) -> None:
        """Evaluate ``tokens`` at positions ``start...`` (at most n_batch of them).

        ``logits_all`` asks for logits at every position (speculative verification),
        else only at the last one if ``logits_last``.
        """
        n = len(tokens)
        if not 0 < n <= self._batch_size:
            raise ValueError(f"decode takes 1 to {self._batch_size} tokens, got {n}")
        batch = self._batch
        batch.n_tokens = n
        token, pos, n_seq_id, seq_id, logits = (
            batch.token, batch.pos, batch.n_seq_id, batch.seq_id, batch.logits,
        )
        for i, tok in enumerate(tokens):
            token[i] = tok
            pos[i] = start + i
            n_seq_id[i] = 1
            seq_id[i][0] = SEQ_ID
            logits[i] = logits_all
        logits[n - 1] = logits_last or logits_all
        wanted = self._threads_wanted
        if wanted != self._threads:
            llama_cpp.llama_set_n_threads(self._ctx, step_threads(wanted), wanted)
            log.debug("decoding with %d thread(s) from now on", wanted)
            self._threads = wanted
        rc = llama_cpp.llama_decode(self._ctx, batch)
        if rc != 0:
            raise DecodeError(f"llama_decode returned {rc} for {n} tokens at position {start}")

    def logits(self, index: int) -> npt.NDArray[np.float32]:
        """Return the logits after the ``index``-th token of the last decode (-1: its last token).

        The array is a view of llama.cpp's buffer: valid until the next decode.
        """
        pointer = llama_cpp.llama_get_logits_ith(self._ctx, index)
        if not pointer:
            raise DecodeError(f"no logits for position {index} of the last batch")
        row: npt.NDArray[np.float32] = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))
        return row

    def truncate(self, length: int) -> bool:
        """Drop KV cells from position ``length`` on; False if the cache cannot do that."""
        return bool(llama_cpp.llama_memory_seq_rm(self._memory, SEQ_ID, length, -1))

    def positions(self) -> int:
        """Return one past the last position the sequence holds (0 when empty)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self._memory, SEQ_ID)) + 1

    def clear(self) -> None:
        """Empty the KV cache."""
        llama_cpp.llama_memory_clear(self._memory, True)

    # -- sequence state (the persistent KV cache) -------------------------------------

    def state_size(self, seq: int = SEQ_ID) -> int:
        """Return the bytes :meth:`save_state` would return now."""
        return int(llama_cpp.llama_state_seq_get_size(self._ctx, seq))

    def save_state(self, seq: int = SEQ_ID) -> bytearray:
        """Copy the KV state of a sequence (the cells of every position it holds)."""
        size = self.state_size(seq)
        # Filled in place through a ctypes view, so the state is copied out once.
        state = bytearray(size)
        view = (ctypes.c_uint8 * size).from_buffer(state)
        written = llama_cpp.llama_state_seq_get_data(self._ctx, view, size, seq)
        del view  # a live export would pin the bytearray's size
        if written != size:
            raise ModelError(f"llama_state_seq_get_data wrote {written} of {size} bytes")
        return state

    def restore_state(self, state: bytes | bytearray, seq: int = SEQ_ID) -> bool:
        """Replace a sequence's KV cells with a saved state; False if llama.cpp refused it.

        After a failure the cache may hold part of the state: the caller must clear it.
        """
        size = len(state)
        if size == 0:
            return False
        if isinstance(state, bytearray):
            source: Any = (ctypes.c_uint8 * size).from_buffer(state)
        else:
            # bytes are immutable, so no writable buffer: point at them without a copy.
            source = ctypes.cast(ctypes.c_char_p(state), ctypes.POINTER(ctypes.c_uint8))
        read = llama_cpp.llama_state_seq_set_data(self._ctx, source, size, seq)
        del source
        return bool(read == size)

    # -- moving cells (chunks placed at another position) --------------------------------

    @property
    def can_shift(self) -> bool:
        """Tell whether cached positions can be moved (not for recurrent or SWA-only memories)."""
        return bool(llama_cpp.llama_memory_can_shift(self._memory))

    def drop(self, start: int, end: int) -> bool:
        """Drop the request's positions [start, end); False if the cache cannot do that."""
        return bool(llama_cpp.llama_memory_seq_rm(self._memory, SEQ_ID, start, end))

    def place(self, state: bytes | bytearray, delta: int) -> bool:
        """Add a saved sequence state to the request's cells, its positions moved by ``delta``.

        The state is read into the spare sequence (reading replaces a sequence whole),
        moved there, and its cells handed over; RoPE is re-applied to the moved keys at
        the next decode. False if llama.cpp refused the state; the spare is empty after.
        """
        try:
            if not self.restore_state(state, SPARE_SEQ):
                return False
            llama_cpp.llama_memory_seq_add(self._memory, SPARE_SEQ, 0, -1, delta)
            llama_cpp.llama_memory_seq_cp(self._memory, SPARE_SEQ, SEQ_ID, -1, -1)
            return True
        finally:
            llama_cpp.llama_memory_seq_rm(self._memory, SPARE_SEQ, -1, -1)

    def close(self) -> None:
        """Free the batch, the context and the model (idempotent)."""
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model is not None:
            llama_cpp.llama_model_free(self._model)
            self._model = None
