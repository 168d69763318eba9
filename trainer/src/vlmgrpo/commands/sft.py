"""`vlmgrpo sft`: supervised fine-tuning with TRL's SFTTrainer on chat rows (OpenAI messages, ShareGPT, Alpaca), of a
text-only causal LM or a vision-language model, in full, with LoRA or with QLoRA; loss on assistant turns only by
default."""

from __future__ import annotations

import copy

import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from vlmgrpo.errors import ConfigError, DataError
from vlmgrpo.monitoring.metrics import MetricsView
from vlmgrpo.commands.recipe import Recipe

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig
    from vlmgrpo.data.datasets import LoadedData
    from vlmgrpo.models.source import ModelSource
    from vlmgrpo.launch.torchrun import LaunchPlan
    from vlmgrpo.commands.recipe import Work
    from vlmgrpo.training.started import StartedRun

log = logging.getLogger("vlmgrpo")

SFT_METRICS = MetricsView(
    keys={
        "loss": "loss",
        "grad_norm": "grad_norm",
        "learning_rate": "learning_rate",
        "mean_token_accuracy": "mean_token_accuracy",
        "entropy": "entropy",
        "num_tokens": "num_tokens",
    },
    eval_keys=("eval_loss", "eval_mean_token_accuracy", "eval_entropy"),
    shown=(("loss", "loss"), ("acc", "mean_token_accuracy"), ("lr", "learning_rate")),
)


def chat_template_source(config: TrainConfig, processing_class) -> tuple[str | None, str]:
    """(the chat template SFTTrainer will apply, where it comes from)."""
    override = config.trl.chat_template_path
    if not override:
        return processing_class.chat_template, f"{config.model.model_name_or_path}'s chat template"
    where = f"{config.where('chat_template_path')}: key 'chat_template_path'"
    if override.endswith((".jinja", ".j2")):
        try:
            return Path(override).read_text(encoding="utf-8"), override
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read {override} ({exc.strerror})") from None
    from transformers import AutoTokenizer

    from vlmgrpo.models.loading import from_pretrained

    return from_pretrained(AutoTokenizer, override, key="chat_template_path").chat_template, override


def check_chat_template(config: TrainConfig, processing_class, vision: bool) -> None:
    """Conversational rows need a chat template; the loss on assistant turns only needs one whose assistant turns
    TRL can find: {% generation %} markers, or a template TRL has a training version of."""
    template, source = chat_template_source(config, processing_class)
    if not template:
        raise ConfigError(f"{source}: none; chat rows need one: set chat_template_path to a .jinja file or to a "
                          "model directory whose template fits this model")
    if not config.trl.assistant_only_loss:
        return
    where = f"{config.where('assistant_only_loss')}: key 'assistant_only_loss'"
    if vision:
        import transformers
        from packaging.version import Version

        if Version(transformers.__version__) < Version("5.18.0.dev0"):
            raise ConfigError(f"{where}: loss on assistant turns only for a vision-language model needs "
                              f"transformers >= 5.18 (this is {transformers.__version__}); set assistant_only_loss: "
                              "false to train on every token, or use an image with a newer transformers")
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    if has_generation_markers(template):
        return
    probe = copy.copy(processing_class)  # the trainer is given the processing class itself, as loaded
    probe.chat_template = template
    try:
        get_training_chat_template(probe)
    except ValueError:
        raise ConfigError(f"{where}: {source} marks no assistant turns ({{% generation %}}) and TRL has no training "
                          "version of it, so the loss cannot be limited to assistant turns; set chat_template_path to "
                          "a .jinja template with {% generation %}...{% endgeneration %} around each assistant turn, "
                          "or assistant_only_loss: false to train on every token") from None


def check_images_fit(data: LoadedData, vision: bool, model: str) -> None:
    if vision:
        return
    with_images = [s.location for s in data.samples + data.validation if s.image_paths]
    if with_images:
        raise DataError([f"{location}: the row has images but {model} is a text-only causal LM; use a "
                         "vision-language model or drop the images" for location in with_images])


@functools.cache
def trainer_class():
    from trl import SFTTrainer

    from vlmgrpo.training.checkpoint import RestoresWeights

    class VLMSFTTrainer(RestoresWeights, SFTTrainer):
        """TRL's SFTTrainer with a correct weight restore on resume."""

    return VLMSFTTrainer


class SftRecipe(Recipe):
    name = "sft"
    summary = ("Supervised fine-tuning on chat rows (OpenAI messages, ShareGPT, Alpaca), full, LoRA or QLoRA. Exit "
               "codes: 0 done, 2 bad config/data, 143 (SIGTERM) / 130 (SIGINT) after a checkpoint.")
    trl_class = "SFTConfig"
    trl_config = "VlmgrpoSFTConfig"
    metrics = SFT_METRICS

    @property
    def sections(self) -> tuple[type, ...]:
        from vlmgrpo.config.model_config import ModelConfig
        from vlmgrpo.config.sections import DataConfig, RunConfig

        return (ModelConfig, DataConfig, RunConfig)

    def plan_work(self, config: TrainConfig, model: ModelSource, launch: LaunchPlan) -> Work:
        """The model's kind, the processing class and its chat template, every row: all before any weights load."""
        from vlmgrpo.data.chat import validate_chat_row
        from vlmgrpo.data.rows import load_rows
        from vlmgrpo.models.loading import load_processing_class, model_kind
        from vlmgrpo.commands.recipe import Work

        model = model_kind(config, model)
        processing_class = load_processing_class(config.model, model.vision)
        check_chat_template(config, processing_class, model.vision)
        data = load_rows(config, validate_chat_row)
        check_images_fit(data, model.vision, model.base)
        return Work({}, data, model, processing_class)

    def build_trainer(self, started: StartedRun):
        from vlmgrpo.data.chat import to_sft_dataset
        from vlmgrpo.models.loading import load_model, peft_config

        plan = started.plan
        config, data, vision = plan.config, plan.data, plan.model.vision
        return trainer_class()(
            model=load_model(config.model, vision, attention=started.attention),
            args=started.trl_args,
            processing_class=plan.processing_class,  # the one plan_work loaded and checked the template of
            train_dataset=to_sft_dataset(data.samples, vision),
            eval_dataset=to_sft_dataset(data.validation, vision) if data.validation else None,
            peft_config=peft_config(config.model),
        )


SFT = SftRecipe()
