"""The thin layer in front of the serving engine: who may ask, what it may ask for, then the request as checked.

It passes on only what it checks (allowlist.py): the fields model, messages, max_tokens, max_completion_tokens, n,
temperature, top_p, frequency_penalty, presence_penalty, seed, stop, stream, stream_options, logprobs, top_logprobs
and user, each in its range; messages of role, content and name; content parts of type text and image_url. Anything
else is a 400 naming it: a client's chat template or processor settings (chat_template_kwargs), tools,
response_format, transformers serve's generation_config, the Responses API's input_image and input_text parts, video,
audio and file parts, a field the engine fails on (stop, with transformers serve).

Errors are in OpenAI's shape ({"error": {"message", "type", "param", "code"}}) so the official client raises them
with their message: 400 for a body that is not JSON or is nested too deeply for Python, a field or part not served,
a field out of range or an image that does not decode (transformers serve answers those with a 500 and a traceback
in its log), 404 for a model name this server does not serve (the name clients use is --served-model-name; the
engine's own name stays internal) or a path it does not serve, 401 without the API key, 408 for a body still
arriving after its timeout, 413 for a body over the limit, 415 for a body that is not JSON (a browser page can send
text/plain without asking), 429 when the requests in flight are at the limit, 503 while the engine is being
restarted, and for a request that comes after SIGTERM or is still running when its grace ends (drain.py); the
engine's own errors are put in the same shape, and a fault here is a 500 in it. A prompt whose tokens (its text,
and its images where the model's processor says how many each makes), with max_tokens, are over the model's context
is a 400 before the engine sees it; a client that hangs up has its request to the engine cancelled.

Images reach the engine inline only, no more of them than --max-images: a data: URL is checked (bytes and pixels
before it is decoded, then decoded), an http(s) URL is fetched here when its host is one the operator allowed
(--allowed-media-domains, vLLM's name for it), with redirects off, loopback and private addresses refused, a timeout
and a byte limit, then sent on as a data: URL. The engine never opens a path or fetches a URL of a client's choosing
(vLLM is given a media allow-list no URL matches, serve.py).
"""

import asyncio
import base64
import contextlib
import hmac
import io
import ipaddress
import json
import logging
import socket
import urllib.parse
from typing import Any, Callable, Optional

from vlmgrpo.serving.drain import TICKET, Drain, Tracked
from vlmgrpo.serving.engine_health import EngineHealth
from vlmgrpo.serving.fit import Target, fit_images
from vlmgrpo.serving.offload import off_the_loop
from vlmgrpo.serving.requests import (CHAT_PATH, Limits, RequestProblem, check_chat_request, check_prompt_length,
                                      completion_from_events, engine_error, image_parts, image_problem, image_sizes,
                                      prompt_text)

log = logging.getLogger("vlmgrpo")
# How often a request waiting on the engine looks whether its client is gone (a receive that does not wait): the
# engine generates for a gone client until then, which every request queued behind it waits for
LOOK_S = 0.1

