"""Serve one Generate: build the prompt, prefill, decode, stream the text.

The engine has no sockets: it takes a request, a ``send`` callable for the
outgoing messages and a cancel Event, so it can be driven directly in tests.
Every request ends with exactly one Done or Error. With a persistent KV cache
(worker.prefix_cache), a prompt's prefix may be restored before the prefill, and
the prompt's state is saved after Done has been sent, so no client waits for it.
Tokens are decoded plainly or speculatively (worker.speculative), as the request
or the worker's default asks; both loops emit through worker.output, so the
client sees the same messages either way.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Final, NamedTuple, TypeVar

from reame.shared.modes import SpeculativeMode
from reame.shared.protocol import (
    Done,
    Error,
    ErrorCode,
    FinishReason,
    Generate,
    Message,
)
from reame.worker import chunked_prefill, request_prompt
from reame.worker.chunk_store import SAVE_WAIT_S, ChunkStore
from reame.worker.chunked_prefill import ChunkReuse
from reame.worker.grammar import GrammarError, compile_grammar
from reame.worker.kv import KvCache, prefill_chunks
from reame.worker.logprobs import Recorder
from reame.worker.model import DecodeError, Model
from reame.worker.output import Output
from reame.worker.prefix_cache import PrefixCache
from reame.worker.request_prompt import Prompt, PromptReader, RequestFailed
from reame.worker.sampler import Sampler, SamplingError
from reame.worker.speculative.chooser import TargetChooser
from reame.worker.speculative.loop import Tally, generate
from reame.worker.speculative.setup import PARAM, Speculation, SpeculationError, check_mode
from reame.worker.stops import TextStream

log = logging.getLogger(__name__)

Send = Callable[[Message], None]
_S = TypeVar("_S", Sampler, TargetChooser)

# A background warm's prefill batch, the most a user request pre-empting it waits for (BENCHMARKS.md, issue #16).
BACKGROUND_BATCH: Final = 128


class Reused(NamedTuple):
    """Prompt tokens that were not computed: ``cached`` in all, ``restored`` of them from the store."""

    cached: int
    restored: int
    chunks: ChunkReuse | None = None  # in chunk mode, how the chunks were had


class Engine:
    """The decode loop of one worker; requests run one at a time."""

    def __init__(
        self,
        model: Model,
        shutting_down: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.time,
        cache: PrefixCache | None = None,
        speculation: Speculation | None = None,
        special_in_prompt: bool = True,
        chunk_store: ChunkStore | None = None,
    ) -> None:
        self.model = model
        self.prompts = PromptReader(model, special_in_prompt)
        self.kv = KvCache(model)
        self.cache = cache
        self.speculation = speculation
        self.chunk_store = chunk_store
        self._shutting_down = shutting_down
        self._clock = clock  # wall clock, for Generate.deadline

    def warm_up(self) -> None:
        """Evaluate one token and forget it.

        The first request then does not pay for faulting in the mapped weights and
        building the compute graph; llama.cpp's own tools warm up the same way.
        """
        token = self.model.bos if self.model.bos >= 0 else 0
        self.kv.reset()
        self.kv.append((token,), logits_last=True)
        self.kv.reset()
        if self.speculation is not None:
            self.speculation.calibrate(self.kv, token, self.model.n_batch, self.model.threads)

    def run(self, request: Generate, send: Send, cancel: threading.Event) -> None:
        """Serve ``request``: Deltas as text becomes final, then one Done or Error."""
        rid = request.request_id
        try:
            if request.warm:
                done, prompt = self._warm(request, cancel), None
            else:
                done, prompt = self._generate(request, send, cancel)
        except RequestFailed as err:
            log.debug("request %s ended: %s %s", rid, err.code.value, err.message)
            send(Error(rid, err.code, err.message, err.param))
        except DecodeError as err:
            log.error("request %s: %s; KV cache cleared", rid, err)
            send(Error(rid, ErrorCode.INTERNAL, "the model failed to evaluate the request"))
        except Exception:
            log.exception("request %s failed", rid)
            self.kv.reset()
            send(Error(rid, ErrorCode.INTERNAL, "the worker failed while generating"))
        else:
            send(done)
            if prompt is not None:
                self._save(request, prompt)

    def _will_save(self, request: Generate, prompt: Prompt) -> bool:
        """Tell whether the prompt's state (in chunk mode: its chunks) is stored, or :meth:`_save` will store it."""
        if prompt.chunks is not None:
            return self.chunk_store is not None and request.cache and self.chunk_store.service.available
        return self.cache is not None and request.cache and self.cache.worth_saving(self.kv, prompt.tokens, warm=False)

    def _save(self, request: Generate, prompt: Prompt) -> None:
        """Store the prompt's state (or its fresh chunks) if worth it; the reply is already out, so never fail."""
        if prompt.chunks is not None:
            self._save_chunks(request, prompt.chunks)
            return
        if self.cache is None or not request.cache:
            return
        try:
            self.cache.save(self.kv, prompt.tokens, warm=False)
        except Exception:
            log.exception("request %s: saving the prompt's state failed; KV cache cleared", request.request_id)
            self.kv.reset()

    def _save_chunks(self, request: Generate, chunks: ChunkReuse) -> bool:
        """Store the chunks a prefill read alone; True if every one was queued."""
        if self.chunk_store is None:
            return False
        return all([self.chunk_store.save(request.cache_scope, tokens, state, SAVE_WAIT_S)
                    for tokens, state in chunks.fresh])

    # -- one request --------------------------------------------------------------

    def _generate(self, request: Generate, send: Send, cancel: threading.Event) -> tuple[Done, Prompt]:
        started = time.perf_counter()
        rid = request.request_id
        mode = self._mode(request)
        read = self.prompts.read(request, functools.partial(self._check, request, cancel))
        prompt, stops = read.tokens, read.stops
        budget = request_prompt.budget(self.model.n_ctx, len(prompt), request.sampling.max_tokens, read.what)
        recorder = None if request.logprobs is None else Recorder(request.logprobs, self.model.piece)
        out = Output(
            rid, budget, TextStream(stops), self.model.piece, self.model.is_eog, send,
            None if recorder is None else recorder.last,
        )
        if mode == SpeculativeMode.OFF or self.speculation is None:
            reused, prefilled = self._plain(request, read, out, cancel, recorder)
            tally = Tally()
        else:
            reused, prefilled, tally = self._speculative(
                self.speculation, mode, request, read, out, cancel, recorder
            )
        finished = time.perf_counter()
        chunks = reused.chunks or ChunkReuse(0, 0)
        read = read._replace(chunks=reused.chunks)
        done = Done(
            request_id=rid,
            finish_reason=out.finish,
            prompt_tokens=len(prompt),
            completion_tokens=out.produced,
            cached_tokens=reused.cached,
            restored_tokens=reused.restored,
            prompt_ms=(prefilled - started) * 1000.0,
            generation_ms=(finished - prefilled) * 1000.0,
            draft_tokens=tally.drafted,
            accepted_draft_tokens=tally.accepted,
            chunks_in_memory=chunks.in_memory,
            chunks_from_store=chunks.from_store,
            chunks_read=chunks.read,
            link_tokens=chunks.link_tokens,
            cache_saved=self._will_save(request, read),  # the dispatcher learns what is stored from it
        )
        return done, read

    def _plain(
        self, request: Generate, prompt: Prompt, out: Output, cancel: threading.Event,
        recorder: Recorder | None = None,
    ) -> tuple[Reused, float]:
        """Prefill, then sample and evaluate one token at a time; return what was reused, and the prefill end."""
        if request.grammar is not None or recorder is not None or self._draws_as_speculation(request):
            return self._constrained(request, prompt, out, cancel, recorder)
        sampler = self._sampler(Sampler, request)
        try:
            reused = self._prefill(prompt, request, cancel)
            sampler.feed_prompt(prompt.tokens)
            prefilled = time.perf_counter()
            while not out.ended:
                token = sampler.sample(self.model.ctx)
                if out.take(token):  # else: no need to evaluate a token nothing will follow
                    self._check(request, cancel)
                    self.kv.append((token,), logits_last=True)
            out.close()
        finally:
            sampler.close()
        return reused, prefilled

    def _draws_as_speculation(self, request: Generate) -> bool:
        """Tell whether a sampled request decoded plainly draws its tokens as the speculative loop does.

        The speculative loop draws from numpy (worker.speculative.chooser), llama.cpp's
        sampler from its own generator. Whether drafts pay, so which loop runs, is measured
        by each worker and differs between workers and restarts; a seeded request that
        speculation may serve draws through the chooser either way, so its text does not
        depend on the worker it lands on. Greedy choices are the argmax in both.
        """
        speculation = self.speculation
        if speculation is None or not speculation.available or request.sampling.temperature == 0.0:
            return False
        return (speculation.mode if request.speculative is None else request.speculative) != SpeculativeMode.OFF

    def _constrained(
        self, request: Generate, prompt: Prompt, out: Output, cancel: threading.Event,
        recorder: Recorder | None,
    ) -> tuple[Reused, float]:
        """Decode one token at a time from the logits rows: under a grammar, recording logprobs, or drawing
        as speculation does (:meth:`_draws_as_speculation`)."""
        target = self._chooser(request)
        chooser = target if recorder is None else recorder.wrap(target)
        try:
            reused = self._prefill(prompt, request, cancel)
            target.feed_prompt(prompt.tokens)
            prefilled = time.perf_counter()
            while not out.ended:
                token = chooser.choose(self.kv.logits(-1))
                if out.take(token):
                    self._check(request, cancel)
                    self.kv.append((token,), logits_last=True)
            out.close()
        finally:
            target.close()
        return reused, prefilled

    def _speculative(
        self, speculation: Speculation, mode: SpeculativeMode, request: Generate, prompt: Prompt, out: Output,
        cancel: threading.Event, recorder: Recorder | None = None,
    ) -> tuple[Reused, float, Tally]:
        """Prefill, then decode with drafts (worker.speculative.loop); return what was reused, prefill end, tally."""
        chooser = self._chooser(request)
        check = functools.partial(self._check, request, cancel)
        try:
            reused = self._prefill(prompt, request, cancel)
            chooser.feed_prompt(prompt.tokens)
            drafter = speculation.drafter(mode, self.model.n_batch, request.cache_scope)
            drafter.begin(prompt.tokens, check)
            prefilled = time.perf_counter()
            controller = speculation.controller(mode)
            choosing = chooser if recorder is None else recorder.wrap(chooser)
            tally = generate(self.kv, choosing, drafter, controller, out, check, self.model.n_batch)
            out.close()
        finally:
            chooser.close()
        speculation.count(tally, controller)
        return reused, prefilled, tally

    def _sampler(self, kind: type[_S], request: Generate) -> _S:
        try:
            return kind(request.sampling, self.model.n_vocab, self.model.n_ctx)
        except SamplingError as err:
            raise RequestFailed(ErrorCode.INVALID_REQUEST, str(err), err.param) from err

    def _chooser(self, request: Generate) -> TargetChooser:
        """Return the request's TargetChooser, under its grammar if it has one."""
        if request.grammar is None:
            return self._sampler(TargetChooser, request)
        try:
            grammar = compile_grammar(self.model.vocab, request.grammar)
        except GrammarError as err:
            raise RequestFailed(ErrorCode.INVALID_REQUEST, str(err), "response_format") from err
        try:
            return TargetChooser(request.sampling, self.model.n_vocab, self.model.n_ctx, grammar)
        except SamplingError as err:
            raise RequestFailed(ErrorCode.INVALID_REQUEST, str(err), err.param) from err

    def _mode(self, request: Generate) -> SpeculativeMode:
        """Return the request's speculative mode; refuse one this worker cannot serve."""
        try:
            if self.speculation is None:
                check_mode(request.speculative, has_draft=False)
                return SpeculativeMode.OFF
            return self.speculation.resolve(request.speculative)
        except SpeculationError as err:
            raise RequestFailed(ErrorCode.INVALID_REQUEST, str(err), PARAM) from err

    def _warm(self, request: Generate, cancel: threading.Event) -> Done:
        """Read the prompt and store its state; nothing is generated.

        A background warm (dispatcher.background), cancelled to make way for a user request
        after a batch of BACKGROUND_BATCH, stores what it read, to resume from; it never
        waits for the store's answer.
        """
        started = time.perf_counter()
        read = self.prompts.read(request, functools.partial(self._check, request, cancel))
        prompt = read.tokens
        request_prompt.budget(self.model.n_ctx, len(prompt), None, read.what)
        prefix_mode = self.cache is not None and request.cache and not read.spans
        try:
            reused = self._prefill(read, request, cancel, BACKGROUND_BATCH if request.background else 0)
        except RequestFailed as err:
            if request.background and err.code == ErrorCode.CANCELLED and self.cache is not None and prefix_mode:
                self.cache.save(self.kv, self.kv.tokens, warm=True, wait=False)  # however little it read
            raise
        saved = False
        chunks = reused.chunks or ChunkReuse(0, 0)
        if self.cache is not None and prefix_mode:
            saved = self.cache.save(self.kv, prompt, warm=True, wait=not request.background)
        elif read.spans and reused.chunks is not None and request.cache:
            saved = self._save_chunks(request, reused.chunks)
        return Done(
            request_id=request.request_id,
            finish_reason=FinishReason.STOP,
            prompt_tokens=len(prompt),
            completion_tokens=0,
            cached_tokens=reused.cached,
            restored_tokens=reused.restored,
            prompt_ms=(time.perf_counter() - started) * 1000.0,
            cache_saved=saved,
            # The dispatcher learns from these that the chunks are stored (dispatcher.background.Known).
            chunks_in_memory=chunks.in_memory,
            chunks_from_store=chunks.from_store,
            chunks_read=chunks.read,
            link_tokens=chunks.link_tokens,
        )

    def _prefill(self, read: Prompt, request: Generate, cancel: threading.Event, n_batch: int = 0) -> Reused:
        """Bring the KV cache to the prompt in batches of ``n_batch`` (0: the model's); return what was reused.

        Only what was read under the request's cache scope is reused, in memory or from the store.
        """
        prompt = read.tokens
        n_batch = min(n_batch or self.model.n_batch, self.model.n_batch)
        if read.spans:
            store = self.chunk_store if request.cache else None
            check = functools.partial(self._check, request, cancel)
            chunks = chunked_prefill.prefill(
                self.kv, store, prompt, read.spans, request.cache_scope, n_batch, check
            )
            return Reused(chunks.cached, chunks.restored, chunks)
        cached = in_memory = self.kv.keep_prefix_of(prompt, request.cache_scope)
        stored = 0
        if self.cache is not None and request.cache:
            self._check(request, cancel)
            restored = self.cache.restore(self.kv, prompt, cached)
            cached, stored = restored.cached, restored.stored
        for start, end in prefill_chunks(cached, len(prompt), n_batch):
            self._check(request, cancel)
            self.kv.append(prompt[start:end], logits_last=end == len(prompt))
        self.kv.mark_stored(stored)
        # A restore replaces the whole cache: what it brings is counted as from the store.
        return Reused(cached, cached if cached > in_memory else 0)

    def _check(self, request: Generate, cancel: threading.Event) -> None:
        """Stop before the next decode if the request was cancelled, timed out or must yield."""
        if cancel.is_set():
            raise RequestFailed(ErrorCode.CANCELLED, "the request was cancelled")
        if self._shutting_down():
            raise RequestFailed(ErrorCode.SHUTTING_DOWN, "the worker is shutting down; retry the request")
        if self._clock() > request.deadline:
            raise RequestFailed(ErrorCode.TIMEOUT, "the request did not finish before its deadline")
