"""The Falcon resources: the OpenAI endpoints, plus /health and /ready."""

from __future__ import annotations

import functools
import json
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Final, NoReturn

import falcon
from gunicorn.http.errors import ParseException

from reame.gateway.api import plan as plans
from reame.gateway.api import responses, validation
from reame.gateway.api.choice_stream import ChoicesStream
from reame.gateway.api.choices import choice_usage, seeded
from reame.gateway.api.completion_choices import Candidate, select, worker_logprobs
from reame.gateway.api.logprobs import choice_logprobs
from reame.gateway.api.responses import Usage
from reame.gateway.api.streams import ChatStream, CompletionStream, Meta, SSEStream, collect, next_message
from reame.gateway.api.tool_calls import CallFormat, classify
from reame.gateway.api.tool_stream import ToolStream
from reame.gateway.api.tools import as_tool_call, offer, template_tools
from reame.gateway.compress.compressor import Compressor
from reame.gateway.http import auth, body_encoding, bounds, errors, sse
from reame.gateway.http.errors import APIError, dispatcher_unavailable, invalid
from reame.gateway.http.guard import tenant_of
from reame.gateway.http.http_worker import ReadTimeout
from reame.gateway.http.requestlog import request_log
from reame.gateway.upstream.answers import AnswerCache, model_identity
from reame.gateway.upstream.client import Call, Dispatcher
from reame.shared import protocol
from reame.shared.config import Config
from reame.shared.protocol import ChatMessage, SamplingParams

JSON_TYPE: Final = "application/json"
READY_TIMEOUT_S: Final = 1.0
# A cachekeeper answers stats within milliseconds; one that does not is reported "off".
CACHE_PROBE_TIMEOUT_S: Final = 0.5


class Settings:
    """What the resources need from the configuration, read once."""

    def __init__(self, config: Config, model: str, compressor: Compressor | None = None) -> None:
        self.model = model
        self.compressor = compressor or Compressor(config)
        self.max_body_bytes = config.server.max_body_bytes
        self.max_messages = config.server.max_messages
        self.n_ctx = config.model.n_ctx  # 0: the model's own (gateway.compress.tokenizer reads it from the GGUF)
        self.request_timeout = config.server.request_timeout
        self.sampling = config.sampling
        self.per_key_scope = auth.per_key_scope(config)
        self.created = int(time.time())  # the model's "created": when this gateway started
        self.config = config
        self.answers: AnswerCache | None = None  # one per process, made with the first resource's dispatcher

    @functools.cached_property
    def call_format(self) -> CallFormat:
        """How the model's chat template writes tool calls (gateway.api.tool_calls), read once, on first use."""
        return classify(self.compressor.tokenizer.chat_template())


def read_json(req: falcon.Request, max_bytes: int) -> object:
    """Read and decode the JSON body, never more than ``max_bytes`` of it."""
    length = req.content_length  # a malformed header is Falcon's 400
    if length is not None and length > max_bytes:
        _too_large(max_bytes)
    try:
        if length is not None:
            data = req.bounded_stream.read(max_bytes + 1)
        elif "chunked" in (req.get_header("Transfer-Encoding") or "").lower():
            data = req.stream.read(max_bytes + 1)  # the server de-chunks and ends the stream
        else:
            data = b""
    except ParseException as err:  # gunicorn's: a malformed chunk size or terminator
        raise invalid(None, f"the request body is malformed: {err}", "invalid_body") from None
    except ReadTimeout:
        raise APIError(408, "the request body did not arrive in time", code="request_timeout") from None
    except OSError:  # the client closed before the whole body (gunicorn's NoMoreData)
        raise invalid(None, "the request body is incomplete", "invalid_body") from None
    if len(data) > max_bytes:
        _too_large(max_bytes)
    try:
        data = body_encoding.decode(data, req.get_header("Content-Encoding"), max_bytes)
    except body_encoding.BodyError as err:
        raise APIError(err.status, err.message, code=err.code) from None
    if not data.strip():
        raise invalid(None, "the request body is empty; send a JSON object", "invalid_json")
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise invalid(None, f"the request body is not valid JSON: {err}", "invalid_json") from None


