"""Datasets: the rows of `data:` entries read and validated up front, GRPO's REC rows and SFT's chat rows, images
loaded lazily. Imports the leaves, rewards and config."""
