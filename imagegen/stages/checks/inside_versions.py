"""Each component's version inside the image (its inventory, read without importing torch) equals its label."""

from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME = "inside"  # one check per label: inside.<label>
NAMES, ORDER, NEEDS = (NAME,), 50, ()
LIBRARIES = ("cudnn", "nccl")  # torch reports them shorter (cuDNN 9.1.0 for 9.1.0.70)


def same_version(label: str, inside: str | None, wanted: str) -> bool:
    """Inside reports may be shorter (cuDNN 9.1.0 for 9.1.0.70) or carry a local part (+cu124)."""
    if wanted == "none":
        return inside is None
    if inside is None:
        return False
    inside = inside.split("+")[0]
    parts = len(inside.split("."))
    if label == "python":
        return inside.split(".")[:2] == wanted.split(".")[:2]
    return inside == wanted or (label in LIBRARIES and wanted.split(".")[:parts] == inside.split("."))


def keys_of_labels(context: Context, found: dict) -> dict[str, str]:
    """Label -> the component key the inventory reports it under: from the matrix entry's table, else from the
    labels the image's own expected.json names."""
    if context.image is not None:
        table = {c.label: c.key for c in context.image.plan.components}
    else:
        table = {label: key for key, label in ((found.get("expected") or {}).get("labels") or {}).items()}
    return {**table, "trainer": "vlmgrpo"}


def versions_match_labels(versions: dict, labels: dict[str, str], keys: dict[str, str]) -> list[Check]:
    checks = []
    for label, key in keys.items():
        if label not in labels:
            continue
        inside, wanted = versions.get(key), labels[label]
        checks.append(Check(f"{NAME}.{label}", PASS if same_version(label, inside, wanted) else FAIL,
                            f"inside {inside or 'absent'}, label {wanted}"))
    return checks


def run(context: Context) -> list[Check]:
    return context.with_inventory(NAME, lambda found: versions_match_labels(found["versions"], context.labels,
                                                                            keys_of_labels(context, found)))
