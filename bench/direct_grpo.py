"""The minimal way to run the same GRPO training: TRL's GRPOTrainer called directly.

Same tiny model, data and reward functions (vlmgrpo's), same settings; no vlmgrpo CLI, config
checks, callbacks or trainer subclass. Prints `bench-step N` after each logged step.
Usage: python -m bench.direct_grpo TINY_DIR OUTPUT_DIR SETTINGS_JSON
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from vlmgrpo.boxes import RESIZED
from vlmgrpo.data.datasets import load_data
from vlmgrpo.models.loading import resize_function
from vlmgrpo.data.rec import to_hf_dataset, validate_row
from vlmgrpo.rewards import format_reward, make_iou_reward
from vlmgrpo.config.template import REC_QUESTION_TEMPLATE


class StepPrinter(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        print(f"bench-step {state.global_step}", flush=True)


def main(tiny: str, output: str, settings: dict) -> None:
    processor = AutoProcessor.from_pretrained(f"{tiny}/model")
    processor.tokenizer.padding_side = "left"
    model = AutoModelForImageTextToText.from_pretrained(f"{tiny}/model", dtype=torch.float32,
                                                        attn_implementation="sdpa")
    data = load_data([f"{tiny}/data/rec.jsonl"], f"{tiny}/data/images", "absolute", seed=settings["data_seed"],
                     validate=validate_row)
    trainer = GRPOTrainer(
        model=model,
        processing_class=processor,
        reward_funcs=[make_iou_reward(RESIZED, resize_function(processor)), format_reward],
        args=GRPOConfig(output_dir=output, use_cpu=True, disable_tqdm=True, **settings),
        train_dataset=to_hf_dataset(data.samples, REC_QUESTION_TEMPLATE),
        callbacks=[StepPrinter()],
    )
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
