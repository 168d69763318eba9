"""The bottom of imagegen: user errors and their file:line problems, atomic writes, sizes, platform names,
plain-text tables and the validation helpers the schemas share. Pure functions and the filesystem; it imports
nothing of imagegen."""
