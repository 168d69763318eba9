"""imagegen: GPU training images from one compatibility matrix."""

__version__ = "0.1.0"
