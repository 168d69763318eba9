"""Models: loading one (kind, processor, attention kernel, dtype, 4-bit weights, adapters) and the tiny random models
the tests and the image's checks train. Imports the leaves, rewards, config and data."""
