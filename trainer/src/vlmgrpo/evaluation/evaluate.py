"""`vlmgrpo eval`: REC accuracy of a model (base, adapter or merged) on data rows, or of given completions.

The rows pass the same checks as training before any weight loads; generation is batched and greedy,
with the recipe's prompt template. Writes OUTPUT/eval.json and OUTPUT/predictions.jsonl, each through a temporary
file renamed into place.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Iterator, Optional

from imagegen_contract import atomic
from vlmgrpo.data.datasets import LoadedData
from vlmgrpo.data.rec import Sample, implicit_image_prefix, prompt_messages
from vlmgrpo.evaluation.rec import data_file, judge, summarise
from vlmgrpo.evaluation.score import read_completions
from vlmgrpo.evaluation.settings import EvalSettings, ScoringParts
from vlmgrpo.evaluation.tasks import judge_tasks, summarise_tasks
from vlmgrpo.config.template import fill_template
from vlmgrpo.models.attention import choose_attention
from vlmgrpo.models.loading import (answer_space_and_resize, is_vision_language, load_model,
                                    load_processing_class)
from vlmgrpo.rewards import JSONL_ACCURACY

log = logging.getLogger("vlmgrpo")

# Greedy: the config eval loads is `train`'s, and GRPOConfig has no do_sample field for a file to set (its
# temperature and top_p are the training rollouts').
DO_SAMPLE = False


def first_rows(samples: list[Sample], per_file: Optional[int]) -> list[Sample]:
    if per_file is None:
        return samples
    kept, seen = [], {}
    for sample in samples:
        path = data_file(sample)
        seen[path] = seen.get(path, 0) + 1
        if seen[path] <= per_file:
            kept.append(sample)
    return kept


def _load_image(path: str):
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


def _prompt_text(processor, sample: Sample, template: str, vision: bool) -> str:
    if vision:
        messages = prompt_messages(implicit_image_prefix(sample.question, len(sample.image_paths)), template)
    else:
        messages = [{"role": "user", "content": fill_template(template, sample.question).strip()}]
    return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def generate(parts: ScoringParts, samples: list[Sample], settings: EvalSettings, processor,
             vision: bool) -> Iterator[str]:
    """One completion per sample, in order: batches left-padded, greedy (DO_SAMPLE)."""
    import torch

    tokenizer = getattr(processor, "tokenizer", processor)
    tokenizer.padding_side = "left"
    attention = choose_attention(parts.model.attn_implementation)  # as a training worker chooses it, once
    model = load_model(dataclasses.replace(parts.model, use_peft=False), vision, attention).eval()
    sampling = {"do_sample": DO_SAMPLE}
    for start in range(0, len(samples), settings.batch_size):
        batch = samples[start:start + settings.batch_size]
        texts = [_prompt_text(processor, s, parts.question_template, vision) for s in batch]
        images = [_load_image(path) for s in batch for path in s.image_paths] if vision else []
        kwargs = {"images": images} if images else {}
        inputs = processor(text=texts, padding=True, return_tensors="pt", **kwargs).to(model.device)
        with torch.inference_mode():
            output = model.generate(**inputs, max_new_tokens=settings.max_new_tokens,
                                    pad_token_id=tokenizer.pad_token_id, **sampling)
        yield from tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        log.info("eval: %d/%d rows generated", min(start + settings.batch_size, len(samples)), len(samples))


def evaluate(parts: ScoringParts, data: LoadedData, settings: EvalSettings) -> dict:
    samples = first_rows(data.samples, settings.max_samples)
    vision = is_vision_language(parts.model.model_name_or_path)
    processor = load_processing_class(parts.model, vision)  # once: for the prompts and for the answer space
    if settings.completions:
        given = read_completions(settings.completions, samples)
        samples, texts = [samples[index] for _, _, index in given], [text for _, text, _ in given]
    else:
        texts = list(generate(parts, samples, settings, processor, vision))
    described = {"model": parts.model.model_name_or_path, "adapter": parts.model.adapter_name_or_path,
                 "max_samples_per_file": settings.max_samples, "completions": settings.completions,
                 "question_template": parts.question_template}
    if not settings.completions:
        described.update(batch_size=settings.batch_size, max_new_tokens=settings.max_new_tokens,
                         do_sample=DO_SAMPLE)
    if JSONL_ACCURACY in parts.reward.reward_funcs:  # VLM-R1's other tasks: each row by its accuracy method
        predictions = judge_tasks(samples, texts, parts.judge)
        summary = summarise_tasks(predictions, described)
        write_results(settings.output, summary, predictions)
        return summary
    space, resize = answer_space_and_resize(parts.reward.answer_box_space, parts.model.model_name_or_path,
                                            processor)
    predictions = [judge(sample, text, space, resize) for sample, text in zip(samples, texts)]
    summary = summarise(samples, predictions, {**described, "answer_box_space": space})
    write_results(settings.output, summary, predictions)
    return summary


def write_results(output: str, summary: dict, predictions: list) -> None:
    """predictions: evaluation.rec.Prediction or evaluation.tasks.TaskPrediction, each with as_json()."""
    os.makedirs(output, exist_ok=True)
    atomic.write_text(os.path.join(output, "predictions.jsonl"),
                  "".join(json.dumps(p.as_json()) + "\n" for p in predictions))
    atomic.write_text(os.path.join(output, "eval.json"), json.dumps(summary, indent=2) + "\n")
