"""Each component's version inside the image equals its label, judged inside the image: the inventory program reads
the versions without importing torch and compares them with the image's expected.json by the one rule the image's own
checks use (vlmgrpo.inventory.version_matches); here each label must be the version that comparison was against."""

from imagegen.render.expected import of_inventory
from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME = "inside"  # one check per label: inside.<label>
NAMES, PHASE, NEEDS = (NAME,), "inside", ("inventory",)
TRAINER_KEY = "vlmgrpo"  # the trainer's version is no component of expected.json: its label is the installed version


def keys_of_labels(context: Context, found: dict) -> dict[str, str]:
    """Label -> the component key the inventory reports it under: from the matrix entry's table, else from the
    labels the image's own expected.json names."""
    if context.image is not None:
        table = {c.label: c.key for c in context.image.plan.components}
    else:
        expected = of_inventory(found)
        table = {label: key for key, label in (expected.labels if expected else {}).items()}
    return {**table, "trainer": TRAINER_KEY}


def label_check(label: str, key: str, wanted: str, found: dict) -> Check:
    name, judged = f"{NAME}.{label}", (found.get("compared") or {}).get(key)
    if judged is None:
        inside = found["versions"].get(key)
        if key != TRAINER_KEY:
            return Check(name, FAIL, f"inside {inside or 'absent'}, label {wanted}, but the image's expected.json "
                                     f"names no {key} to judge it by")
        return Check(name, PASS if inside == wanted else FAIL, f"inside {inside or 'absent'}, label {wanted}")
    if (judged["expected"] or "none") != wanted:
        return Check(name, FAIL, f"label {wanted}, but the image was built to hold {judged['expected'] or 'none'} "
                                 "(its expected.json)")
    return Check(name, PASS if judged["matches"] else FAIL, f"inside {judged['inside'] or 'absent'}, label {wanted}")


def versions_match_labels(found: dict, labels: dict[str, str], keys: dict[str, str]) -> list[Check]:
    return [label_check(label, key, labels[label], found) for label, key in keys.items() if label in labels]


def run(context: Context) -> list[Check]:
    return context.with_inventory(NAME, lambda found: versions_match_labels(found, context.labels,
                                                                            keys_of_labels(context, found)))
