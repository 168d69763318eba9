"""Locks: what an image's lock is resolved from and what it tells (inputs), the lock file format and the
install steps it makes (lockfile), resolving a stack with uv and pinning the base image's digest (resolve),
the package index (index), what a wheel's file name says (wheelnames), what each locked release requires
(requires, markers) and a lock checked against what it claims, its whole graph included (claims). It may
import imagegen.core, imagegen.engine (the registry, for base digests) and imagegen.matrix."""
