"""The table of training commands: each a Recipe (recipe.py) the CLI registers as `vlmgrpo <name>`. A new command
is a module with its Recipe, added here."""

from __future__ import annotations

from vlmgrpo.commands.grpo import GRPO
from vlmgrpo.commands.sft import SFT

RECIPES = {recipe.name: recipe for recipe in (GRPO, SFT)}
