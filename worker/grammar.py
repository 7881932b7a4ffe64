"""Compile a request's GBNF grammar into llama.cpp's grammar sampler.

The gateway wrote the grammar from a JSON schema (gateway.grammar.schema_gbnf) and the
worker only compiles it against this model's vocabulary; llama.cpp returns NULL
for a grammar it cannot parse, and an empty grammar would constrain nothing, so
both are refused rather than answered unconstrained.
"""

from __future__ import annotations

from typing import Any, Final

import llama_cpp

ROOT: Final = b"root"


class GrammarError(ValueError):
    """A grammar llama.cpp cannot use."""


def compile_grammar(vocab: Any, text: str) -> Any:
    """Return a new grammar sampler for ``text`` (root rule ``root``); the caller frees it."""
    if not text.strip():
        raise GrammarError("the grammar is empty")
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode("utf-8"), ROOT)
    if not sampler:
        raise GrammarError("llama.cpp could not parse the grammar")
    return sampler
