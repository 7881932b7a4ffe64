"""Count tokens with the served model's own tokenizer, in the gateway and the CLI.

Only the vocabulary is loaded (llama.cpp's ``vocab_only`` model parameter: no weights,
no context): about 20 MB and 60 ms for the default model, a quarter of a second for a
1.5B one. It is loaded once per process, on first use, so a gateway that never sees a
long prompt never loads it. If it cannot be loaded the counts fall back to an estimate
(four bytes a token) and one warning is logged: the gateway keeps serving.

Text is counted as plain text (llama.cpp's ``parse_special`` off): message contents
are never special tokens (worker.prompt_tokens), and llama.cpp's special-token pass
is quadratic on text full of ``<|im_end|>``. :meth:`Tokenizer.min_tokens` gives a
lower bound for free, from the longest token of the vocabulary, so a prompt that
cannot fit the context is refused before anything else is done with it.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path
from typing import Any

from reame.gateway.compress import approximate_tokens
from reame.shared.token_text import SpecialSplitter, chunks

log = logging.getLogger(__name__)


def _drop_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """Drop llama.cpp's log lines: a vocabulary load prints a hundred of them."""


# llama_cpp.llama_log_callback's signature, built here so that importing this module
# does not import llama_cpp.
_QUIET = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(_drop_log)


class TokenizerError(RuntimeError):
    """The vocabulary could not be loaded."""


class Tokenizer:
    """The tokenizer of the GGUF model at ``path``, loaded on first use."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._vocab: Any = None
        self._model: Any = None
        self._failed = path is None
        self._max_token_bytes: int | None = None
        self._train_context: int | None = None
        self._added: SpecialSplitter | None = None

    def count(self, text: str) -> int:
        """Return how many tokens ``text`` is (no BOS/EOS), or an estimate if there is no vocabulary.

        As the worker tokenizes clients' text (worker.prompt_tokens): user-defined
        tokens split off first, the rest in chunks, so llama.cpp's quadratic
        special-token pass never sees a long text.
        """
        vocab = self._load()
        if vocab is None:
            return approximate_tokens(text)
        if self._added is None:
            self._added = SpecialSplitter(_user_defined(vocab))
        total = 0
        for part in self._added.split(text):
            total += 1 if isinstance(part, int) else sum(_count(vocab, piece) for piece in chunks(part))
        return total

    def min_tokens(self, n_bytes: int) -> int | None:
        """Return a number of tokens that ``n_bytes`` of UTF-8 text certainly reaches (None: no vocabulary).

        No token stands for more bytes than the longest one, so the text needs at
        least its bytes divided by that length (rounded up).
        """
        longest = self.max_token_bytes()
        return None if longest is None else -(-n_bytes // longest)

    def max_token_bytes(self) -> int | None:
        """Return the most bytes one token of the vocabulary stands for (its text or its piece), once."""
        vocab = self._load()
        if vocab is None:
            return None
        if self._max_token_bytes is None:
            self._max_token_bytes = _longest_token(vocab)
        return self._max_token_bytes

    def train_context(self) -> int | None:
        """Return the context the model was trained with (what model.n_ctx 0 means), from the GGUF metadata."""
        if self._load() is None:
            return None
        if self._train_context is None:
            self._train_context = _train_context(self._model)
        return self._train_context or None

    def chat_template(self) -> str | None:
        """Return the GGUF's default chat template (``tokenizer.chat_template``), the worker's too; None if none."""
        if self._load() is None:
            return None
        import llama_cpp

        raw: bytes | None = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def load(self) -> None:
        """Load the vocabulary now; raise TokenizerError if it cannot be (the CLI wants to know)."""
        if self._load() is None:
            raise TokenizerError(f"cannot load the vocabulary of {self.path}")

    def _load(self) -> Any:
        if self._vocab is not None or self._failed:
            return self._vocab
        with self._lock:
            if self._vocab is None and not self._failed:
                self._vocab = self._open()
                self._failed = self._vocab is None
        return self._vocab

    def _open(self) -> Any:
        try:
            import llama_cpp
        except ImportError as err:
            log.warning("cannot count tokens exactly (llama_cpp: %s); estimating", err)
            return None
        llama_cpp.llama_log_set(_QUIET, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._model:
            log.warning("cannot load the vocabulary of %s; estimating token counts", self.path)
            self._model = None
            return None
        return llama_cpp.llama_model_get_vocab(self._model)


def _longest_token(vocab: Any) -> int:
    """Scan the vocabulary once (about 50 ms for 49,152 tokens)."""
    import llama_cpp

    size = 1024
    buf = ctypes.create_string_buffer(size)
    longest = 1
    for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        piece = llama_cpp.llama_token_to_piece(vocab, token, buf, size, 0, True)
        text = llama_cpp.llama_vocab_get_text(vocab, token) or b""
        # A piece that does not fit says how long it is as a negative number.
        longest = max(longest, abs(piece), len(text))
    return longest


def _train_context(model: Any) -> int:
    """Read ``{architecture}.context_length`` (a vocabulary-only load has no hyperparameters); 0 if absent."""
    import llama_cpp

    buf = ctypes.create_string_buffer(256)
    if llama_cpp.llama_model_meta_val_str(model, b"general.architecture", buf, len(buf)) < 0:
        return 0
    key = buf.value + b".context_length"
    if llama_cpp.llama_model_meta_val_str(model, key, buf, len(buf)) < 0:
        return 0
    try:
        return max(int(buf.value), 0)
    except ValueError:
        return 0


def _count(vocab: Any, text: str) -> int:
    import llama_cpp

    data = text.encode("utf-8")
    capacity = len(data) + 8  # a token covers at least one byte
    tokens = (llama_cpp.llama_token * capacity)()
    n: int = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, capacity, False, False)
    if n < 0:  # never for byte-level vocabularies; kept for safety
        tokens = (llama_cpp.llama_token * -n)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, -n, False, False)
    return max(n, 0)


def _user_defined(vocab: Any) -> dict[str, int]:
    """Return the user-defined tokens (read by llama.cpp even in plain text), text -> id."""
    import llama_cpp

    found: dict[str, int] = {}
    for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        if llama_cpp.llama_vocab_get_attr(vocab, token) & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED:
            text = (llama_cpp.llama_vocab_get_text(vocab, token) or b"").decode("utf-8", "replace")
            found.setdefault(text, token)
    return found
