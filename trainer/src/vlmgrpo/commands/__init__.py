"""The command line: `vlmgrpo train | sft | eval | serve | lab | info | selftest ...`, its options taken from the config
fields, and the recipes behind the training commands (recipe.py; grpo.py for `train`, sft.py for `sft`). The top of
the trainer: imports any package, and none imports it."""
