"""The image's labels are the ones its matrix entry gives (skipped for an image given by reference only). The base
label may name another base that stood in for the lock's (--base-image), which then names the lock's."""

from imagegen.render.tags import BASE_LABEL, base_label_matches
from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME = "labels.match_matrix"
NAMES, PHASE, NEEDS = (NAME,), "image", ("matrix",)


def run(context: Context) -> list[Check]:
    labels = context.facts["labels"]
    differing = [f"{key}={labels.get(key)!r} (matrix: {value!r})" for key, value in context.image.labels.items()
                 if not (base_label_matches(labels, value) if key == BASE_LABEL else labels.get(key) == value)]
    if differing:
        return [Check(NAME, FAIL, "; ".join(differing))]
    return [Check(NAME, PASS, f"{len(context.image.labels)} labels equal the matrix entry")]
