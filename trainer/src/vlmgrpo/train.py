"""`vlmgrpo train`: validate, build TRL's GRPOTrainer with our data, rewards and callbacks, train, save."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Any, Optional

from .callbacks import GracefulStop, MetricsLogger, ZeroRewardWatchdog, drop_steps_after
from .checkpoint import checkpoint_step, resolve_resume, restore_weights
from .config import TrainConfig
from .data import LoadedData, to_hf_dataset
from .errors import ConfigError
from .launch import resolve_deepspeed, write_stop_marker
from .preflight import RUN_LOGS
from .rewards import build_rewards, completion_text

log = logging.getLogger("vlmgrpo")


def resolve_grpo_kwargs(config: TrainConfig) -> dict[str, Any]:
    from .model import cuda_available

    kwargs = dict(config.grpo)
    if config.data.val_split_ratio and "eval_strategy" not in kwargs:
        # Held-out rows are evaluated at every checkpoint unless eval_strategy / eval_steps say otherwise.
        kwargs["eval_strategy"] = "steps"
        kwargs.setdefault("eval_steps", kwargs["save_steps"])
    kwargs["deepspeed"] = resolve_deepspeed(kwargs.get("deepspeed"))
    if kwargs.get("bf16") == "auto":
        import torch

        kwargs["bf16"] = cuda_available() and torch.cuda.is_bf16_supported()
    if kwargs.get("report_to") == "auto":
        kwargs["report_to"] = ["tensorboard"] if importlib.util.find_spec("tensorboard") else "none"
    if not cuda_available():
        kwargs.setdefault("use_cpu", True)
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            kwargs.setdefault("ddp_backend", "gloo")
    # Our MetricsLogger prints one line per step; tqdm's bar would interleave with it.
    kwargs.setdefault("disable_tqdm", True)
    return kwargs


def build_grpo_config(config: TrainConfig):
    from trl import GRPOConfig

    try:
        return GRPOConfig(**resolve_grpo_kwargs(config))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{config.source}: invalid GRPO settings: {exc}") from None


def _trainer_class():
    from accelerate.utils import gather_object
    from trl import GRPOTrainer

    class VLMGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer plus a correct weight restore on resume, batches that mix text-only and image rows, and
        an optional completions dump."""

        completions_path: Optional[Path] = None

        def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
            target = self.accelerator.unwrap_model(model if model is not None else self.model)
            if self.is_deepspeed_enabled or self.is_fsdp_enabled or hasattr(target, "peft_config"):
                # Their own formats (DeepSpeed engine state, FSDP shards, PEFT adapters) load by their own keys.
                super()._load_from_checkpoint(resume_from_checkpoint, model)
                return
            count = restore_weights(target, resume_from_checkpoint)
            log.info("restored %d weight tensors from %s", count, resume_from_checkpoint)

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
    from transformers import PrinterCallback, ProgressCallback

    from .model import answer_box_space, load_model, load_processor, lora_config, resize_function

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
        peft_config=lora_config(config.model) if config.model.use_lora else None,
    )
    if config.run.dump_completions:
        trainer.completions_path = output / "completions.jsonl"
    for noisy in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(noisy)
    trainer.add_callback(MetricsLogger(output / "metrics.jsonl"))
    trainer.add_callback(ZeroRewardWatchdog(config.reward.zero_reward_patience))
    return trainer


def save_final(trainer, config: TrainConfig) -> None:
    output = trainer.args.output_dir
    trainer.save_model(output)  # safetensors; a PEFT model saves its adapter
    if config.model.use_lora and config.model.merge_lora and trainer.accelerator.is_main_process:
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.save_pretrained(os.path.join(output, "merged"))
        trainer.processing_class.save_pretrained(os.path.join(output, "merged"))


def write_run_config(config: TrainConfig, output: Path) -> None:
    from .config import dump_config

    output.mkdir(parents=True, exist_ok=True)
    (output / "vlmgrpo_config.yaml").write_text(dump_config(config))


def run_training(config: TrainConfig, data: LoadedData) -> int:
    """Train to the end or to a signal; return the process exit code."""
    grpo_config = build_grpo_config(config)
    output = Path(grpo_config.output_dir)
    resume = resolve_resume(config.run.resume, str(output))
    if grpo_config.process_index == 0:
        write_run_config(config, output)
        for name in RUN_LOGS:
            drop_steps_after(output / name, checkpoint_step(resume))
    trainer = build_trainer(config, data, grpo_config)
    stop = GracefulStop()
    trainer.add_callback(stop)
    stop.install()
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        stop.uninstall()
    if stop.signal_number is not None:
        write_stop_marker(stop.signal_number)
        log.warning("stopped by signal after step %d; checkpoint written under %s, continue with --resume auto",
                    trainer.state.global_step, output)
        return stop.exit_code
    save_final(trainer, config)
    return 0
