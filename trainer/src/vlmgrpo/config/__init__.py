"""A run's configuration: vlmgrpo's sections, the model's, TRL's config, read from YAML and `--set`, and the checks of
its values. Imports only the leaves (errors, atomic, boxes, access, records) and rewards."""