def _public_address(host: str) -> Optional[str]:
    """Why the host may not be fetched from (it resolves to a loopback, private, link-local or reserved address);
    None when every address it resolves to is public."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        return f"{host} does not resolve ({exc.strerror})"
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            return f"{host} resolves to {address}, a loopback, private or reserved address"
    return None


async def inline_remote_images(body: dict, limits: Limits, client) -> None:
    """Fetch each allowed http(s) image (no redirects, a timeout, a byte limit) and put it inline as a data: URL."""
    for where, part, url in image_parts(body):
        if url.startswith("data:"):
            continue
        host = urllib.parse.urlsplit(url).hostname
        problem = await asyncio.to_thread(_public_address, host)
        raw = b""
        if problem is None:
            try:
                async with client.stream("GET", url, follow_redirects=False,
                                         timeout=limits.fetch_timeout_s) as answer:
                    if answer.status_code != 200:
                        problem = f"{url} answered {answer.status_code} (redirects are not followed)"
                    async for chunk in answer.aiter_bytes() if problem is None else ():
                        raw += chunk
                        if len(raw) > limits.max_image_bytes:
                            problem = f"{url} is over this server's limit of {limits.max_image_bytes} bytes"
                            break
            except Exception as exc:  # httpx's errors, whatever the transport says
                problem = f"{url} could not be fetched ({exc.__class__.__name__})"
        problem = problem or await off_the_loop(image_problem, raw, limits)  # decoding: off the event loop
        if problem:
            raise RequestProblem(400, f"{where}.image_url: {problem}", where, "invalid_image")
        inline = f"data:{_media_type(raw)};base64," + base64.b64encode(raw).decode()
        part["image_url"] = {**part["image_url"], "url": inline}


def _media_type(raw: bytes) -> str:
    from PIL import Image

    with Image.open(io.BytesIO(raw)) as image:
        return Image.MIME.get(image.format, "application/octet-stream")


def authorized(headers, limits: Limits) -> bool:
    if not limits.api_key:
        return True
    given = headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {limits.api_key}".encode())


def build_app(engine_socket: str, served_name: str, engine_model: str, limits: Limits = Limits(),
              count_tokens: Optional[Callable[[str, list], int]] = None, drain: Optional[Drain] = None,
              fit: Optional[Target] = None):
    """engine_socket: the Unix socket the engine listens on (serve.py). count_tokens: the tokens the model makes of a
    prompt's text and its images' (height, width); without it the engine checks lengths. drain: what the server's
    shutdown drains (serve.py runs it on SIGTERM). fit: the size the model's processor gives an image (fit.py);
    images larger are shrunk to it here, without it the engine shrinks them."""
    import httpx2 as httpx  # openai's HTTP client, which transformers serve needs: installed with it
    from fastapi import FastAPI, Request

    client = _engine_client(httpx, engine_socket)
    fetcher = httpx.AsyncClient(follow_redirects=False)
    in_flight = asyncio.Semaphore(limits.max_in_flight)
    drain = drain or Drain()
    engine_health = EngineHealth()
    lifespan = _lifespan(engine_health, client, fetcher, httpx.HTTPError)
    app = FastAPI(title="vlmgrpo serve", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.add_middleware(Tracked, drain=drain)  # inside the key's gate: a request without the key is no ticket
    _require_key(app, limits)
    _add_health(app, engine_health, drain)
    _errors_in_openai_shape(app)
    app.get("/v1/models")(lambda: {"object": "list", "data": [{"id": served_name, "object": "model",
                                                                "owned_by": "vlmgrpo"}]})

    @app.post(CHAT_PATH)
    async def chat(request: Request):
        if in_flight.locked():
            return _refuse(_too_many(limits))
        ticket = request.scope.get(TICKET)
        async with in_flight:
            try:
                # No look for a hang-up while the body is read (a look would take a part of it)
                body = await _unless_gone(request, _checked(request, served_name, limits, fetcher, count_tokens, fit),
                                          drain, ticket, watch_client=False)
                return await _unless_gone(request, _forward(client, body, engine_model, served_name, limits.engine,
                                                            drain, ticket), drain, ticket)
            except RequestProblem as problem:
                return _refuse(problem)
            except httpx.TransportError:  # the engine died and is being started again (serve.Engine)
                engine_health.gone()
                return _refuse(ENGINE_GONE)
            except Exception:  # a fault of ours: still an answer the client's library reads, the traceback logged
                log.exception("serving a chat request failed")
                return _refuse(RequestProblem(500, "the server failed on this request; its log says why",
                                             code="server_error"))

    return app


def _lifespan(engine_health: EngineHealth, client, fetcher, http_error):
    """The server's life: the engine's health asked at the start and then in the background; the clients closed."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
        await engine_health.ask(client, http_error)
        watching = asyncio.ensure_future(engine_health.watch(client, http_error))
        yield
        watching.cancel()
        await client.aclose()
        await fetcher.aclose()

    return lifespan


def _engine_client(httpx, engine_socket: str):
    """The engine's HTTP client, on its socket. No keep-alive: after an engine-side 500, a kept connection it had
    closed failed the next request of any client with a bare 500 (13 of 20 tries); a new connection on a Unix socket
    costs well under a millisecond."""
    transport = httpx.AsyncHTTPTransport(uds=engine_socket, limits=httpx.Limits(max_keepalive_connections=0))
    return httpx.AsyncClient(base_url="http://engine", transport=transport, timeout=None)


def _too_many(limits: Limits) -> RequestProblem:
    return RequestProblem(429, f"{limits.max_in_flight} requests are in flight, this server's limit; try again shortly",
                          code="rate_limit_exceeded")


