"""The sections of vlmgrpo's configuration besides the TRL config and the model: data, rewards, run.

Every field carries metadata={"help": ...} as TRL's do; `--print-config` shows it above each key, and the command
line's options for these keys take it from here. This module imports no TRL (the model's section, a subclass of TRL's
ModelConfig, is model_config.py), so `vlmgrpo --help` reads these fields without loading TRL.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Optional

from vlmgrpo.boxes import ABSOLUTE, NORM1000, RESIZED
from vlmgrpo.config.template import REC_QUESTION_TEMPLATE, TASK_TYPES


PROFILE_STEPS = re.compile(r"^(\d+):(\d+)$")


def parse_profile_steps(value: str) -> Optional[tuple[int, int]]:
    """(first, last) of RunConfig.profile_steps' "A:B" with 1 <= A <= B; None when the text is not that."""
    match = PROFILE_STEPS.match(value.strip())
    if not match:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    return (first, last) if 1 <= first <= last else None


def with_help(text: str, **more) -> dict[str, Any]:
    return {"help": text, **more}


def field_help(section: type, name: str) -> str:
    """The help of one field of a section, as `--print-config` shows it."""
    return next(f.metadata["help"] for f in fields(section) if f.name == name)


def field_default(section: type, name: str) -> Any:
    found = next(f for f in fields(section) if f.name == name)
    return None if found.default is MISSING else found.default


@dataclass
class DataConfig:
    data: list[Any] = field(default_factory=list, metadata=with_help(
        "Training rows. Each entry: a .jsonl/.json file (or several, ':'-joined), a .yaml mixture file, or a "
        "mapping {path, image_root, sampling, box_space, reward_method}."))
    image_root: Optional[str] = field(default=None, metadata=with_help(
        "Directory relative image paths are resolved against; ':'-joined, one per data file in order."))
    val_split_ratio: float = field(default=0.0, metadata=with_help(
        "Fraction of the rows held out for evaluation (as VLM-R1's val_split_ratio), seeded by data_seed."))
    eval_data: list[Any] = field(default_factory=list, metadata=with_help(
        "Or rows of their own to evaluate on: entries as in data."))


@dataclass
class RecDataConfig(DataConfig):
    """GRPO's grounding data: boxes in the labels, a question template."""

    box_space: str = field(default=ABSOLUTE, metadata=with_help(
        "Space of the dataset's label boxes: absolute (pixels) or norm1000 (0-1000).", choices=[ABSOLUTE, NORM1000]))
    question_template: str = field(default=REC_QUESTION_TEMPLATE, metadata=with_help(
        "The prompt: {question} (or VLM-R1's {Question}) is replaced by the row's question."))
    task_type: Optional[str] = field(default=None, metadata=with_help(
        "VLM-R1's --task_type: the question_template of its Qwen module for the task (rec, ic, odLength; default and "
        "gui get its default template), unless question_template is set.", choices=list(TASK_TYPES)))
    reward_method: Optional[str] = field(default=None, metadata=with_help(
        "The jsonl_accuracy reward's method for rows that name none in accu_reward_method (VLM-R1's --reward_method): "
        "one for every data file, or ':'-joined, one per file in order; a data mapping may set its own. default "
        "(VLM-R1's, when unset), math, mcq, yes_no, all_match, weighted_sum, map, od_ap, od_ap50, odLength."))


