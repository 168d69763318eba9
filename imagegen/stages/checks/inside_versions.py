"""inside.<label>: each version label says what the image holds: the version its expected.json says it was built to
hold (which version.<key> judges against what is installed, inside the image), and for the trainer, which expected.json
does not name, its installed version. The label is the host's own fact; the versions inside are the inventory's."""

from imagegen.render.expected import Expected, of_inventory
from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME = "inside"  # one check per label: inside.<label>
NAMES, PHASE, NEEDS = (NAME,), "inside", ("inventory",)
TRAINER_KEY = "vlmgrpo"  # the trainer's version is no component of expected.json: its label is the installed version


def keys_of_labels(context: Context, expected: Expected | None) -> dict[str, str]:
    """Label -> the component key the inventory reports it under: from the matrix entry's table, else from the
    labels the image's own expected.json names."""
    if context.image is not None:
        table = {c.label: c.key for c in context.image.plan.components}
    else:
        table = {label: key for key, label in (expected.labels if expected else {}).items()}
    return {**table, "trainer": TRAINER_KEY}


def label_check(label: str, key: str, wanted: str, found: dict, built: dict[str, str | None] | None) -> Check:
    """built: the versions the image's expected.json names (None: it holds none)."""
    name = f"{NAME}.{label}"
    if key == TRAINER_KEY:
        inside = found["versions"].get(key)
        return Check(name, PASS if inside == wanted else FAIL, f"inside {inside or 'absent'}, label {wanted}")
    if built is None or key not in built:
        return Check(name, FAIL, f"label {wanted}, but the image's expected.json names no {key}: nothing says what "
                                 "it was built to hold")
    held = built[key] or "none"
    if held != wanted:
        return Check(name, FAIL, f"label {wanted}, but the image was built to hold {held} (its expected.json)")
    return Check(name, PASS, f"label {wanted}, as the image was built to hold (its expected.json; what is installed "
                             "is judged inside the image)")


def versions_match_labels(found: dict, labels: dict[str, str], keys: dict[str, str],
                          expected: Expected | None) -> list[Check]:
    """expected: the image's expected.json as its inventory read it (None: it holds none)."""
    built = expected.versions if expected is not None else None
    return [label_check(label, key, labels[label], found, built) for label, key in keys.items() if label in labels]


def judged(context: Context, found: dict) -> list[Check]:
    expected = of_inventory(found)  # read once, for the keys and the versions
    return versions_match_labels(found, context.labels, keys_of_labels(context, expected), expected)


def run(context: Context) -> list[Check]:
    return context.with_inventory(NAME, lambda found: judged(context, found))
