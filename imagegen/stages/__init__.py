"""The stages a locked image goes through: built with BuildKit (build), checked from the inside (checks,
smoke), described in an SBOM (sbom), published (publish), one after the other for each image (pipeline),
each recorded as plain data (results). It may import every package below it (core, engine, matrix, locking,
facts, render) and imagegen.workspace."""
