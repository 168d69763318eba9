"""The edges imagegen drives: a BuildKit-capable docker client (buildkit) and its progress (progress), the
engine's containers and images through docker-py (containers), and registries (registry: HTTP, OCI). Each
speaks to one outside system; none knows the matrix. It may import imagegen.core only."""
