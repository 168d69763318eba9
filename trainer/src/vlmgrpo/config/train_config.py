"""What a loaded configuration is: its sections, the command's TRL config, where each value was set. load.py makes
one; everything after reads it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from vlmgrpo.config.model_config import ModelConfig
from vlmgrpo.config.sections import DataConfig, RewardConfig, RunConfig


@dataclass
class TrainConfig:
    model: ModelConfig
    data: DataConfig  # RecDataConfig for `train`
    reward: Optional[RewardConfig]  # `train` only
    run: RunConfig
    # The command's TRL config (config/trl_configs.py: GRPOConfig's, SFTConfig's subclass) with the configuration's
    # values; its __post_init__ runs when the worker finishes it (trl_configs.with_values, started.build_trl_config).
    trl: Any
    command: Any  # the Recipe (grpo.GRPO, sft.SFT) whose configuration this is
    source: str = "<defaults>"
    origins: dict[str, str] = field(default_factory=dict)  # key -> where its value was set, for error messages
    launcher: str = "none (one host)"  # what launch.schedulers.discover found in the environment
    # key -> what its value means, printed above its line by --print-config (the VLM-R1 reward names it resolved)
    notes: dict[str, str] = field(default_factory=dict)

    def where(self, key: str) -> str:
        return self.origins.get(key, self.source)

    def is_set(self, key: str) -> bool:
        """Whether the file, the environment or the command line set KEY (else it has its default)."""
        return key in self.origins

    def flat(self) -> dict[str, Any]:
        """The sections' values, then the TRL config's that the recipe's class or the configuration sets, in the order
        the recipe declares them and then as they were set (--print-config's order)."""
        from vlmgrpo.config.trl_configs import own_defaults

        values = {}
        for section in (self.model, self.data, self.reward, self.run):
            if section is not None:
                values.update(dataclasses.asdict(section))
        trl_keys = {f.name for f in dataclasses.fields(self.trl) if f.init}
        for key in (*own_defaults(type(self.trl)), *self.origins):
            if key in trl_keys and key not in values:
                values[key] = getattr(self.trl, key)
        return values
