"""The thin layer in front of the serving engine: who may ask, what it may ask for, then the request as it came.

Errors are in OpenAI's shape ({"error": {"message", "type", "param", "code"}}) so the official client raises them
with their message: 400 for a body that is not JSON, a field out of range or an image that does not decode
(transformers serve answers those with a 500 and a traceback in its log), 404 for a model name this server does not
serve (the name clients use is --served-model-name; the engine's own name stays internal), 401 without the API key,
413 for a body over the limit, 415 for a body that is not JSON (a browser page can send text/plain without asking),
429 when the requests in flight are at the limit.

Images reach the engine inline only: a data: URL is checked (bytes and pixels before it is decoded, then decoded),
an http(s) URL is fetched here when its host is one the operator allowed (--allowed-media-domains, vLLM's name for
it), with redirects off, loopback and private addresses refused, a timeout and a byte limit, then sent on as a data:
URL. The engine never opens a path or fetches a URL of a client's choosing.
"""


import asyncio
import base64
import binascii
import contextlib
import hmac
import io
import ipaddress
import json
import socket
import urllib.parse
from dataclasses import dataclass
from typing import Any, Optional

CHAT_PATH = "/v1/chat/completions"
ROLES = ("system", "user", "assistant", "tool", "developer")


@dataclass(frozen=True)
class Limits:
    api_key: Optional[str] = None  # required on every route but /health when set
    allowed_media_domains: tuple[str, ...] = ()  # hosts whose image URLs are fetched; none by default
    max_body_bytes: int = 20 * 1024 * 1024
    max_image_bytes: int = 10 * 1024 * 1024
    max_image_pixels: int = 4096 * 4096
    fetch_timeout_s: float = 10.0
    max_in_flight: int = 64
    max_context: Optional[int] = None  # the model's, from its config.json: no request may ask for more tokens


class RequestProblem(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": "invalid_request_error", "param": self.param,
                          "code": self.code}}


def image_problem(raw: bytes, limits: Limits) -> Optional[str]:
    """Why these image bytes may not go to the engine: over the byte or pixel limit (read from the header, before
    decoding: a decompression bomb is refused unopened), or not an image that decodes; None when they may."""
    if len(raw) > limits.max_image_bytes:
        return f"the image is {len(raw)} bytes, over this server's limit of {limits.max_image_bytes}"
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw)) as image:
            width, height = image.size
            if width * height > limits.max_image_pixels:
                return (f"the image is {width} x {height} pixels, over this server's limit of "
                        f"{limits.max_image_pixels}")
            image.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        return f"the image does not decode ({exc.__class__.__name__}: {exc})"
    return None


def _data_url_problem(url: str, limits: Limits) -> Optional[str]:
    header, _, payload = url.partition(",")
    if ";base64" not in header:
        return "a data: URL for an image must be base64 (data:image/png;base64,...)"
    if len(payload) > limits.max_image_bytes * 4 // 3 + 4:
        return f"the image is over this server's limit of {limits.max_image_bytes} bytes"
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        return f"its base64 does not decode ({exc})"
    return image_problem(raw, limits)


def url_problem(url: str, limits: Limits) -> Optional[str]:
    """Why an image URL is refused before anything is fetched; None for data: URLs that check out and for http(s)
    URLs of an allowed host (fetched later)."""
    if url.startswith("data:"):
        return _data_url_problem(url, limits)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ("only data: URLs, or http(s) URLs of the hosts this server allows, are taken; it opens no file of "
                "its own")
    if parts.hostname.lower() not in limits.allowed_media_domains:
        return (f"image URLs of {parts.hostname} are not fetched here (the server's --allowed-media-domains: "
                f"{', '.join(limits.allowed_media_domains) or 'none'}); send the image inline as a data: URL")
    return None


def _int_in(body: dict, key: str, low: int, high: Optional[int] = None) -> None:
    value = body.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"from {low}" + (f" to {high}" if high is not None else "")
        raise RequestProblem(400, f"'{key}' must be a whole number {span}, not {value!r}", key)


def _check_fields(body: dict, limits: Limits) -> None:
    _int_in(body, "max_tokens", 1, limits.max_context)  # 10^9 tokens at temperature 0 held the engine for good
    _int_in(body, "max_completion_tokens", 1, limits.max_context)
    _int_in(body, "n", 1, 1)  # one choice per request: the engines here give one
    for key, low, high in (("temperature", 0, 2), ("top_p", 0, 1)):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not low <= value <= high):
            raise RequestProblem(400, f"'{key}' must be a number from {low} to {high}, not {value!r}", key)


def _images(message: Any, i: int):
    """(where, the part's image_url holder, url) of each image part of messages[i], checking the message's shape."""
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise RequestProblem(400, f"messages[{i}] must be an object with a 'role' of {', '.join(ROLES)}",
                             f"messages[{i}]")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise RequestProblem(400, f"messages[{i}].content must be text or a list of parts", f"messages[{i}]")
    for j, part in enumerate(content if isinstance(content, list) else []):
        if not isinstance(part, dict):
            raise RequestProblem(400, f"messages[{i}].content[{j}] must be an object", f"messages[{i}].content[{j}]")
        if part.get("type") == "image_url":
            holder = part.get("image_url")
            url = holder.get("url") if isinstance(holder, dict) else holder
            yield f"messages[{i}].content[{j}]", part, url


