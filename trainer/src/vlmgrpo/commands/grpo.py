"""`vlmgrpo train`: VLM-R1's REC recipe on TRL's GRPOTrainer, with our data, rewards and callbacks."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from vlmgrpo.monitoring.metrics import MetricsView
from vlmgrpo.commands.recipe import Option, Recipe

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig
    from vlmgrpo.models.source import ModelSource
    from vlmgrpo.launch.torchrun import LaunchPlan
    from vlmgrpo.commands.recipe import Work
    from vlmgrpo.training.started import StartedRun

log = logging.getLogger("vlmgrpo")

GRPO_METRICS = MetricsView(
    keys={
        "reward": "reward",
        "reward_std": "reward_std",
        "frac_reward_zero_std": "frac_reward_zero_std",
        "kl": "kl",
        "loss": "loss",
        "grad_norm": "grad_norm",
        "learning_rate": "learning_rate",
        "completions/mean_length": "completion_length",
        "entropy": "entropy",
        # Share of completion tokens whose probability ratio was clipped (VLM-R1 logs it as clip_ratio).
        "clip_ratio/region_mean": "clip_ratio",
        # Rows per reward call whose judge gave no valid verdict (rewards/judge.py), when rows are judged by llm.
        "judge_invalid": "judge_invalid",
    },
    eval_keys=("eval_loss", "eval_reward", "eval_reward_std", "eval_kl"),
    shown=(("reward", "reward"), ("std", "reward_std"), ("[]", "rewards"), ("kl", "kl"),
           ("len", "completion_length"), ("lr", "learning_rate")),
)


@functools.cache
def trainer_class():
    """TRL's GRPOTrainer with two private methods overridden (each fenced by tests/test_private_overrides.py, which
    fails by name when the installed TRL changes their signature).

    _calculate_rewards stays overridden for dump_completions: TRL's public log_completions keeps only the latest
    generation batch (a deque of generation_batch_size) for each logging step, writes it as parquet under
    OUTPUT/completions/ and prints a table to stdout; it cannot give every completion with its data row and each
    reward's value, which completions.jsonl holds."""
    from accelerate.utils import gather_object
    from trl import GRPOTrainer

    from vlmgrpo.training.checkpoint import RestoresWeights
    from vlmgrpo.rewards import completion_text

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


class GrpoRecipe(Recipe):
    name = "train"
    summary = "Train with GRPO. Exit codes: 0 done, 2 bad config/data, 143 (SIGTERM) / 130 (SIGINT) after a checkpoint."
    trl_class = "GRPOConfig"
    trl_config = "VLMR1GRPOConfig"
    metrics = GRPO_METRICS
    options = (Option("--num-generations", int), Option("--max-completion-length", int),
               Option("--use-vllm", bool, "Images named -vllm<X.Y> have vLLM."),
               Option("--vllm-mode", str, "server: a `vlmgrpo vllm-serve` started beside (vllm_server_host/port)."))

    @property
    def sections(self) -> tuple[type, ...]:
        from vlmgrpo.config.model_config import ModelConfig
        from vlmgrpo.config.sections import RecDataConfig, RewardConfig, RunConfig

        return (ModelConfig, RecDataConfig, RewardConfig, RunConfig)

    def plan_work(self, config: TrainConfig, model: ModelSource, launch: LaunchPlan) -> Work:
        """The rewards, every row checked for what they need, enough of them for a generation batch (whose groups
        plan_launch checked), then a vision-language model: all before any weights load (the rollouts make_plan
        checked first)."""
        from vlmgrpo.data.rows import load_scored_rows
        from vlmgrpo.errors import ConfigError
        from vlmgrpo.models.loading import model_kind
        from vlmgrpo.rewards import reward_functions
        from vlmgrpo.commands.recipe import Work

        rewards = reward_functions(config)
        data = load_scored_rows(config)
        launch.check_rows(len(data.samples))
        model = model_kind(config, model)
        if not model.vision:
            raise ConfigError(f"{config.where('model_name_or_path')}: key 'model_name_or_path': {model.base} is a "
                              "text-only causal LM; `train` (GRPO on grounding data) needs a vision-language model such "
                              "as Qwen2.5-VL (`vlmgrpo sft` trains both kinds)")
        return Work(rewards, data, model)

    def build_trainer(self, started: StartedRun):
        from vlmgrpo.training.callbacks import ZeroRewardWatchdog
        from vlmgrpo.models.loading import answer_box_space, load_model, load_processor, peft_config, resize_function
        from vlmgrpo.data.rec import to_hf_dataset
        from vlmgrpo.rewards.judge import Judge
        from vlmgrpo.rewards import BOX_REWARDS, build_rewards

        config, data, trl_config = started.plan.config, started.plan.data, started.trl_args
        processor = load_processor(config.model)
        model = load_model(config.model, vision=True, attention=started.attention)
        space = answer_box_space(config.reward.answer_box_space, model.config.model_type)
        resize, peft = resize_function(processor), peft_config(config.model)
        log.info("reading answer boxes in the %s coordinate space (answer_box_space)", space)
        template = config.data.question_template
        judge = Judge.from_config(config.reward, config.where("judge_url"))
        # REC accuracy on the validation split at every evaluation (eval_rewards/rec_accuracy in metrics.jsonl and
        # TensorBoard), as a reward of weight 0: it is logged and never moves the advantages.
        accuracy = bool(data.validation and trl_config.eval_strategy != "no"
                        and set(config.reward.reward_funcs) & set(BOX_REWARDS))
        rewards = build_rewards(config.reward.reward_funcs, space, resize, config.reward.iou_threshold, judge,
                                getattr(processor, "tokenizer", processor), started.plan.rewards, rec_accuracy=accuracy)
        if accuracy:
            trl_config.reward_weights = list(trl_config.reward_weights or [1.0] * (len(rewards) - 1)) + [0.0]
        trainer = trainer_class()(
            model=model,
            processing_class=processor,
            reward_funcs=rewards,
            args=trl_config,
            train_dataset=to_hf_dataset(data.samples, template),
            eval_dataset=to_hf_dataset(data.validation, template) if data.validation else None,
            peft_config=peft,
        )
        if config.reward.dump_completions:
            trainer.completions_path = Path(trl_config.output_dir) / "completions.jsonl"
        trainer.add_callback(ZeroRewardWatchdog(config.reward.zero_reward_patience))
        return trainer


GRPO = GrpoRecipe()