def _too_large(max_bytes: int) -> NoReturn:
    raise APIError(413, f"the request body is larger than {max_bytes} bytes", code="request_too_large")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def disconnect_probe(environ: dict[str, Any]) -> Callable[[], bool] | None:
    """Return a check that the HTTP client closed its connection, if the server exposes it.

    gunicorn puts the client socket in the environ; peeking at it without blocking
    reads b"" once the client has closed (a pipelined next request reads as data,
    so it is not mistaken for a hang-up). TLS sockets refuse recv flags: no probe.
    """
    peer = environ.get("gunicorn.socket")
    if not isinstance(peer, socket.socket) or isinstance(peer, ssl.SSLSocket):
        return None

    def gone() -> bool:
        try:
            return peer.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    return gone


def send_json(resp: falcon.Response, payload: object, status: int = 200) -> None:
    """Answer with ``payload`` as a JSON body."""
    resp.status = status
    resp.content_type = JSON_TYPE
    resp.data = responses.dumps(payload)


def start_stream(req: falcon.Request, resp: falcon.Response, stream: SSEStream) -> None:
    """Answer 200 with ``stream`` as the body; the stream writes the request's log line."""
    resp.content_type = sse.CONTENT_TYPE
    resp.set_header("Cache-Control", "no-cache")
    resp.set_header("X-Accel-Buffering", "no")  # tell proxies (nginx) not to hold the events back
    resp.stream = stream
    request_log(req).deferred = True


class _Generation:
    """What both completion endpoints share: opening a call and waiting for its first message."""

    def __init__(self, settings: Settings, dispatcher: Dispatcher) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        if settings.answers is None:
            settings.answers = AnswerCache(
                settings.config, dispatcher.cache.address, dispatcher.upstream,
                # The model as the workers named it (Ready.fingerprint): the gateway loads none.
                identity=lambda config: model_identity(config, dispatcher.status(plans.PROBE_TIMEOUT_S)),
            )
        self.answers = settings.answers

    def open(
        self,
        req: falcon.Request,
        request_id: str,
        sampling: SamplingParams,
        *,
        prompt: str | None = None,
        messages: list[ChatMessage] | None = None,
        options: validation.Options = validation.DEFAULT_OPTIONS,
        warm: bool = False,
        grammar: str | None = None,
        logprobs: int | None = None,
        tools: list[protocol.ToolFunction] | None = None,
    ) -> Call:
        """Refuse what cannot fit the context, plan the request (gateway.api.plan), send it."""
        compressor = self.settings.compressor
        texts = [prompt] if prompt is not None else [t for m in messages or [] for t in (m.content, m.name or "")]
        n_ctx = self.settings.n_ctx or compressor.tokenizer.train_context() or 0
        bounds.check_fits(
            bounds.text_bytes(texts), "prompt" if prompt is not None else "messages", n_ctx,
            None if warm else sampling.max_tokens, compressor.tokenizer.min_tokens,
        )
        tenant = tenant_of(req)
        key_scope = tenant.scope if tenant is not None and self.settings.per_key_scope else ""
        ask = plans.Ask(
            request_id, sampling, time.time() + self.settings.request_timeout,
            auth.cache_scope(key_scope, options.cache_salt), prompt=prompt, messages=messages, options=options,
            warm=warm, chunks=self.settings.config.cache.chunks.applies(options.chunks, messages), grammar=grammar,
            logprobs=logprobs, tools=tools,
        )
        draft = plans.draft(ask, compressor)
        # Only auto's question asks the dispatcher whether its document is read; that Status
        # also names the model for the answer key, so the answer cache asks nothing more.
        status = self.dispatcher.status(plans.PROBE_TIMEOUT_S, draft.links, draft.pieces) if draft.asks_status else None
        plan = plans.plan(draft, status, compressor, self.answers.identity if self.answers.enabled else None)
        compressor.savings.add(plan.compressed)
        # A stored answer replays without the dispatcher; else the reply is recorded for the next time.
        call = self.answers.open(
            plan.generate, plan.answer_key,
            lambda: self.dispatcher.open(plan.generate, disconnect_probe(req.env), then=plan.warm),
        )
        call.saved_tokens = plan.compressed.saved_tokens
        call.compression = plan.mode
        request_log(req).compressed(call.compression, plan.compressed.saved_tokens)
        return call

    @staticmethod
    def first(call: Call, req: falcon.Request) -> protocol.Delta | protocol.Done:
        """Wait for the call's first message, so that an early error keeps its HTTP status."""
        try:
            return next_message(call, request_log(req))
        except BaseException:
            call.close()
            raise