ENGINE_GONE = RequestProblem(503, "the model's engine is not answering (it is being restarted); try again shortly",
                             code="engine_unavailable")


def _refuse(problem: RequestProblem):
    from fastapi.responses import JSONResponse

    return JSONResponse(problem.body(), status_code=problem.status)


async def _checked(request, served_name: str, limits: Limits, fetcher, count_tokens, fit) -> dict:
    """The request's body once it passed every check, its remote images inline and no larger than the model takes
    (their sizes counted too)."""
    body = await _checked_body(request, served_name, limits)
    await inline_remote_images(body, limits, fetcher)
    if fit is not None:
        await off_the_loop(fit_images, body, fit)
    if count_tokens is not None:
        tokens = await off_the_loop(lambda: count_tokens(prompt_text(body), image_sizes(body)))
        check_prompt_length(tokens, body, limits)
    return body


def _add_health(app, engine_health: EngineHealth, drain: Drain) -> None:
    """GET /health: 200 while the engine answers its own /health (asked every second in the background: see
    engine_health), else 503 (a probe restarts us); 503 once the server is shutting down (a load balancer sends no
    more)."""
    from fastapi.responses import JSONResponse

    @app.get("/health")
    async def health():
        if drain.draining:
            return JSONResponse({"status": "shutting down"}, status_code=503)
        healthy = engine_health.healthy
        return JSONResponse({"status": "ok" if healthy else "engine not answering"}, status_code=200 if healthy
                            else 503)


def _errors_in_openai_shape(app) -> None:
    """FastAPI's own answers (an unknown path, a method a route does not take) in OpenAI's shape too."""
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    @app.exception_handler(HTTPException)
    async def answer(request, exc):
        problem = RequestProblem(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")
        return JSONResponse(problem.body(), status_code=exc.status_code, headers=exc.headers)


def _require_key(app, limits: Limits) -> None:
    """Every route but /health answers 401 without the API key (when the server has one). A plain ASGI middleware:
    Starlette's BaseHTTPMiddleware hides a client's hang-up from the route (tried: is_disconnected() stayed False)."""
    from fastapi.responses import JSONResponse
    from starlette.datastructures import Headers

    class Gate:
        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] == "http" and scope["path"] != "/health" and not authorized(Headers(scope=scope),
                                                                                          limits):
                problem = RequestProblem(401, "a valid API key is required: send it as 'Authorization: Bearer KEY'",
                                         code="invalid_api_key")
                return await JSONResponse(problem.body(), status_code=problem.status)(scope, receive, send)
            return await self.inner(scope, receive, send)

    app.add_middleware(Gate)


async def _checked_body(request, served_name: str, limits: Limits) -> dict:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise RequestProblem(415, f"the request body must be sent as application/json, not {kind or 'untyped'}")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise RequestProblem(413, f"the request body is {declared} bytes, over this server's limit of "
                                  f"{limits.max_body_bytes}")
    from starlette.requests import ClientDisconnect

    try:
        raw = await asyncio.wait_for(_read_body(request, limits), limits.read_timeout_s)
    except asyncio.TimeoutError:
        raise RequestProblem(408, f"the request body did not arrive within {limits.read_timeout_s:g} s") from None
    except ClientDisconnect:  # gone before its body was read: the engine never sees it, nobody reads the answer
        log.warning("the client hung up before its request was read")
        raise RequestProblem(499, "the client hung up before its request was read") from None
    # Its images are decoded to be checked: in a thread, so that /health, /v1/models and the other clients' requests
    # are answered meanwhile (four requests of 8 PNGs of 4096x4096 held /health 5.8 s on the event loop)
    return await off_the_loop(check_chat_request, raw, served_name, limits)


async def _read_body(request, limits: Limits) -> bytes:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limits.max_body_bytes:
            raise RequestProblem(413, f"the request body is over this server's limit of {limits.max_body_bytes} bytes")
    return raw


