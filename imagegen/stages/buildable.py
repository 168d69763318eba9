"""Which of the selected images this machine can build, said before any is built: an image whose lock installs an
artifact without a sha256 (unless allowed), or whose base is neither in the engine nor answered for by its registry
(Docker Hub from a machine that cannot reach it), is refused in one line that names the selected images that do build
here, so `imagegen build --cuda 12.4` on such a machine points at the line of that CUDA that builds.

The rule is pure (`reasons`, `refusal`); the engine and the registry are asked through the two probes it is given.
"""

from __future__ import annotations

import functools
from typing import Callable

from imagegen.core.errors import UserError
from imagegen.render.contexts import RenderOptions
from imagegen.render.locked import LockedImage

Probe = Callable[[str], "str | None"]  # a base reference -> why it cannot be had here, None when it can
OS_BASE_HINT = ("an image on a plain OS base (debian:bookworm-slim) builds FROM a local one given as --base-image "
                "(`bash .ci/setup` makes local/debian:bookworm)")


def base_ref(image: LockedImage, options: RenderOptions) -> str:
    """What the image's first layer goes FROM: the --base-image given for its platform, else its lock's base."""
    return options.base_image(image.platform) or image.lock.base.pinned_ref


def reasons(images: list[LockedImage], options: RenderOptions, allow_unhashed: bool, base_problem: Probe
            ) -> dict[str, list[str]]:
    """Image key -> why this machine cannot build it; the images it can build are absent."""
    found: dict[str, list[str]] = {}
    for image in images:
        why = []
        if image.lock.unhashed and not allow_unhashed:
            why.append(f"its lock installs {image.lock.unhashed} without a sha256 (re-lock it where its host "
                       "answers, `imagegen lock --image NAME`, or build with --allow-unhashed)")
        problem = base_problem(base_ref(image, options))
        if problem:
            why.append(problem)
        if why:
            found[image.key] = why
    return found


def refusal(images: list[LockedImage], found: dict[str, list[str]]) -> str:
    """The one line that refuses the selection: what cannot be built and why, and what of it can."""
    cannot = "; ".join(f"{key}: {', and '.join(why)}" for key, why in found.items())
    can = list(dict.fromkeys(image.name for image in images if image.key not in found))
    if can:
        hint = (f"Of the selected images, {', '.join(can)} build{'s' if len(can) == 1 else ''} here: select "
                f"{'it' if len(can) == 1 else 'them'} with {' '.join(f'--image {name}' for name in can)}")
    else:
        hint = f"None of the selected images builds here; {OS_BASE_HINT}"
    return f"{len(found)} of the selected images cannot be built on this machine: {cannot}. {hint}"


def refuse_unbuildable(images: list[LockedImage], options: RenderOptions, allow_unhashed: bool,
                       base_problem: Probe) -> None:
    found = reasons(images, options, allow_unhashed, functools.lru_cache(maxsize=None)(base_problem))
    if found:
        raise UserError(refusal(images, found))


def engine_or_registry(local: Callable[[str], "bool | None"], remote: Callable[[str], object]) -> Probe:
    """The probe of a base: in the engine, else its registry answers for the tag. Only no answer at all counts
    against it: a refusal to an anonymous client is left to the engine, which may hold credentials or a mirror, and
    an engine that does not answer (None) is left to the build client's own error."""
    from imagegen.engine.registry.http import RegistryError, RegistryUnreachable

    def problem(ref: str) -> str | None:
        present = local(ref)
        if present is None or present:
            return None
        try:
            remote(ref)
        except RegistryUnreachable:
            return f"its base {ref} is not in the engine and its registry does not answer from here"
        except RegistryError:
            pass
        return None
    return problem
