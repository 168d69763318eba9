"""SFT data: chat rows in the formats fine-tuning users have, validated up front, images loaded lazily.

Three row forms, in .jsonl files or JSON lists, mixed freely:
  messages (OpenAI):  {"messages": [{"role": "system" | "user" | "assistant" | "tool", "content": "..." | [parts]}]}
                      -- parts: {"type": "text", "text": "..."} and {"type": "image"}
  ShareGPT:           {"conversations": [{"from": "human" | "gpt" | "system", "value": "..."}], "system": "..."}
                      -- VLM-R1's rows included ("user"/"assistant" work too)
  Alpaca:             {"instruction": "...", "input": "...", "output": "...", "system": "...", "history": [[q, a]]}
Images: the row's "image" or "images" (a path or a list), relative to the dataset's image root as in `train`; each
goes where its <image> placeholder (or {"type": "image"} part) is, in order; without any, the images go before the
first user turn's text. Every row is turned into one list of messages whose content is text with <image>
placeholders, the form both a text-only model (plain text) and a vision-language model (parts) are fed from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from vlmgrpo.data.datasets import PLACEHOLDER, DatasetSpec, content_parts, load_rgb, row_image_paths

ROLES = ("system", "user", "assistant", "tool")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
FORMATS = "'messages' (OpenAI chat), 'conversations' (ShareGPT) or 'instruction'/'output' (Alpaca)"


@dataclass
class ChatSample:
    location: str  # file:line
    messages: list[dict[str, str]]  # {"role", "content"}: text with an <image> placeholder per image
    image_paths: list[str]  # empty for a text-only row


class RowProblem(Exception):
    """One problem with a row, raised while converting it."""


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise RowProblem(f"{where} must be a string, got {type(value).__name__}")
    return value


def _content(content: Any, where: str) -> str:
    """OpenAI content (a string or a list of text and image parts) as text with <image> placeholders."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RowProblem(f"{where} must be a string or a list of parts, got {type(content).__name__}")
    pieces = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            pieces.append(_text(part.get("text"), f"{where}[{index}].text"))
        elif kind == "image":
            pieces.append(PLACEHOLDER)
        else:
            raise RowProblem(f"{where}[{index}]: a part must be {{\"type\": \"text\", \"text\": ...}} or "
                             "{\"type\": \"image\"} (the image itself in the row's \"images\")")
    return "".join(pieces)


def _from_messages(record: dict) -> list[dict[str, str]]:
    turns = record["messages"]
    if not isinstance(turns, list):
        raise RowProblem("'messages' must be a list of {\"role\", \"content\"}")
    messages = []
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
            raise RowProblem(f"messages[{index}] must be an object with 'role' and 'content'")
        if turn["role"] not in ROLES:
            raise RowProblem(f"messages[{index}]: role {turn['role']!r} is not one of {', '.join(ROLES)}")
        messages.append({"role": turn["role"], "content": _content(turn["content"], f"messages[{index}].content")})
    return messages


def _system(record: dict) -> list[dict[str, str]]:
    system = record.get("system")
    return [{"role": "system", "content": _text(system, "'system'")}] if system else []


def _from_sharegpt(record: dict) -> list[dict[str, str]]:
    turns = record["conversations"]
    if not isinstance(turns, list):
        raise RowProblem("'conversations' must be a list of {\"from\", \"value\"}")
    messages = _system(record)
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
            raise RowProblem(f"conversations[{index}] must be an object with 'from' and 'value'")
        role = SHAREGPT_ROLES.get(turn["from"])
        if role is None:
            raise RowProblem(f"conversations[{index}]: 'from' {turn['from']!r} is not one of "
                             f"{', '.join(SHAREGPT_ROLES)}")
        messages.append({"role": role, "content": _text(turn["value"], f"conversations[{index}].value")})
    return messages


def _from_alpaca(record: dict) -> list[dict[str, str]]:
    """The prompt is the instruction, then a new line and the input when there is one (as LLaMA-Factory joins them)."""
    messages = _system(record)
    history = record.get("history") or []
    if not isinstance(history, list) or not all(isinstance(p, list) and len(p) == 2 for p in history):
        raise RowProblem("'history' must be a list of [instruction, answer] pairs")
    for index, (question, answer) in enumerate(history):
        messages.append({"role": "user", "content": _text(question, f"history[{index}][0]")})
        messages.append({"role": "assistant", "content": _text(answer, f"history[{index}][1]")})
    prompt = _text(record["instruction"], "'instruction'")
    extra = _text(record.get("input") or "", "'input'")
    messages.append({"role": "user", "content": f"{prompt}\n{extra}" if extra else prompt})
    messages.append({"role": "assistant", "content": _text(record["output"], "'output'")})
    return messages


def row_messages(record: dict) -> list[dict[str, str]]:
    if "messages" in record:
        return _from_messages(record)
    if "conversations" in record:
        return _from_sharegpt(record)
    if "instruction" in record and "output" in record:
        return _from_alpaca(record)
    raise RowProblem(f"row has none of {FORMATS}")


def _place_images(messages: list[dict[str, str]], count: int) -> None:
    """Images without placeholders go before the first user turn's text (as `train` does with a question)."""
    placeholders = sum(m["content"].count(PLACEHOLDER) for m in messages)
    if placeholders == 0 and count:
        first_user = next((m for m in messages if m["role"] == "user"), None)
        if first_user is None:
            raise RowProblem(f"{count} image(s) but no user turn to put them in")
        first_user["content"] = PLACEHOLDER * count + first_user["content"]
    elif placeholders != count:
        raise RowProblem(f"{placeholders} {PLACEHOLDER} placeholder(s) for {count} image(s)")


def validate_chat_row(record: Any, spec: DatasetSpec, line: int, sizes: dict[str, Any]
                      ) -> tuple[Optional[ChatSample], list[str]]:
    where = f"{spec.path}:{line}"
    if not isinstance(record, dict):
        return None, [f"{where}: row is not a JSON object"]
    problems = []
    paths, problem = row_image_paths(record, spec.image_root)
    if problem:
        problems.append(problem)
    problems += [sizes[path][1] for path in paths if sizes[path][1]]
    try:
        messages = row_messages(record)
        if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
            raise RowProblem("no assistant turn with text: the row has nothing to learn from")
        _place_images(messages, len(paths))
    except RowProblem as exc:
        problems.append(str(exc))
    if problems:
        return None, [f"{where}: {p}" for p in problems]
    return ChatSample(where, messages, paths), []


# --- the training dataset ------------------------------------------------------------------------------------


def to_sft_dataset(samples: list[ChatSample], with_images: bool):
    """A datasets.Dataset of TRL's conversational form: "messages", and for a vision-language model "images" too,
    opened only when a row is read (TRL then prepares each batch on the fly)."""
    from datasets import Dataset

    if not with_images:
        return Dataset.from_list([{"messages": s.messages} for s in samples])
    # Stored as paths under the column names TRL keeps (it drops the others before the transform runs).
    rows = [{"messages": json.dumps(s.messages), "images": s.image_paths} for s in samples]
    # A module-level function, not a lambda: data loader workers may need to pickle the transform.
    return Dataset.from_list(rows).with_transform(_materialize)


def _materialize(batch: dict[str, list]) -> dict[str, list]:
    messages = [[{"role": m["role"], "content": content_parts(m["content"])} for m in json.loads(row)]
                for row in batch["messages"]]
    return {"messages": messages, "images": [[load_rgb(p) for p in paths] for paths in batch["images"]]}