class ChatCompletions(_Generation):
    """POST /v1/chat/completions."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = self.settings
        body = read_json(req, s.max_body_bytes)
        request = validation.parse_chat(body, s.sampling, s.max_messages, lambda: s.call_format)
        record = request_log(req)
        record.request_id = response_id = responses.new_id(responses.CHAT_ID_PREFIX)
        messages = offer(request.messages, request.tools)  # the generic fallback's system note
        tools = template_tools(request.tools)  # or the template lists them itself
        call = self.open(
            req, response_id, request.sampling, messages=messages, options=request.options,
            grammar=request.grammar, logprobs=request.logprobs, tools=tools,
        )
        first = self.first(call, req)
        meta = Meta(response_id, int(time.time()), s.model, request.include_usage, request.logprobs is not None)

        def open_choice(index: int) -> Call:  # n > 1: in turn, the later ones reusing the prompt's KV state
            return self.open(
                req, f"{response_id}-{index}", seeded(request.sampling, index), messages=messages,
                options=request.options, grammar=request.grammar, logprobs=request.logprobs, tools=tools,
            )

        if request.stream:
            if request.n > 1:
                stream: SSEStream = ChoicesStream(call, first, meta, record, request.n, open_choice)
            elif request.tools is not None:
                stream = ToolStream(call, first, meta, record, request.tools)
            else:
                stream = ChatStream(call, first, meta, record)
            start_stream(req, resp, stream)
            return
        body = responses.chat_completion(response_id, meta.created, s.model, "", "", Usage())
        body["choices"], usage = [], Usage()
        for index in range(request.n):
            if index > 0:
                call = open_choice(index)
                first = self.first(call, req)
            entries: list[protocol.TokenLogprob] | None = None if request.logprobs is None else []
            with call:
                text, done = collect(call, first, record, entries)
            usage += choice_usage(done, call.saved_tokens, index, call.compression)
            choice = responses.chat_choice(index, text, done.finish_reason.value, choice_logprobs(entries))
            body["choices"].append(as_tool_call(choice, text, request.tools, done.finish_reason == "stop"))
        body["usage"] = usage.to_dict()
        send_json(resp, body)


class Completions(_Generation):
    """POST /v1/completions: per prompt, best_of (n) Generates in turn (gateway.api.completion_choices)."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = self.settings
        request = validation.parse_completion(read_json(req, s.max_body_bytes), s.sampling)
        record = request_log(req)
        record.request_id = response_id = responses.new_id(responses.COMPLETION_ID_PREFIX)
        prompts, per_prompt = request.prompts, request.best_of
        total = len(prompts) * per_prompt
        logprobs = worker_logprobs(request.logprobs, request.n, per_prompt)

        def open_call(index: int) -> Call:  # generation index % per_prompt of prompt index // per_prompt
            call_id = response_id if total == 1 else f"{response_id}-{index}"
            return self.open(
                req, call_id, seeded(request.sampling, index % per_prompt), prompt=prompts[index // per_prompt],
                options=request.options, logprobs=logprobs,
            )

        call = open_call(0)
        first = self.first(call, req)
        meta = Meta(response_id, int(time.time()), s.model, request.include_usage, request.logprobs is not None)
        if request.stream:  # best_of == n here: each generation is a choice
            repeated = [prompt for prompt in prompts for _ in range(per_prompt)]
            stream = CompletionStream(call, first, meta, record, repeated, request.echo, open_call, per_prompt)
            start_stream(req, resp, stream)
            return
        candidates, usage = [], Usage()
        for index in range(total):
            if index > 0:
                call = open_call(index)
                first = self.first(call, req)
            entries: list[protocol.TokenLogprob] | None = None if logprobs is None else []
            with call:
                text, done = collect(call, first, record, entries)
            candidates.append(Candidate(text, done.finish_reason.value, entries))
            usage += choice_usage(done, call.saved_tokens, index % per_prompt, call.compression)
        choices = select(prompts, candidates, request.n, request.echo, request.logprobs is not None)
        send_json(resp, responses.text_completion(response_id, meta.created, s.model, choices, usage))


class CacheWarm(_Generation):
    """POST /v1/cache/warm: read a prompt and store its KV state, generating nothing.

    For loading documents ahead of the questions about them: send the document as the
    start of later prompts (e.g. the system message); those questions then reuse it.
    """

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = self.settings
        request = validation.parse_warm(read_json(req, s.max_body_bytes), s.max_messages)
        record = request_log(req)
        record.request_id = warm_id = responses.new_id(responses.WARM_ID_PREFIX)
        sampling = SamplingParams(max_tokens=1)  # unused: a warm request samples nothing
        call = self.open(
            req, warm_id, sampling, prompt=request.prompt, messages=request.messages, options=request.options, warm=True
        )
        first = self.first(call, req)
        with call:
            _, done = collect(call, first, record)
        send_json(resp, responses.cache_warm(warm_id, int(time.time()), s.model, done))


class Models:
    """GET /v1/models and /v1/models/{id}: the one model this server runs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        send_json(resp, responses.model_list(self.settings.model, self.settings.created))

    def on_get_one(self, req: falcon.Request, resp: falcon.Response, model_id: str) -> None:
        if model_id != self.settings.model:
            raise APIError(404, f"the model {model_id!r} does not exist", param="model", code="model_not_found")
        send_json(resp, responses.model_card(self.settings.model, self.settings.created))

    # HEAD answers as GET does; Falcon drops the body.
    on_head = on_get
    on_head_one = on_get_one


class Health:
    """The process is alive and answering; says nothing about the dispatcher."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        send_json(resp, {"status": "ok"})

    on_head = on_get


class Ready:
    """Ready to generate: the dispatcher answers and has at least one worker.

    The body also says whether the persistent cache is "on", "off" (workers serve
    without it) or "disabled": the cache is optional, so it never makes this a 503.
    """

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        status = self.dispatcher.status(READY_TIMEOUT_S)
        if status is None:
            raise dispatcher_unavailable("the dispatcher does not answer")
        if status.workers < 1:
            raise APIError(503, "no worker is attached to the dispatcher", type=errors.UNAVAILABLE,
                           code=protocol.ErrorCode.NO_WORKERS.value, retry=True)
        send_json(resp, {
            "status": "ready",
            "workers": status.workers,
            "idle_workers": status.idle_workers,
            "queued": status.queued,
            "running": status.running,
            "cache": self.dispatcher.cache.state(CACHE_PROBE_TIMEOUT_S),
            "prefills": {
                "full": status.full_prefills,
                "reused_from_memory": status.reused_from_memory,
                "reused_from_store": status.reused_from_store,
                "waited_for_a_worker": status.affinity_waits,
                # Background warms of documents (gateway.api.plan): sent to a worker, read whole, yielded.
                "warms_started": status.warms_started,
                "warms_finished": status.warms_finished,
                "warms_preempted": status.warms_preempted,
            },
        })

    on_head = on_get
