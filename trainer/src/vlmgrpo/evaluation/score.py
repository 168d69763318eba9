"""`vlmgrpo score`: the configured rewards on given completions, without training.

For a user whose reward is stuck at 0: dump a few completions (or write them by hand), score them, and see which
reward rejects which text. The rewards receive what they receive in training: the row's prompt and columns, the
completion as an assistant message, and its token ids.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Callable, Iterator

from vlmgrpo.data.datasets import LoadedData, read_records
from vlmgrpo.data.rec import Sample, to_hf_dataset
from vlmgrpo.errors import DataError
from vlmgrpo.evaluation.settings import ScoringParts
from vlmgrpo.models.loading import answer_space_and_resize, load_processor
from vlmgrpo.rewards import build_rewards

EXPECTED_LINE = '{"id": <a data row\'s id>, "completion": "<text>"}'
# `dump_completions: true` writes {"step", "row": file:line, "completion", "rewards"}: those lines are read too.


def _rows_named(record: dict, by_id: dict, by_location: dict) -> tuple[Any, list[int]]:
    if "id" in record:
        return record["id"], by_id.get(json.dumps(record["id"]), [])
    return record["row"], by_location.get(record["row"], [])


def read_completions(path: str, samples: list[Sample]) -> list[tuple[Any, str, int]]:
    """(row id, completion text, index of the row) per line; every problem of the file at once. A line names its
    row by "id", or by "row" (file:line) as the completions a run dumps do."""
    by_id: dict[Any, list[int]] = defaultdict(list)
    by_location: dict[str, list[int]] = defaultdict(list)
    for index, sample in enumerate(samples):
        by_id[json.dumps(sample.row_id)].append(index)
        by_location[sample.location].append(index)
    try:
        records = list(read_records(path))
    except OSError as exc:
        raise DataError([f"{path}: cannot read the completions file: {exc.strerror}"]) from None
    found, problems = [], []
    for line, record, error in records:
        where = f"{path}:{line}"
        if error or not isinstance(record, dict) or not isinstance(record.get("completion"), str) or not (
                "id" in record or isinstance(record.get("row"), str)):
            problems.append(f"{where}: {error or 'expected ' + EXPECTED_LINE}")
            continue
        name, rows = _rows_named(record, by_id, by_location)
        if len(rows) != 1:
            locations = ", ".join(samples[i].location for i in rows)
            problems.append(f"{where}: id {name!r} " + (
                f"names {len(rows)} rows ({locations}); give the rows unique ids" if rows
                else "is not the id of any data row (rows are matched by their \"id\", or file:line without one)"))
            continue
        found.append((samples[rows[0]].row_id, record["completion"], rows[0]))
    if problems:
        raise DataError(problems)
    return found


def score_completions(parts: ScoringParts, data: LoadedData, completions_path: str,
                      custom: dict[str, Callable[..., list]]) -> Iterator[dict]:
    """custom: the custom reward functions by name, as rewards.reward_functions resolved them."""
    samples = data.samples + data.validation
    scored = read_completions(completions_path, samples)
    processor = load_processor(parts.model)
    space, resize = answer_space_and_resize(parts.reward.answer_box_space, parts.model.model_name_or_path, processor)
    rewards = build_rewards(parts.reward.reward_funcs, space, resize, parts.reward.iou_threshold, parts.judge,
                            getattr(processor, "tokenizer", processor), custom)
    dataset = to_hf_dataset(samples, parts.question_template)
    rows = [dataset[index] for _, _, index in scored]
    columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"} if rows else {}
    texts = [text for _, text, _ in scored]
    tokenizer = getattr(processor, "tokenizer", processor)
    arguments = dict(
        prompts=[row["prompt"] for row in rows],
        completions=[[{"role": "assistant", "content": text}] for text in texts],
        completion_ids=[tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts],
        **columns,
    )
    values = {reward.__name__: reward(**arguments) for reward in rewards}
    for index, (row_id, _, _) in enumerate(scored):
        yield {"id": row_id, "rewards": {name: scores[index] for name, scores in values.items()}}
