"""What of a chat-completions request may reach the engine: the fields, message keys and content-part types named
here, each with the values it may take; anything else is refused by name, never passed on unchecked.

The engines act on more than this server checks: transformers serve renders a client's own chat template and
processor settings (chat_template_kwargs), and loads input_image, video_url and input_audio parts from any path or
URL; vLLM takes a template, processor and media settings per request too. Only text and image_url parts are
accepted (the image checks see every image), and every text part is counted in the prompt's length.
Pure: each problem is a Refused naming where it is."""

from typing import Any, Callable, Optional

ROLES = ("system", "user", "assistant", "tool", "developer")
MESSAGE_KEYS = ("role", "content", "name")
PART_TYPES = ("text", "image_url")
MAX_SEED = 2 ** 63 - 1  # torch's and vLLM's generators take a 64-bit seed: a larger one failed inside the engine
MAX_STOPS = 4  # OpenAI's limit
# A stop string is looked for in the answer as it grows (transformers serve makes a table of every token of the
# vocabulary by its length): a phrase is what a stop is for
MAX_STOP_CHARS = 100
CONTEXT = -1  # as a bound: the model's context (Limits.max_context), or no bound when it does not say

# Why a field OpenAI's API has is still refused here, where the reason is not "this server does not check it"
REFUSED_WHY = {
    "generation_config": "use max_tokens, temperature and top_p",  # its max_new_tokens escaped the limit on them
    "chat_template_kwargs": "the chat template and the processor's settings are the server's",
    "chat_template": "the chat template is the server's",
    "tools": "the model is not served with tools (their schemas would go into the prompt unchecked)",
    "response_format": "structured output is not offered here (vLLM compiles the client's schema; transformers "
                       "serve ignores it)",
    "logit_bias": "token ids are the engine's",
}
# Fields an engine fails on (a 500 from it), refused when it is the one serving
ENGINE_FAILS_ON = {
    "transformers": {"stop": "transformers serve fails on stop strings for a model with images (it gives them the "
                             "processor where the tokenizer goes); cut the answer at the stop on your side"},
}
PART_WHY = {
    "input_text": "the Responses API's name: send it as a 'text' part",
    "input_image": "the Responses API's name: send it as an 'image_url' part",
}

# A check: (value, the model's context or None) -> what the value must be when it is not, else None
Check = Callable[[Any, Optional[int]], Optional[str]]


class Refused(ValueError):
    def __init__(self, where: str, why: str):
        super().__init__(why)
        self.where = where


def _whole(low: int, high: Optional[int] = None) -> Check:
    def check(value, context):
        top = context if high == CONTEXT else high
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (top is not None and value > top):
            return f"a whole number from {low}" + (f" to {top}" if top is not None else "")
        return None
    return check


def _number(low: float, high: float) -> Check:
    def check(value, context):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            return f"a number from {low} to {high}"
        return None
    return check


def _boolean(value, context):
    return None if isinstance(value, bool) else "true or false"


def _text(value, context):
    return None if isinstance(value, str) else "a string"


def _stop(value, context):
    stops = [value] if isinstance(value, str) else value
    if (not isinstance(stops, list) or not 1 <= len(stops) <= MAX_STOPS
            or not all(isinstance(s, str) and 1 <= len(s) <= MAX_STOP_CHARS for s in stops)):
        return f"a string, or a list of up to {MAX_STOPS}, each of 1 to {MAX_STOP_CHARS} characters"
    return None


def _stream_options(value, context):
    if not isinstance(value, dict) or set(value) - {"include_usage"} or _boolean(value.get("include_usage"), context):
        return '{"include_usage": true or false}'
    return None


# Every field served, beside "model" and "messages" (checked on their own), with what it may be. A null is as if the
# field were not sent.
FIELDS: dict[str, Check] = {
    "max_tokens": _whole(1, CONTEXT),  # 10^9 tokens at temperature 0 held the engine for good
    "max_completion_tokens": _whole(1, CONTEXT),
    "n": _whole(1, 1),  # one choice per request: the engines here give one
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    # From 0, not OpenAI's -2: a negative penalty asks for repetition, and transformers serve turns a
    # frequency_penalty of -1 or below into a repetition penalty the engine fails on
    "frequency_penalty": _number(0, 2),
    "presence_penalty": _number(0, 2),
    "seed": _whole(0, MAX_SEED),
    "stop": _stop,
    "stream": _boolean,
    "stream_options": _stream_options,
    "logprobs": _boolean,  # what the model already computed; transformers serve leaves them out
    "top_logprobs": _whole(0, 20),  # OpenAI's range, and vLLM's default --max-logprobs
    "user": _text,  # the end user's id, for the operator's own logs: no engine renders it
}


def check_fields(body: dict, context: Optional[int], engine: Optional[str] = None) -> None:
    """Every top-level field is "model", "messages" or one of FIELDS with a value it may have, and not one the
    engine fails on."""
    fails_on = ENGINE_FAILS_ON.get(engine or "", {})
    for key, value in body.items():
        if key in ("model", "messages"):
            continue
        if key in fails_on and value is not None:
            raise Refused(key, f"'{key}' is not served by this server's engine: {fails_on[key]}")
        if key not in FIELDS:
            why = REFUSED_WHY.get(key, "this server passes on only the fields it checks: model, messages, "
                                       + ", ".join(FIELDS))
            raise Refused(key, f"'{key}' is not accepted here; {why}")
        must = None if value is None else FIELDS[key](value, context)
        if must:
            raise Refused(key, f"'{key}' must be {must}, not {value!r}")


def content_parts(message: Any, i: int) -> list[tuple[str, dict]]:
    """(where, part) of each part of messages[i], once the message and every part are of a shape served here."""
    where = f"messages[{i}]"
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise Refused(where, f"{where} must be an object with a 'role' of {', '.join(ROLES)}")
    for key in message:
        if key not in MESSAGE_KEYS:
            raise Refused(f"{where}.{key}", f"{where}.{key} is not accepted here; a message has "
                                            f"{', '.join(MESSAGE_KEYS)}")
    if message.get("name") is not None and not isinstance(message["name"], str):
        raise Refused(f"{where}.name", f"{where}.name must be a string")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise Refused(where, f"{where}.content must be text or a list of parts")
    parts = [(f"{where}.content[{j}]", part) for j, part in enumerate(content if isinstance(content, list) else [])]
    for at, part in parts:
        _check_part(at, part)
    return parts


def _check_part(where: str, part: Any) -> None:
    if not isinstance(part, dict):
        raise Refused(where, f"{where} must be an object")
    kind = part.get("type")
    if kind not in PART_TYPES:
        why = PART_WHY.get(kind, "this server takes text and images only")
        raise Refused(where, f"{where}: a part of type {kind!r} is not accepted here ({why}); a part's type is "
                             f"{' or '.join(PART_TYPES)}")
    extra = set(part) - {"type", kind}
    if extra:
        raise Refused(where, f"{where}: {', '.join(sorted(extra))} is not accepted in a {kind} part")
    if kind == "text" and not isinstance(part.get("text"), str):
        raise Refused(where, f"{where}.text must be a string")
    holder = part.get("image_url")
    if kind == "image_url" and (not isinstance(holder, dict) or not isinstance(holder.get("url"), str)
                                or set(holder) - {"url", "detail"}
                                or holder.get("detail", "auto") not in ("auto", "low", "high")):
        raise Refused(where, f'{where}.image_url must be {{"url": "...", "detail": "auto", "low" or "high" (or '
                             f'none)}}')
