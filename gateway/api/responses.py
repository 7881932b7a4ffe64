"""Build the OpenAI response objects and stream chunks, exactly as the official API shapes them.

Pure: plain dicts ready for JSON, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any, Final

from reame.shared.protocol import Done

CHAT_ID_PREFIX: Final = "chatcmpl-"
COMPLETION_ID_PREFIX: Final = "cmpl-"
WARM_ID_PREFIX: Final = "warm-"
OWNED_BY: Final = "reame"

Json = dict[str, Any]


def new_id(prefix: str) -> str:
    """Return a fresh response id such as ``chatcmpl-3f2a...``."""
    return prefix + uuid.uuid4().hex


def dumps(payload: Any) -> bytes:
    """Encode a response body: compact JSON in UTF-8."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclasses.dataclass(frozen=True)
class Usage:
    """OpenAI's usage object, plus reame's own counts under ``usage.reame``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    # What the prompt would have cost without compression (equal to prompt_tokens
    # when nothing was compressed).
    uncompressed_prompt_tokens: int = 0
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    # Chunk mode (cache.chunks): chunks held in memory, placed from the store, read alone, and
    # the tokens read in context at their starts.
    chunks_in_memory: int = 0
    chunks_from_store: int = 0
    chunks_read: int = 0
    link_tokens: int = 0
    answer_cache: str = ""  # "hit", "miss", or "" when the answer cache was not consulted (gateway.upstream.answers)
    compression: str = ""  # the compression mode the prompt was sent in; "" when not known

    @classmethod
    def from_done(cls, done: Done, saved_tokens: int = 0, compression: str = "") -> Usage:
        """Build the usage of one generation; ``saved_tokens`` is what the gateway's compression saved."""
        return cls(
            done.prompt_tokens, done.completion_tokens, done.cached_tokens, done.prompt_tokens + saved_tokens,
            done.draft_tokens, done.accepted_draft_tokens, done.chunks_in_memory, done.chunks_from_store,
            done.chunks_read, done.link_tokens, done.answer_cache, compression,
        )

    def __add__(self, other: Usage) -> Usage:
        numbers = len(_COUNTS)
        counts = zip(dataclasses.astuple(self)[:numbers], dataclasses.astuple(other)[:numbers], strict=True)
        # Several generations (n, prompts) are a hit only if every one that consulted the cache was.
        answers = {self.answer_cache, other.answer_cache} - {""}
        summed = Usage(*(a + b for a, b in counts))
        summed = dataclasses.replace(summed, compression=self.compression or other.compression)
        return dataclasses.replace(summed, answer_cache=max(answers)) if answers else summed  # "miss" > "hit"

    def to_dict(self) -> Json:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "reame": {
                "uncompressed_prompt_tokens": self.uncompressed_prompt_tokens,
                # What the model read for this request: the prompt less what the KV cache restored.
                "read_tokens": self.prompt_tokens - self.cached_tokens,
                **({"compression": self.compression} if self.compression else {}),
                "draft_tokens": self.draft_tokens,
                "accepted_draft_tokens": self.accepted_draft_tokens,
                **({"answer_cache": self.answer_cache} if self.answer_cache else {}),
                **(self._chunks() if self.chunks_in_memory + self.chunks_from_store + self.chunks_read else {}),
            },
        }


    def _chunks(self) -> Json:
        return {"chunks": {
            "in_memory": self.chunks_in_memory, "from_store": self.chunks_from_store, "read": self.chunks_read,
            "link_tokens": self.link_tokens,
        }}


# Usage's summed fields: the counts before its strings.
_COUNTS: Final = tuple(f.name for f in dataclasses.fields(Usage) if f.type in (int, "int"))


@dataclasses.dataclass(frozen=True)
class Choice:
    """One finished choice of a text completion."""

    index: int
    text: str
    finish_reason: str
    logprobs: Json | None = None  # gateway.api.logprobs.legacy


def cache_warm(warm_id: str, created: int, model: str, done: Done) -> Json:
    """Return the answer to POST /v1/cache/warm."""
    return {
        "id": warm_id,
        "object": "cache.warm",
        "created": created,
        "model": model,
        "cached": done.cache_saved,
        "usage": {
            "prompt_tokens": done.prompt_tokens,
            "prompt_tokens_details": {"cached_tokens": done.cached_tokens},
        },
    }


def chat_completion(
    response_id: str, created: int, model: str, content: str, finish_reason: str, usage: Usage,
    logprobs: Json | None = None,
) -> Json:
    """Return a whole ``chat.completion`` object; ``logprobs`` is the choice's (gateway.api.logprobs)."""
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [chat_choice(0, content, finish_reason, logprobs)],
        "usage": usage.to_dict(),
    }


def chat_choice(index: int, content: str, finish_reason: str, logprobs: Json | None = None) -> Json:
    """Return one choice of a ``chat.completion``."""
    return {
        "index": index,
        "message": {"role": "assistant", "content": content},
        "logprobs": logprobs,
        "finish_reason": finish_reason,
    }


def chat_chunk(
    response_id: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    include_usage: bool = False,
    logprobs: Json | None = None,
) -> Json:
    """Return one ``chat.completion.chunk``; ``usage`` is null on it when usage is streamed."""
    chunk = _chunk("chat.completion.chunk", response_id, created, model)
    chunk["choices"] = [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}]
    if include_usage:
        chunk["usage"] = None
    return chunk


def text_completion(response_id: str, created: int, model: str, choices: list[Choice], usage: Usage) -> Json:
    """Return a whole ``text_completion`` object."""
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": c.index, "text": c.text, "logprobs": c.logprobs, "finish_reason": c.finish_reason}
            for c in choices
        ],
        "usage": usage.to_dict(),
    }


def text_chunk(
    response_id: str,
    created: int,
    model: str,
    index: int,
    text: str,
    finish_reason: str | None = None,
    include_usage: bool = False,
    logprobs: Json | None = None,
) -> Json:
    """Return one streamed ``text_completion`` chunk for the choice ``index``."""
    chunk = _chunk("text_completion", response_id, created, model)
    chunk["choices"] = [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}]
    if include_usage:
        chunk["usage"] = None
    return chunk


def usage_chunk(object_type: str, response_id: str, created: int, model: str, usage: Usage) -> Json:
    """Return the last chunk of a stream with ``include_usage``: no choices, the usage."""
    chunk = _chunk(object_type, response_id, created, model)
    chunk["choices"] = []
    chunk["usage"] = usage.to_dict()
    return chunk


def model_card(model: str, created: int) -> Json:
    """Return the ``model`` object of /v1/models."""
    return {"id": model, "object": "model", "created": created, "owned_by": OWNED_BY}


def model_list(model: str, created: int) -> Json:
    """Return the ``list`` object of /v1/models: the one loaded model."""
    return {"object": "list", "data": [model_card(model, created)]}


def _chunk(object_type: str, response_id: str, created: int, model: str) -> Json:
    return {"id": response_id, "object": object_type, "created": created, "model": model}
