"""vlmgrpo: VLM-R1's GRPO grounding (REC) recipe on TRL's GRPOTrainer."""

__version__ = "0.1.0"
