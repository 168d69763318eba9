"""The command line: `vlmgrpo train | sft | eval | serve | lab | info | selftest ...`, its options taken from the config
fields. The top of the trainer: imports any package, and none imports it."""
