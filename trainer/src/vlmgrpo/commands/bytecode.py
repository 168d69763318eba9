"""`python -m vlmgrpo.commands.bytecode`: import what a run imports at start, so that Python writes its bytecode. The image
build runs it as root (templates/trainer.Dockerfile.j2): the image's user cannot write into /opt/venv, so an image
without it compiled the sources of torch, transformers and TRL again at every start of every process (bench/RESULTS.md,
section 16's note says what it saves and costs). Only the modules imported here get bytecode, not every installed one:
most of transformers' hundreds of model families are never imported by a run."""

from __future__ import annotations

import importlib
import sys

# What `train`, `sft`, `eval` and `serve` import before their first step or answer.
COMMAND_MODULES = ("vlmgrpo.commands.cli", "vlmgrpo.training.runner", "vlmgrpo.commands.grpo",
                   "vlmgrpo.commands.sft", "vlmgrpo.models.loading", "vlmgrpo.rewards", "vlmgrpo.evaluation.evaluate",
                   "trl", "peft")
# A family's modules, which transformers imports only when a model of it loads.
FAMILY_MODULES = ("modeling_{family}", "processing_{family}", "image_processing_{family}",
                  "image_processing_{family}_fast", "video_processing_{family}")


def modules() -> list[str]:
    from vlmgrpo.models.tiny import FAMILIES

    return [*COMMAND_MODULES, "trl.trainer.grpo_trainer", "trl.trainer.sft_trainer",
            *(f"transformers.models.{family}.{name.format(family=family)}" for family in FAMILIES
              for name in FAMILY_MODULES)]


def main() -> int:
    if sys.dont_write_bytecode:
        print("vlmgrpo.commands.bytecode: PYTHONDONTWRITEBYTECODE is set, so nothing would be written", file=sys.stderr)
        return 1
    imported = 0
    for name in modules():
        try:
            importlib.import_module(name)
            imported += 1
        except ModuleNotFoundError as error:  # a family module this transformers release does not have
            if not name.startswith("transformers.models.") or error.name != name:
                raise
    print(f"vlmgrpo.commands.bytecode: {imported} modules and what they import now have bytecode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
