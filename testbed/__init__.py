"""The real servers the tests and the bench start for themselves: Debian's docker-registry on loopback (`registry`)
and a Slurm cluster of Debian's slurm-wlm in containers (`slurm`). Not part of imagegen: nothing it ships uses them."""
