"""The matrix's facts against the package index: `imagegen facts check` (`check`: torch, packages, flash-attn,
CUDA updates; `images`: images and their locks; `bases`: base tags; `checker`: the counts and the index edge) and
`imagegen facts update` (`update`: facts written from the index). It may import imagegen.core, imagegen.engine (the
registry, for base tags), imagegen.matrix and imagegen.locking (the index, wheel names, the lock format)."""
