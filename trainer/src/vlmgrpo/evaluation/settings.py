"""What `vlmgrpo eval` is asked to do beyond the config: where to write, how many rows, how to generate; and what
`eval` and `score` take of a training config (ScoringParts). Apart from evaluate.py (which imports TRL) so that the
command line makes its options from these fields without importing it; the help of each field is its option's
(imagegen_contract.options, through commands/fields.py)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from vlmgrpo.config.model_config import ModelConfig
    from vlmgrpo.config.sections import RewardConfig
    from vlmgrpo.rewards.judge import Judge


@dataclasses.dataclass(frozen=True)
class ScoringParts:
    """What `eval` and `score` take of a training config: the model (loaded by eval, its processor read by both),
    the question template the prompts are made with, the rewards' settings (which rewards, the answer's box space,
    the IoU threshold) and the judge (None without judge_url)."""
    model: ModelConfig
    question_template: str
    reward: RewardConfig
    judge: Optional[Judge]


@dataclasses.dataclass
class EvalSettings:
    output: str = dataclasses.field(metadata={"help": "Directory for eval.json and predictions.jsonl.",
                                              "required": True})
    # per data file: the first N rows of each
    max_samples: Optional[int] = dataclasses.field(default=None, metadata={
        "help": "Evaluate the first N rows of each data file."})
    batch_size: int = dataclasses.field(default=8, metadata={"help": "Rows per generation batch."})
    # unset on the command line: the config's max_completion_length, else this
    max_new_tokens: int = dataclasses.field(default=256, metadata={
        "help": "Tokens generated per answer (default: the config's max_completion_length, else 256).",
        "default": None})
    # score these instead of generating
    completions: Optional[str] = dataclasses.field(default=None, metadata={
        "help": 'Score these completions instead of generating: JSONL, one {"id": <a data row\'s id>, "completion": '
                '"<text>"} per line (the format `score` reads).'})
