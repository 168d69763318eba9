"""The thin layer in front of the serving engine: checks the engine lacks, then the request as it came.

Errors are in OpenAI's shape ({"error": {"message", "type", "param", "code"}}) so the official client raises them
with their message: 400 for a body that is not JSON or an image that does not decode (transformers serve answers
those with a 500 and a traceback in its log), 404 for a model name this server does not serve (the name clients
use is --served-model-name; the engine's own name stays internal).
"""


import base64
import binascii
import contextlib
import io
import json
from typing import Any, Optional

CHAT_PATH = "/v1/chat/completions"


class RequestProblem(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": "invalid_request_error", "param": self.param,
                          "code": self.code}}


def _image_problem(url: str) -> Optional[str]:
    """Why a data: URL's image does not decode, or None (other URLs are the engine's to fetch)."""
    if not url.startswith("data:"):
        return None
    header, _, payload = url.partition(",")
    if ";base64" not in header:
        return "a data: URL for an image must be base64 (data:image/png;base64,...)"
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        return f"its base64 does not decode ({exc})"
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        return f"the image does not decode ({exc.__class__.__name__}: {exc})"
    return None


def check_chat_request(raw: bytes, served_name: str) -> dict:
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
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") == "image_url":
                image_url = part.get("image_url")
                url = image_url.get("url") if isinstance(image_url, dict) else image_url
                problem = _image_problem(url) if isinstance(url, str) else "no image URL"
                if problem:
                    raise RequestProblem(400, f"messages[{i}].content[{j}].image_url: {problem}",
                                         f"messages[{i}].content[{j}]", "invalid_image")
    return body


def build_app(engine_url: str, served_name: str, engine_model: str):
    import httpx2 as httpx  # openai's HTTP client, which transformers serve needs: installed with it
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    client = httpx.AsyncClient(base_url=engine_url, timeout=None)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await client.aclose()

    app = FastAPI(title="vlmgrpo serve", docs_url=None, redoc_url=None, lifespan=lifespan)

    @app.get("/health")
    async def health():
        try:
            answer = await client.get("/health", timeout=5)
            healthy = answer.status_code == 200
        except httpx.HTTPError:
            healthy = False
        return JSONResponse({"status": "ok" if healthy else "engine not answering"}, status_code=200 if healthy
                            else 503)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "vlmgrpo"}]}

    @app.post(CHAT_PATH)
    async def chat(request: Request):
        try:
            body = check_chat_request(await request.body(), served_name)
        except RequestProblem as problem:
            return JSONResponse(problem.body(), status_code=problem.status)
        forwarded: dict[str, Any] = {**body, "model": engine_model}
        if body.get("stream"):
            upstream = await client.send(client.build_request("POST", CHAT_PATH, json=forwarded), stream=True)
            return StreamingResponse(_relay(upstream), status_code=upstream.status_code,
                                     media_type=upstream.headers.get("content-type", "text/event-stream"))
        answer = await client.post(CHAT_PATH, json=forwarded)
        content = answer.content
        if answer.status_code == 200:
            content = json.dumps({**answer.json(), "model": served_name}).encode()
        return Response(content, status_code=answer.status_code,
                        media_type=answer.headers.get("content-type", "application/json"))

    return app


async def _relay(upstream):
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    finally:
        await upstream.aclose()
