"""Decide when the persistent KV cache is worth asking, what to restore and what to save.

Pure arithmetic on token counts, so every rule is tested without a model or a socket.
The rule the others serve: the last MIN_FRESH prompt tokens are always evaluated
afresh in one batch (see worker.kv), whether the prefix came from memory, from the
store or from nowhere, so a restored request gives exactly the output of an
uncached one.
"""

from __future__ import annotations

from collections.abc import Sequence

from reame.shared.kv_entry import EntryHeader
from reame.worker.kv import MIN_FRESH, common_prefix


def lookup_worthwhile(n_prompt: int, local: int, block_tokens: int, min_gain: int = 1) -> bool:
    """Tell whether the store could give ``min_gain`` tokens more than the ``local`` ones already in memory.

    The store finds entries by full blocks, so it can vouch for at most the prompt's
    full blocks, and nothing past the tokens that must be evaluated afresh.
    """
    full = (n_prompt // block_tokens) * block_tokens
    return min(full, n_prompt - MIN_FRESH) - local >= min_gain


def restore_length(entry_tokens: Sequence[int], prompt: Sequence[int], local: int, min_gain: int = 1) -> int:
    """Return how many prompt tokens to take from an entry, or 0 if it gives fewer than ``min_gain`` over ``local``."""
    match = min(common_prefix(entry_tokens, prompt), len(prompt) - MIN_FRESH)
    return match if match - local >= min_gain else 0


def entry_problem(header: EntryHeader, fingerprint: bytes, kv_type: str, n_ctx: int) -> str | None:
    """Say why an entry cannot be restored into this context, or None if it can.

    llama.cpp refuses a state with more cells than the context holds; that is no
    damage (another worker may have a larger context), so it is a miss, not corruption.
    """
    if header.fingerprint != fingerprint.hex():
        return f"it belongs to another model (fingerprint {header.fingerprint[:12]})"
    if header.kv_type != kv_type:
        return f"its KV type is {header.kv_type}, this worker's is {kv_type}"
    if header.n_tokens > n_ctx:
        return f"its {header.n_tokens} tokens do not fit this worker's context of {n_ctx}"
    return None


def should_save(n_prompt: int, stored: int, min_tokens: int, warm: bool) -> bool:
    """Tell whether a prompt's state is worth storing, ``stored`` of its tokens being stored already.

    A warm request asks for the store explicitly, so only an already stored prompt is
    skipped; otherwise short prompts, and prompts that add little to a stored prefix,
    are not worth the disk and the transfer.
    """
    if stored >= n_prompt:
        return False
    if warm:
        return True
    return n_prompt >= min_tokens and n_prompt - stored >= min_tokens
