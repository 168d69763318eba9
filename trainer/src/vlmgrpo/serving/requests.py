"""What a chat-completions request may ask of the engine, checked before it is sent: its shape and fields (only
those of allowlist, each in its range), its images (how many; bytes and pixels before decoding, then decoded;
data: URLs, or http(s) URLs of the hosts the operator allowed, fetched later by app.py), and its prompt's length,
text and images, against the model's context. Pure functions: each problem is a RequestProblem in OpenAI's error
shape."""

import base64
import binascii
import io
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Optional

from vlmgrpo.serving.allowlist import Refused, check_fields, content_parts

CHAT_PATH = "/v1/chat/completions"


API_KEY_VARIABLE = "VLMGRPO_API_KEY"


@dataclass(frozen=True)
class Limits:
    """Who may ask, and for how much. The help of a field with one is its `vlmgrpo serve` option's
    (imagegen_contract.options makes the options from these fields)."""
    api_key: Optional[str] = field(default=None, metadata={
        "help": f"Required of every request but /health, as 'Authorization: Bearer KEY' (or {API_KEY_VARIABLE}).",
        "envvar": API_KEY_VARIABLE})
    allowed_media_domains: tuple[str, ...] = field(default=(), metadata={
        "help": "Hosts whose image URLs are fetched (by this server: no redirects, public addresses only); none by "
                "default: images come inline as data: URLs. Repeatable."})
    max_body_bytes: int = field(default=20 * 1024 * 1024, metadata={
        "help": "Bytes a request's body may have; more are answered 413.", "min": 1})
    max_image_bytes: int = field(default=10 * 1024 * 1024, metadata={
        "help": "Bytes one image may have, before it is decoded.", "min": 1})
    max_image_pixels: int = field(default=4096 * 4096, metadata={
        "help": "Pixels (width x height) one image may have, read from its header before it is decoded.", "min": 1})
    # per request: each is decoded here to be checked, whatever its few compressed bytes
    max_images: int = field(default=8, metadata={"help": "Images one request may carry.", "min": 0})
    fetch_timeout_s: float = 10.0
    max_in_flight: int = field(default=64, metadata={
        "help": "Requests served at once; more are answered 429.", "min": 1})
    max_context: Optional[int] = None  # the model's, from its config.json: no request may ask for more tokens
    # headers or a body still arriving after this are cut: a half-sent request holds on
    read_timeout_s: float = field(default=30.0, metadata={
        "help": "Seconds a request's headers and body may take to arrive: a connection still sending its headers "
                "is closed, a body still arriving is answered 408.", "flag": "--read-timeout", "min": 0.1})
    engine: Optional[str] = None  # the engine serving: the fields it fails on are refused (allowlist.ENGINE_FAILS_ON)
    # The model's special tokens (serve.special_tokens): text holding one is refused, as the engine would read it as
    # the token (an image placeholder without its image fails there; a turn marker forges a turn)
    special_tokens: tuple[str, ...] = ()


# What an image may be: OpenAI's (PNG, JPEG, WEBP, a GIF that is not animated), by the format the bytes say. The
# engine decodes every frame of an animation: a 83 KB GIF of 100 frames of 2048x2048 took it from 0.82 to 3.30 GB.
IMAGE_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}


class RequestProblem(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def body(self) -> dict:
        kind = "server_error" if self.status >= 500 else "invalid_request_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


def image_problem(raw: bytes, limits: Limits) -> Optional[str]:
    """Why these image bytes may not go to the engine: over the byte or pixel limit (read from the header, before
    decoding: a decompression bomb is refused unopened), or not an image that decodes; None when they may."""
    if len(raw) > limits.max_image_bytes:
        return f"the image is {len(raw)} bytes, over this server's limit of {limits.max_image_bytes}"
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw)) as image:
            if image.format not in IMAGE_FORMATS:
                return (f"the image is {image.format or 'of a format this server does not take'}; send PNG, JPEG, "
                        "WEBP or a GIF that is not animated")
            if getattr(image, "is_animated", False):
                return ("the image is animated (more than one frame), which the engine would decode frame by frame; "
                        "send one still image")
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
    media_type = header[len("data:"):].split(";")[0].strip().lower()
    if media_type not in IMAGE_FORMATS.values():
        return (f"a data: URL of type {media_type or 'none'} is not an image; send "
                f"{', '.join(sorted(IMAGE_FORMATS.values()))}")
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


def image_parts(body: dict):
    """(where, the part, its url) of each image part of a request check_chat_request passed."""
    for i, message in enumerate(body["messages"]):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            if part["type"] == "image_url":
                yield f"messages[{i}].content[{j}]", part, part["image_url"]["url"]


