"""`imagegen facts check`: each base tag the matrix renders, asked of its registry's HTTP API v2.

NVIDIA deletes old nvidia/cuda tags. A lock pins its base's digest, so a locked build goes on while that digest
lasts, but the next re-lock, a new image on that CUDA, or a build of a lock made where the registry did not answer
(`base.digest: null`) fails far from the cause. A HEAD of the tag's manifest says whether the tag still exists
(Docker Hub does not count HEAD requests against its pull limit; its anonymous token flow is the registry client's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from imagegen.engine.registry.http import ImageReference, RegistryClient, RegistryError, credentials_for
from imagegen.facts.checker import Checker
from imagegen.matrix.model import Matrix
from imagegen.matrix.plan import base_of


@dataclass(frozen=True)
class BaseUse:
    ref: str  # as the matrix writes it: nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
    at: tuple  # where the matrix sets it
    images: tuple[str, ...]  # the images that start FROM it


def base_uses(matrix: Matrix) -> list[BaseUse]:
    """Every base the matrix's images start FROM, once each, with the images that use it."""
    found: dict[str, tuple[tuple, list[str]]] = {}
    for image in matrix.images:
        ref, at = base_of(matrix, image)
        if ref:
            found.setdefault(ref, (at, []))[1].append(image.name)
    return [BaseUse(ref, at, tuple(names)) for ref, (at, names) in found.items()]


def asked(ref: str, registry: str | None) -> ImageReference:
    """The reference asked for: the base's own, or the same repository and tag on `registry` (a mirror, or the
    tests' loopback registry), as `--base-image` would pull it there."""
    image = ImageReference.parse(ref)
    return dataclasses.replace(image, host=registry) if registry else image


def missing_message(use: BaseUse, image: ImageReference) -> str:
    """What a missing base means for the images that use it, and what to do."""
    users = ", ".join(use.images)
    why = " (NVIDIA removes old nvidia/cuda tags)" if image.repository == "nvidia/cuda" else ""
    where = " (https://hub.docker.com/r/nvidia/cuda/tags)" if image.repository == "nvidia/cuda" else ""
    return (f"base {use.ref} of {users}: the registry {image.host} has no such tag{why}; set a tag that exists"
            f"{where} here and re-lock, or build with --base-image REF (a mirror, or the base's digest a lock "
            "pinned)")


class BaseChecker:
    """One client per registry host; a host that does not answer costs one attempt."""

    def __init__(self, checker: Checker, registry: str | None = None):
        self.checker = checker
        self.registry = registry
        self.clients: dict[str, RegistryClient | str] = {}  # host -> client, or why it did not answer

    def client(self, host: str) -> RegistryClient | str:
        if host not in self.clients:
            try:
                self.clients[host] = RegistryClient(host, credentials_for(host))
            except RegistryError as error:
                self.clients[host] = str(error)
        return self.clients[host]

    def check(self, use: BaseUse) -> None:
        image = asked(use.ref, self.registry)
        what = f"base {use.ref}" + (f" (asked of {image.host})" if self.registry else "")
        client = self.client(image.host)
        if isinstance(client, str):
            self.checker.unchecked(what, client)
            return
        try:
            manifest = client.manifest(image.repository, image.digest or image.tag or "latest", "HEAD")
        except RegistryError as error:  # refused credentials, an HTTP error other than 404
            self.checker.unchecked(what, str(error))
            return
        if manifest is None:
            self.checker.disagrees(use.at, missing_message(use, image))
        else:
            self.checker.report.checked += 1


def check(checker: Checker, registry: str | None = None) -> None:
    bases = BaseChecker(checker, registry)
    for use in base_uses(checker.matrix):
        bases.check(use)
