"""What `imagegen validate` says without refusing, one line per kind: the same warning for many images is one line
that names them all, so that the kinds stay readable (one line per image buried the few kinds under the same
unpinned-base note repeated)."""

from __future__ import annotations

import re

from imagegen.core.errors import Problem
from imagegen.matrix import rules

IMAGE_INDEX = re.compile(r"^images\[(\d+)\]")
INHERITED = re.compile(r"\(inherited by image ([^)\s]+)\)")


def lines(plan, lock_command) -> list[str]:
    """Untested combinations (one line per rule), unpinned bases, unhashed artifacts, images that lock only
    elsewhere."""
    found = [_grouped(plan.matrix, problems) for problems in _by_rule(rules.warnings(plan.matrix)).values()]
    unpinned = list(dict.fromkeys(image.name for image in plan.locked.values() if image.lock.base.note))
    if unpinned:
        found.append(f"{_count(unpinned)} no base digest: {', '.join(unpinned)} (each lock was made where its "
                     "base's registry did not answer, so the build goes FROM the tag as it is that day); `imagegen "
                     "lock` where the registry answers, or the scheduled locks workflow, pins them")
    unhashed = {image.name: image.lock.unhashed.rsplit("/", 1)[-1] for image in plan.locked.values()
                if image.lock.unhashed}
    if unhashed:
        found.append(f"{_count(list(unhashed))} an unhashed artifact: "
                     f"{', '.join(f'{name} ({what})' for name, what in unhashed.items())} (each lock was made where "
                     "its host did not answer); `imagegen build` refuses them unless told --allow-unhashed; `imagegen "
                     "lock` where the host answers, or the scheduled locks workflow, hashes them")
    elsewhere = list(dict.fromkeys(p.name for p in plan.images if p.key in plan.lock_warnings))
    if len(elsewhere) == 1:
        plan_image = next(p for p in plan.images if p.name == elsewhere[0])
        found.append(f"{elsewhere[0]}: {plan.lock_warnings[plan_image.key]}")
    elif elsewhere:
        indexes = ", ".join(f"{p.name} ({p.torch.index_url})" for p in plan.images
                            if p.key in plan.lock_warnings and p.platform == "linux/amd64") or ", ".join(elsewhere)
        found.append(f"{len(elsewhere)} images not locked: their torch builds are on the PyTorch index alone: "
                     f"{indexes}; run `{lock_command('NAME')}` for each where that index answers, or let the "
                     "scheduled locks workflow (.github/workflows/locks.yml) lock them")
    return found


def _by_rule(problems: list[Problem]) -> dict[str, list[Problem]]:
    grouped: dict[str, list[Problem]] = {}
    for problem in problems:
        grouped.setdefault(problem.rule, []).append(problem)
    return grouped


def _grouped(matrix, problems: list[Problem]) -> str:
    first, rest = problems[0], problems[1:]
    if not rest:
        return str(first)
    return f"{first} (and {len(rest)} more images: {', '.join(_image_of(matrix, p) for p in rest)})"


def _image_of(matrix, problem: Problem) -> str:
    """The image a warning is about, from its key (images[3].deepspeed) or its message (inherited by image X)."""
    index = IMAGE_INDEX.match(problem.key)
    if index and int(index.group(1)) < len(matrix.images):
        return matrix.images[int(index.group(1))].name
    inherited = INHERITED.search(problem.message)
    return inherited.group(1) if inherited else problem.key


def _count(names: list[str]) -> str:
    return f"{len(names)} images have" if len(names) > 1 else "1 image has"