@dataclass
class RewardConfig:
    reward_funcs: list[str] = field(default_factory=lambda: ["iou", "format"], metadata=with_help(
        "Rewards: iou, format (VLM-R1's), iou_lenient, format_lenient; for text answers mcq, yes_no, all_match, "
        "format_answer, and jsonl_accuracy (each row by its accuracy method, as VLM-R1's grpo_jsonl.py); its shaping "
        "length and repetition; or module:function / path/to/file.py:function. VLM-R1's name accuracy is read as "
        "is_reward_customized_from_vlm_module says (unset: per row, jsonl_accuracy)."))
    is_reward_customized_from_vlm_module: Optional[bool] = field(default=None, metadata=with_help(
        "What VLM-R1's reward names accuracy and format mean (its grpo_jsonl.py flag): true, the model module's "
        "rewards (iou and format: REC on Qwen and InternVL); false, its per-row ones (jsonl_accuracy: each row's "
        "accu_reward_method, else reward_method, else default; format_answer); unset, accuracy as false (VLM-R1's "
        "default) and format stays REC's format. REC's IoU by its own name: iou."))
    iou_threshold: Optional[float] = field(default=None, metadata=with_help(
        "Turns the IoU reward into a hit reward: 1.0 at or above the threshold, else 0.0."))
    answer_box_space: str = field(default="auto", metadata=with_help(
        "Space of the boxes the model answers in: auto (resized for Qwen2.5-VL, norm1000 for Qwen2-VL and InternVL), "
        "absolute, norm1000, resized.", choices=["auto", ABSOLUTE, NORM1000, RESIZED]))
    zero_reward_patience: int = field(default=20, metadata=with_help(
        "Warn when a reward stays 0, or every group has zero reward std, for this many consecutive logged steps."))
    dump_completions: bool = field(default=False, metadata=with_help(
        "Append every sampled completion with its rewards to OUTPUT/completions.jsonl."))
    judge_url: Optional[str] = field(default=None, metadata=with_help(
        "jsonl_accuracy's llm method: the judge's OpenAI-compatible endpoint (http://HOST:PORT/v1: vLLM, transformers "
        "serve, vlmgrpo serve), checked before any weights load; no user:password@ in it (the key is read from "
        "judge_api_key_env's variable only)."))
    judge_model: Optional[str] = field(default=None, metadata=with_help("The model the judge endpoint serves."))
    judge_api_key_env: str = field(default="OPENAI_API_KEY", metadata=with_help(
        "The environment variable that holds the judge endpoint's API key."))
    judge_timeout: float = field(default=30.0, metadata=with_help(
        "Seconds one judge call may take in all (connecting, every read, its retries): past them it is cancelled."))
    judge_max_retries: int = field(default=2, metadata=with_help("Retries of a judge call that failed."))
    judge_concurrency: int = field(default=8, metadata=with_help("Judge calls in flight at once."))
    judge_max_tokens: int = field(default=16, metadata=with_help(
        "Tokens the judge may answer with (its verdict is a number such as 1.0)."))


@dataclass
class RunConfig:
    resume: Optional[str] = field(default=None, metadata=with_help(
        "auto (the latest complete checkpoint-N under the output directory, fresh if none) or a checkpoint "
        "directory."))
    overwrite_output: bool = field(default=False, metadata=with_help(
        "Start over in an output directory that holds an earlier run: its checkpoints and logs are removed."))
    nproc_per_node: int = field(default=1, metadata=with_help(
        "Processes (GPUs) on this host; more than 1 relaunches through torchrun."))
    nnodes: int = field(default=1, metadata=with_help("Hosts of the run."))
    node_rank: int = field(default=0, metadata=with_help("This host's index, from 0."))
    master_addr: str = field(default="127.0.0.1", metadata=with_help("The rank-0 host's address."))
    master_port: int = field(default=29500, metadata=with_help("The rank-0 host's rendezvous port."))
    max_restarts: int = field(default=0, metadata=with_help(
        "When a worker process dies, torchrun restarts every worker up to this many times; they continue from the "
        "newest checkpoint (from step 0 before the first). More than 0 launches through torchrun."))
    profile_steps: Optional[str] = field(default=None, metadata=with_help(
        "A:B records steps A to B (from 1) with torch.profiler (CPU, and CUDA with a GPU) as a trace per rank under "
        "OUTPUT/profile/."))
    shutdown_timeout: int = field(default=600, metadata=with_help(
        "Seconds torchrun lets the workers finish a step and checkpoint after SIGTERM before it kills them."))
    metrics_port: Optional[int] = field(default=None, metadata=with_help(
        "Serve Prometheus metrics on GET /metrics and the run's health on GET /health from rank 0 on this TCP port; "
        "off when unset."))
    metrics_host: str = field(default="0.0.0.0", metadata=with_help(
        "The address the metrics server listens on: 0.0.0.0 for every interface (a scraper or probe from outside "
        "the container), 127.0.0.1 for this host only."))
    health_stall_factor: float = field(default=10.0, metadata=with_help(
        "/health answers 503 when no step has finished for this many times the median of the recent step times "
        "(a hung collective, a stuck data loader), and 200 again once one does."))
    health_stall_min_s: float = field(default=300.0, metadata=with_help(
        "Seconds without a finished step that never count as a stall, whatever the step times: the floor of "
        "health_stall_factor x median step time."))
    health_startup_s: float = field(default=1800.0, metadata=with_help(
        "Seconds /health stays healthy before the first step finishes (model loading, the first generation); "
        "unhealthy after that until a step finishes."))
