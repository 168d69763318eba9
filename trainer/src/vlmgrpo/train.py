"""`vlmgrpo train`: TRL's GRPOTrainer with our data, rewards and callbacks."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Optional

from .callbacks import GRPO_METRICS, ZeroRewardWatchdog
from .checkpoint import RestoresWeights
from .config import TrainConfig
from .data import LoadedData, to_hf_dataset
from .rewards import build_rewards, completion_text
from .runner import attach_metrics, run_training

log = logging.getLogger("vlmgrpo")


def _trainer_class():
    from accelerate.utils import gather_object
    from trl import GRPOTrainer

    class VLMGRPOTrainer(RestoresWeights, GRPOTrainer):
        """TRL's GRPOTrainer plus a correct weight restore on resume, batches that mix text-only and image rows, and
        an optional completions dump."""

        completions_path: Optional[Path] = None

        def _generate(self, prompts):
            # TRL marks a text-only prompt's images None, and the processor then rejects a batch that mixes such
            # prompts with prompts that have images; an empty list is what it accepts (text-only rows as VLM-R1's).
            *rest, images, tool_images = super()._generate(prompts)
            if images is not None:
                images = [image_list or [] for image_list in images]
            return (*rest, images, tool_images)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            if self.completions_path is not None:
                self._dump_completions(inputs, completions, rewards)
            return rewards

        def _dump_completions(self, inputs, completions, rewards):
            # Every rank must join the gathers; only the main process writes.
            locations = gather_object([x.get("location") for x in inputs])
            texts = gather_object([completion_text(c) for c in completions])
            if not self.accelerator.is_main_process:
                return
            names = self.reward_func_names
            with self.completions_path.open("a") as stream:
                for index, (location, text) in enumerate(zip(locations, texts)):
                    scores = {name: rewards[index, i].item() for i, name in enumerate(names)}
                    stream.write(json.dumps({"step": self.state.global_step + 1, "row": location,
                                             "completion": text, "rewards": scores}) + "\n")

    return VLMGRPOTrainer


def build_trainer(config: TrainConfig, data: LoadedData, grpo_config):
    from .model import answer_box_space, load_model, load_processor, peft_config, resize_function

    processor = load_processor(config.model)
    model = load_model(config.model)
    space = answer_box_space(config.reward.answer_box_space, model.config.model_type)
    log.info("reading answer boxes in the %s coordinate space (answer_box_space)", space)
    rewards = build_rewards(config.reward.reward_funcs, space, resize_function(processor), config.reward.iou_threshold)
    output = Path(grpo_config.output_dir)
    trainer_class = _trainer_class()
    trainer = trainer_class(
        model=model,
        processing_class=processor,
        reward_funcs=rewards,
        args=grpo_config,
        train_dataset=to_hf_dataset(data.samples, config.data.question_template),
        eval_dataset=to_hf_dataset(data.validation, config.data.question_template) if data.validation else None,
        peft_config=peft_config(config.model),
    )
    if config.reward.dump_completions:
        trainer.completions_path = output / "completions.jsonl"
    attach_metrics(trainer, output, GRPO_METRICS)
    trainer.add_callback(ZeroRewardWatchdog(config.reward.zero_reward_patience))
    return trainer


def save_final(trainer, config: TrainConfig) -> None:
    """The final model (with LoRA the adapter) in the output directory; with merge_lora also OUTPUT/merged."""
    from .model import merge_adapter

    output = trainer.args.output_dir
    trainer.save_model(output)  # safetensors; a PEFT model saves its adapter
    if config.model.use_lora and config.model.merge_lora and trainer.accelerator.is_main_process:
        merge_adapter(output, config.model.model_name_or_path, os.path.join(output, "merged"))


def run(config: TrainConfig, data: LoadedData) -> int:
    return run_training(config, data, build_trainer, save_final)