def _parsed(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
        # What the engine is sent is this body encoded again: a lone surrogate (\ud800) parses but does not encode
        json.dumps(body, ensure_ascii=False).encode()
    except RecursionError:  # nested deeper than Python's stack: json's own error, and no ValueError
        raise RequestProblem(400, "the request body is nested too deeply to be a chat request") from None
    except UnicodeEncodeError as exc:
        raise RequestProblem(400, f"the request body's text is not valid Unicode ({exc.reason})") from None
    except (UnicodeError, ValueError) as exc:
        raise RequestProblem(400, f"the request body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise RequestProblem(400, "the request body must be a JSON object")
    return body


def check_chat_request(raw: bytes, served_name: str, limits: Limits = Limits()) -> dict:
    """The request body as a dict, or a RequestProblem saying what is wrong and where: only the fields and parts of
    allowlist, each checked; every image (its source, bytes, pixels) and no more of them than the limit."""
    body = _parsed(raw)
    model = body.get("model")
    if model != served_name:
        raise RequestProblem(404, f"the model {model!r} is not served here; this server serves {served_name!r}",
                             "model", "model_not_found")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestProblem(400, "'messages' must be a non-empty list", "messages")
    try:
        check_fields(body, limits.max_context, limits.engine)
        for i, message in enumerate(messages):
            content_parts(message, i)
    except Refused as refused:
        raise RequestProblem(400, str(refused), refused.where) from None
    images = list(image_parts(body))
    if len(images) > limits.max_images:
        raise RequestProblem(400, f"the request has {len(images)} images, over this server's limit of "
                                  f"{limits.max_images}", "messages", "invalid_image")
    for where, _, url in images:
        problem = url_problem(url, limits)
        if problem:
            raise RequestProblem(400, f"{where}.image_url: {problem}", where, "invalid_image")
    for where, text in texts(body):
        token = next((token for token in limits.special_tokens if token in text), None)
        if token:
            raise RequestProblem(400, f"{where} holds {token!r}, one of the model's special tokens, which the engine "
                                      "would read as that token; leave it out of the text", where)
    return body


def texts(body: dict):
    """(where, text) of each text a request's messages carry: string contents, text parts, names."""
    for i, message in enumerate(body["messages"]):
        content = message.get("content")
        if isinstance(content, str):
            yield f"messages[{i}].content", content
        for j, part in enumerate(content if isinstance(content, list) else []):
            if part["type"] == "text":
                yield f"messages[{i}].content[{j}].text", part["text"]
        if isinstance(message.get("name"), str):
            yield f"messages[{i}].name", message["name"]


def image_sizes(body: dict) -> list[tuple[int, int]]:
    """(height, width) of each image of a request whose images are all inline and checked, as processors take them."""
    from PIL import Image

    sizes = []
    for _, _, url in image_parts(body):
        with Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))) as image:
            sizes.append((image.height, image.width))
    return sizes


def prompt_text(body: dict) -> str:
    """Every text the chat template is given, as the tokenizer counts it: string contents, text parts and names
    (images and the template itself add more tokens)."""
    return "\n".join(text for _, text in texts(body))


def check_prompt_length(tokens: int, body: dict, limits: Limits) -> None:
    """The prompt's tokens (its text, and its images where the model's processor says how many each makes) plus
    the tokens asked for fit the model's context: a longer prompt is work the engine does before it fails."""
    if limits.max_context is None:
        return
    asked = body.get("max_completion_tokens") or body.get("max_tokens") or 0  # the engines' order
    if tokens + asked > limits.max_context:
        raise RequestProblem(400, f"the prompt is {tokens} tokens{f' and max_tokens {asked}' if asked else ''}, over "
                                  f"the model's context of {limits.max_context} tokens; send a shorter prompt"
                                  f"{' or ask for fewer tokens' if asked else ''}", "messages",
                             "context_length_exceeded")


def engine_error(status: int, content: bytes) -> dict:
    """An engine's failure in OpenAI's error shape: vLLM's is in it already (or in its older flat form), transformers
    serve answers {"detail": ...} for what it refuses and bare text for what it fails on."""
    try:
        answer = json.loads(content)
    except (UnicodeError, ValueError, RecursionError):
        answer = None
    error = answer.get("error") if isinstance(answer, dict) and isinstance(answer.get("error"), dict) else answer
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("type") if isinstance(error.get("type"), str) else None
        problem = RequestProblem(status, error["message"], error.get("param"), error.get("code"))
        return {"error": {**problem.body()["error"], **({"type": kind} if kind else {})}}
    said = answer["detail"] if isinstance(answer, dict) and "detail" in answer else content.decode(errors="replace")
    return RequestProblem(status, f"the model's engine answered {status}: {str(said)[:1000]}",
                          code="engine_error").body()


def completion_from_events(events: list[dict], served_name: str) -> dict:
    """A chat completion put together from the events of a stream (app.py asks transformers serve for a stream when
    the client asked for none: see _collected there); ValueError when the stream carried an error or no answer."""
    for event in events:
        if "error" in event:
            raise ValueError(str(event["error"]))
    chunks = [event for event in events if event.get("choices")]
    if not chunks:
        raise ValueError("the engine's stream carried no answer")
    deltas = [chunk["choices"][0].get("delta") or {} for chunk in chunks]
    finish = [chunk["choices"][0].get("finish_reason") for chunk in chunks if chunk["choices"][0].get("finish_reason")]
    usage = [event["usage"] for event in events if event.get("usage")]
    return {"id": chunks[0].get("id"), "object": "chat.completion", "created": chunks[0].get("created"),
            "model": served_name, "choices": [{"index": 0, "logprobs": None, "finish_reason": (finish or [None])[-1],
                                               "message": {"role": "assistant", "content": "".join(
                                                   delta.get("content") or "" for delta in deltas)}}],
            "usage": (usage or [None])[-1]}
