"""What a chat-completions request may ask of the engine, checked before it is sent: its shape, its fields' ranges,
its images (bytes and pixels before decoding, then decoded; data: URLs, or http(s) URLs of the hosts the operator
allowed, fetched later by serve_app), and its prompt's length against the model's context. Pure functions: each
problem is a RequestProblem in OpenAI's error shape."""

import base64
import binascii
import io
import json
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
    read_timeout_s: float = 30.0  # headers or a body still arriving after this are cut: a half-sent request holds on


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
    if "generation_config" in body:  # transformers serve's own field: its max_new_tokens escaped the limit above
        raise RequestProblem(400, "'generation_config' is not accepted here; use max_tokens, temperature and top_p",
                             "generation_config")
    for key, low, high in (("temperature", 0, 2), ("top_p", 0, 1)):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not low <= value <= high):
            raise RequestProblem(400, f"'{key}' must be a number from {low} to {high}, not {value!r}", key)


def image_parts(message: Any, i: int):
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
        for where, _, url in image_parts(message, i):
            problem = url_problem(url, limits) if isinstance(url, str) else "no image URL"
            if problem:
                raise RequestProblem(400, f"{where}.image_url: {problem}", where, "invalid_image")
    return body


def prompt_text(body: dict) -> str:
    """The text of every message, as the tokenizer counts it (images and the chat template add more tokens)."""
    parts = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        for part in content if isinstance(content, list) else []:
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
    return "\n".join(parts)


def check_prompt_length(tokens: int, body: dict, limits: Limits) -> None:
    """The prompt's text plus the tokens asked for fit the model's context (a prompt 37 times the context ran for
    107 s in the engine before it failed)."""
    if limits.max_context is None:
        return
    asked = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    if tokens + asked > limits.max_context:
        raise RequestProblem(400, f"the prompt's text is {tokens} tokens{f' and max_tokens {asked}' if asked else ''}"
                                  f", over the model's context of {limits.max_context} tokens; send a shorter prompt"
                                  f"{' or ask for fewer tokens' if asked else ''}", "messages", "context_length_exceeded")
