"""Name the text a request starts with, so the dispatcher can send it where that text already is.

A worker keeps the KV state of the last prompt it read, so a request that starts
like that prompt is read only from where the two part (worker.kv). The dispatcher
does not tokenize, so it names prompts by their text: each message (its role, then
its content) or raw prompt is cut into pieces at paragraph breaks, or every
PIECE_CHARS characters within a long paragraph, and the pieces' hashes are chained
as in shared/prefix.py. Two prompts that share their first k pieces share their
first k links, whatever follows, and a link's ``chars`` says how much text it stands
for, which is what its recomputation would cost.

The request's cache scope (``Generate.cache_scope``, e.g. one per API key) is the
chain's root: a worker holds only its own scope's prompt (worker.kv), so requests
are sent towards it only by the same scope: no request is steered (or kept waiting)
by another key's documents.

In chunk mode (Generate.chunks) a chat's documents are reused wherever they sit, so
each piece it is cut into (shared.chunking, as the worker cuts it) is also named
alone, by :func:`chunk_pieces`: the dispatcher remembers the pieces of the chats
read in chunk mode (a document is read when all its pieces are) and which worker
read or placed each lately (it holds their states in its memory).

The gateway names a document's prefix and pieces the same way to ask the dispatcher
whether it is read (gateway.api.plan), and both tell "read" by :func:`is_read` and
:func:`chunks_read`: that is why this lives in shared/.

Token blocks would name prefixes exactly, but the dispatcher would have to hold the
vocabulary and tokenize every prompt in its one loop; paragraphs are what documents
share, and a question appended to a document starts a new paragraph or message.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Sequence
from typing import Final, NamedTuple

from reame.shared import protocol as p
from reame.shared.chunking import pieces, split_at

PIECE_CHARS: Final = 1024  # a long paragraph is cut here, so a shared part of it still counts
# Links beyond this are not computed: the dispatcher's one loop hashes them, and a
# prompt of millions of tiny paragraphs ("a\n\n" * 2,000,000) stalled it for 3.6 s, past
# the workers' heartbeat. Prompts sharing this many pieces are as good as equal.
MAX_LINKS: Final = 4096
_DIGEST_BYTES: Final = 8  # compared, not trusted: only routing depends on it
_PERSON: Final = b"reame-affinity"
_CHUNK_PERSON: Final = b"reame-chunk"
# Shorter pieces are not named: whether stored or not, they are read in context
# (worker.chunk_plan.MIN_CHUNK_TOKENS is 64 tokens, about 256 characters of English).
MIN_CHUNK_CHARS: Final = 256


class Link(NamedTuple):
    digest: bytes  # stands for every piece up to and including this one
    chars: int  # characters up to the end of this piece


Chain = tuple[Link, ...]


class Piece(NamedTuple):
    """A piece of a chat read in chunk mode, named alone (:func:`chunk_pieces`)."""

    digest: bytes
    chars: int


def chain(generate: p.Generate) -> Chain:
    """Return the chain of links naming ``generate``'s prompt, piece by piece."""
    links: list[Link] = []
    # The shared scope "" keeps the root every chain had before scopes existed.
    root = generate.cache_scope.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(root, digest_size=_DIGEST_BYTES, person=_PERSON).digest()
    chars = 0
    for piece in itertools.islice(_pieces(generate), MAX_LINKS):
        digest = hashlib.blake2b(
            digest + piece.encode("utf-8", "surrogatepass"), digest_size=_DIGEST_BYTES, person=_PERSON
        ).digest()
        chars += len(piece)
        links.append(Link(digest, chars))
    return tuple(links)


def chunk_digests(generate: p.Generate) -> tuple[bytes, ...]:
    """Return the digests of :func:`chunk_pieces`."""
    return tuple(piece.digest for piece in chunk_pieces(generate))


def chunk_pieces(generate: p.Generate) -> tuple[Piece, ...]:
    """Name each client piece of ``generate``'s chat as chunk mode cuts it, alone, under its cache scope.

    A content sent in text parts is cut at its parts, any other at its paragraphs
    (shared.chunking); the model's own replies are never chunks, nor is the last piece
    of a request that is not a warm (its question: the worker reads it in context). A
    raw prompt has none.
    """
    if generate.messages is None:
        return ()
    root = hashlib.blake2b(
        generate.cache_scope.encode("utf-8", "surrogatepass"), digest_size=_DIGEST_BYTES, person=_CHUNK_PERSON
    ).digest()
    cut = [split_at(message.content, message.breaks) if message.breaks else pieces(message.content)
           for message in generate.messages if message.role != "assistant"]
    if cut and cut[-1] and not generate.warm:
        cut[-1] = cut[-1][:-1]
    texts = (text for message in cut for text in message if len(text) >= MIN_CHUNK_CHARS)
    return tuple(
        Piece(hashlib.blake2b(root + text.encode("utf-8", "surrogatepass"), digest_size=_DIGEST_BYTES,
                              person=_CHUNK_PERSON).digest(), len(text))
        for text in itertools.islice(texts, MAX_LINKS)
    )


def shared_chars(a: Sequence[Link], b: Sequence[Link]) -> int:
    """Return how many characters the two chains share from their start (whole pieces only)."""
    low, high = 0, min(len(a), len(b))
    # Links chain their predecessors, so equality at i implies equality before i:
    # the shared length can be found by bisection.
    while low < high:
        middle = (low + high + 1) // 2
        if a[middle - 1].digest == b[middle - 1].digest:
            low = middle
        else:
            high = middle - 1
    return a[low - 1].chars if low else 0


def is_read(read_chars: int, total_chars: int) -> bool:
    """Tell whether a prompt of ``total_chars`` characters is read when ``read_chars`` of it are: all of it.

    Not most of it: a question's ``query`` form may share all but a few lines with the
    document (a short one), and reading those few lines is what makes the question slow.
    The warm's prompt ends where its document ends in ``auto``'s prompt (gateway.api.plan),
    so its affinity pieces, the last one included, are those of that prompt.
    """
    return total_chars > 0 and read_chars >= total_chars


def chunks_read(known: int, digests: Sequence[bytes]) -> bool:
    """Tell whether a chat in chunk mode is read when ``known`` of its pieces ``digests`` are: all, and it has some."""
    return bool(digests) and known >= len(digests)


def _pieces(generate: p.Generate) -> Iterator[str]:
    if generate.messages is not None:
        for message in generate.messages:
            yield f"\x00{message.role}\x00{message.name or ''}\x00"
            yield from _split(message.content)
    elif generate.prompt is not None:
        yield "\x00prompt\x00"
        yield from _split(generate.prompt)


def _split(text: str) -> Iterator[str]:
    """Yield ``text`` in pieces that end after a blank line, or after PIECE_CHARS characters."""
    start = 0
    while start < len(text):
        cut = text.find("\n\n", start, start + PIECE_CHARS)
        end = cut + 2 if cut >= 0 else min(start + PIECE_CHARS, len(text))
        yield text[start:end]
        start = end