async def _unless_gone(request, answer, drain: Drain, ticket, watch_client: bool = True):
    """The answer, unless the client hangs up first or the shutdown's grace ends: then the request to the engine is
    cancelled (its connection closed, which vLLM takes as an abort) and its slot freed; at the grace's end the
    client is refused (a RequestProblem)."""
    from fastapi.responses import Response

    task = asyncio.ensure_future(answer)
    over = asyncio.ensure_future(drain.over.wait())
    try:
        while True:
            done, _ = await asyncio.wait({task, over}, timeout=LOOK_S, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            if over in done:
                await _cancelled(task)
                raise drain.refusal(ticket)
            if watch_client and await request.is_disconnected():
                log.warning("the client hung up: its request to the engine was cancelled")
                await _cancelled(task)
                return Response(status_code=499)  # nginx's "client closed request": nobody reads it
    finally:
        over.cancel()
        task.cancel()  # when this request itself is cancelled; a no-op once it is done


async def _cancelled(task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def _forward(client, body: dict, engine_model: str, served_name: str, engine: Optional[str], drain: Drain,
                   ticket):
    from fastapi.responses import Response, StreamingResponse

    if not body.get("stream") and engine == "transformers":
        return await _collected(client, body, engine_model, served_name, Response)
    forwarded: dict[str, Any] = {**body, "model": engine_model}
    if body.get("stream"):
        upstream = await client.send(client.build_request("POST", CHAT_PATH, json=forwarded), stream=True)
        if upstream.status_code != 200:
            content = await upstream.aread()
            await upstream.aclose()
            return _engine_failed(upstream.status_code, content, Response)
        return StreamingResponse(_relay(upstream, engine_model, served_name, drain, ticket),
                                 status_code=upstream.status_code,
                                 media_type=upstream.headers.get("content-type", "text/event-stream"))
    answer = await client.post(CHAT_PATH, json=forwarded)
    if answer.status_code != 200:
        return _engine_failed(answer.status_code, answer.content, Response)
    return Response(json.dumps({**answer.json(), "model": served_name}).encode(), media_type="application/json")


async def _collected(client, body: dict, engine_model: str, served_name: str, Response):
    """An unstreamed request asked of transformers serve as a stream, its answer put together here: transformers
    serve stops generating when a stream's connection closes, but runs an unstreamed request on to max_tokens for a
    client long gone (the next request waited 27.8 s, issue 45), and after a refusal at shutdown."""
    forwarded = {key: value for key, value in body.items() if key != "stream_options"}
    events = []
    async with client.stream("POST", CHAT_PATH, json={**forwarded, "model": engine_model, "stream": True}) as upstream:
        if upstream.status_code != 200:
            return _engine_failed(upstream.status_code, await upstream.aread(), Response)
        async for line in upstream.aiter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                events.append(json.loads(line[5:]))
    try:
        answer = completion_from_events(events, served_name)
    except ValueError as failed:
        return _engine_failed(500, json.dumps({"detail": str(failed)}).encode(), Response)
    return Response(json.dumps(answer).encode(), media_type="application/json")


def _engine_failed(status: int, content: bytes, Response):
    log.warning("the engine answered %d: %s", status, content[:2000].decode(errors="replace"))
    return Response(json.dumps(engine_error(status, content)).encode(), status_code=status,
                    media_type="application/json")


async def _relay(upstream, engine_model: str, served_name: str, drain: Drain, ticket):
    """The engine's event stream, each event's "model" the served name (the engine's is an internal path). When the
    shutdown's grace ends first, the stream ends with an error event in OpenAI's shape (the head, a 200, is sent
    already; the openai client raises it as an APIError), a half-received event dropped."""
    internal, public = (json.dumps(name)[1:-1].encode() for name in (engine_model, served_name))
    pending = b""
    chunks = upstream.aiter_raw()
    over, following = asyncio.ensure_future(drain.over.wait()), None
    try:
        while True:
            following = asyncio.ensure_future(chunks.__anext__())
            done, _ = await asyncio.wait({following, over}, return_when=asyncio.FIRST_COMPLETED)
            if following not in done:
                await _cancelled(following)
                yield b"data: " + json.dumps(drain.refusal(ticket).body()).encode() + b"\n\n"
                return
            try:
                chunk = following.result()
            except StopAsyncIteration:
                break
            pending += chunk
            events, _, pending = pending.rpartition(b"\n\n")
            if events:
                yield (events + b"\n\n").replace(b'"model":"' + internal + b'"', b'"model":"' + public + b'"')
        if pending:
            yield pending
    finally:  # also when the client hangs up (Starlette cancels the stream)
        over.cancel()
        if following is not None:
            following.cancel()
        await upstream.aclose()
