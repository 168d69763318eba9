"""Fences around the private TRL and transformers methods vlmgrpo overrides: a new library release that changes one of
them fails here, by name, before it fails a training run somewhere else."""

import inspect

import pytest

from vlmgrpo.commands import grpo, sft

# (library class, method) -> its signature when the override was written (TRL 1.16.0, transformers 5.24.0).
EXPECTED = {
    # grpo.py: a text-only prompt's images become [] so that batches mix text-only and image rows.
    ("trl.trainer.grpo_trainer.GRPOTrainer", "_generate"): "(self, prompts: list)",
    # grpo.py: dump_completions writes every completion with its rewards (TRL's log_completions keeps only the last
    # generation batch per logging step).
    ("trl.trainer.grpo_trainer.GRPOTrainer", "_calculate_rewards"):
        "(self, inputs, prompts, completions, completion_ids_list)",
    # checkpoint.py: resume restores the weights through from_pretrained (transformers#43701).
    ("transformers.trainer.Trainer", "_load_from_checkpoint"):
        "(self, resume_from_checkpoint: str, model: torch.nn.modules.module.Module | None = None) -> None",
    # checkpoint.py: a state torch's weights_only load refuses is one line, not a traceback.
    ("transformers.trainer.Trainer", "_load_optimizer_and_scheduler"): "(self, checkpoint: str | None) -> None",
    ("trl.trainer.grpo_trainer.GRPOTrainer", "_load_optimizer_and_scheduler"): "(self, checkpoint)",
}
TRAINER_CLASSES = {"train": grpo.trainer_class, "sft": sft.trainer_class}


def private_overrides(trainer_class) -> dict[tuple[str, str], str]:
    """(library class, method) -> the installed signature, for every private method vlmgrpo's classes override."""
    library = next(c for c in trainer_class.__mro__ if not c.__module__.startswith("vlmgrpo"))
    found = {}
    for ours in (c for c in trainer_class.__mro__ if c.__module__.startswith("vlmgrpo")):
        for name in vars(ours):
            if name.startswith("_") and not name.startswith("__") and hasattr(library, name):
                owner = next(c for c in library.__mro__ if name in vars(c))
                found[(f"{owner.__module__}.{owner.__qualname__}", name)] = str(
                    inspect.signature(getattr(owner, name)))
    return found


@pytest.mark.parametrize("command", list(TRAINER_CLASSES))
def test_every_private_override_is_fenced_and_its_signature_unchanged(command):
    installed = private_overrides(TRAINER_CLASSES[command]())
    unfenced = sorted(set(installed) - set(EXPECTED))
    assert not unfenced, f"private methods overridden without a fence here: {unfenced}; record their signatures"
    changed = [f"{owner}.{name} changed: expected {EXPECTED[owner, name]}, installed {signature}"
               for (owner, name), signature in installed.items() if signature != EXPECTED[owner, name]]
    assert not changed, "; ".join(changed) + " -- check the override against the new library before updating this"


def test_the_fences_cover_every_override_they_name():
    covered = {key for make in TRAINER_CLASSES.values() for key in private_overrides(make())}
    assert covered == set(EXPECTED)


def test_a_changed_signature_fails_by_name(monkeypatch):
    from trl import GRPOTrainer

    def _generate(self, prompts, images=None):
        return None

    monkeypatch.setattr(GRPOTrainer, "_generate", _generate)
    with pytest.raises(AssertionError, match=r"GRPOTrainer\._generate changed: expected \(self, prompts: list\), "
                                             r"installed \(self, prompts, images=None\)"):
        test_every_private_override_is_fenced_and_its_signature_unchanged("train")