def check_chat_request(raw: bytes, served_name: str, limits: Limits = Limits()) -> dict:
    """The request body as a dict, or a RequestProblem saying what is wrong and where."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestProblem(400, f"the request body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise RequestProblem(400, "the request body must be a JSON object")
    model = body.get("model")
    if model != served_name:
        raise RequestProblem(404, f"the model {model!r} is not served here; this server serves {served_name!r}",
                             "model", "model_not_found")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestProblem(400, "'messages' must be a non-empty list", "messages")
    _check_fields(body, limits)
    for i, message in enumerate(messages):
        for where, _, url in _images(message, i):
            problem = url_problem(url, limits) if isinstance(url, str) else "no image URL"
            if problem:
                raise RequestProblem(400, f"{where}.image_url: {problem}", where, "invalid_image")
    return body


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
    for i, message in enumerate(body["messages"]):
        for where, part, url in _images(message, i):
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
            problem = problem or image_problem(raw, limits)
            if problem:
                raise RequestProblem(400, f"{where}.image_url: {problem}", where, "invalid_image")
            part["image_url"] = {"url": f"data:{_media_type(raw)};base64," + base64.b64encode(raw).decode()}


def _media_type(raw: bytes) -> str:
    from PIL import Image

    with Image.open(io.BytesIO(raw)) as image:
        return Image.MIME.get(image.format, "application/octet-stream")


def authorized(headers, limits: Limits) -> bool:
    if not limits.api_key:
        return True
    given = headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {limits.api_key}".encode())


def build_app(engine_url: str, served_name: str, engine_model: str, limits: Limits = Limits()):
    import httpx2 as httpx  # openai's HTTP client, which transformers serve needs: installed with it
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    # No keep-alive to the engine: after an engine-side 500, a kept connection it had closed failed the next request
    # of any client with a bare 500 (13 of 20 tries); a new connection on loopback costs well under a millisecond.
    client = httpx.AsyncClient(base_url=engine_url, timeout=None, limits=httpx.Limits(max_keepalive_connections=0))
    fetcher = httpx.AsyncClient(follow_redirects=False)
    in_flight = asyncio.Semaphore(limits.max_in_flight)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await client.aclose()
        await fetcher.aclose()

    app = FastAPI(title="vlmgrpo serve", docs_url=None, redoc_url=None, lifespan=lifespan)
    _require_key(app, limits)

    def refuse(problem: RequestProblem):
        return JSONResponse(problem.body(), status_code=problem.status)

    @app.get("/health")
    async def health():
        try:
            answer = await client.get("/health", timeout=5)
            healthy = answer.status_code == 200
        except httpx.HTTPError:
            healthy = False
        return JSONResponse({"status": "ok" if healthy else "engine not answering"}, status_code=200 if healthy
                            else 503)

    app.get("/v1/models")(lambda: {"object": "list", "data": [{"id": served_name, "object": "model",
                                                                "owned_by": "vlmgrpo"}]})

    @app.post(CHAT_PATH)
    async def chat(request: Request):
        if in_flight.locked():
            return refuse(RequestProblem(429, f"{limits.max_in_flight} requests are in flight, this server's limit; "
                                              "try again shortly", code="rate_limit_exceeded"))
        async with in_flight:
            try:
                body = await _checked_body(request, served_name, limits)
                await inline_remote_images(body, limits, fetcher)
            except RequestProblem as problem:
                return refuse(problem)
            return await _forward(client, body, engine_model, served_name, Response, StreamingResponse)

    return app


def _require_key(app, limits: Limits) -> None:
    """Every route but /health answers 401 without the API key (when the server has one)."""
    from fastapi.responses import JSONResponse

    @app.middleware("http")
    async def gate(request, call_next):
        if request.url.path != "/health" and not authorized(request.headers, limits):
            problem = RequestProblem(401, "a valid API key is required: send it as 'Authorization: Bearer KEY'",
                                     code="invalid_api_key")
            return JSONResponse(problem.body(), status_code=problem.status)
        return await call_next(request)


async def _checked_body(request, served_name: str, limits: Limits) -> dict:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise RequestProblem(415, f"the request body must be sent as application/json, not {kind or 'untyped'}")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise RequestProblem(413, f"the request body is {declared} bytes, over this server's limit of "
                                  f"{limits.max_body_bytes}")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limits.max_body_bytes:
            raise RequestProblem(413, f"the request body is over this server's limit of {limits.max_body_bytes} bytes")
    return check_chat_request(raw, served_name, limits)


async def _forward(client, body: dict, engine_model: str, served_name: str, Response, StreamingResponse):
    forwarded: dict[str, Any] = {**body, "model": engine_model}
    if body.get("stream"):
        upstream = await client.send(client.build_request("POST", CHAT_PATH, json=forwarded), stream=True)
        return StreamingResponse(_relay(upstream, engine_model, served_name), status_code=upstream.status_code,
                                 media_type=upstream.headers.get("content-type", "text/event-stream"))
    answer = await client.post(CHAT_PATH, json=forwarded)
    content = answer.content
    if answer.status_code == 200:
        content = json.dumps({**answer.json(), "model": served_name}).encode()
    return Response(content, status_code=answer.status_code,
                    media_type=answer.headers.get("content-type", "application/json"))


async def _relay(upstream, engine_model: str, served_name: str):
    """The engine's event stream, each event's "model" the served name (the engine's is an internal path)."""
    internal, public = (json.dumps(name)[1:-1].encode() for name in (engine_model, served_name))
    pending = b""
    try:
        async for chunk in upstream.aiter_raw():
            pending += chunk
            events, _, pending = pending.rpartition(b"\n\n")
            if events:
                yield (events + b"\n\n").replace(b'"model":"' + internal + b'"', b'"model":"' + public + b'"')
        if pending:
            yield pending
    finally:
        await upstream.aclose()
