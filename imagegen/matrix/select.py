"""Pick planned images: --cuda, --torch, --python, --with, --image and --all, combined with AND; --platform narrows
them to one platform of images built for several."""

from __future__ import annotations

from dataclasses import dataclass, field

from imagegen.core.errors import UserError
from imagegen.matrix.components import Components
from imagegen.matrix.plan import PlannedImage
from imagegen.matrix.schema import PLATFORMS


@dataclass(frozen=True)
class Selection:
    """Which images a command works on. The help of each field is its option's (cli/fields.py makes them)."""
    cuda: str | None = field(default=None, metadata={"help": "Images on this CUDA; 12.4 matches 12.4.x.",
                                                      "metavar": "X.Y"})
    torch: str | None = field(default=None, metadata={"help": "Images with this torch; 2.5 matches 2.5.x.",
                                                       "metavar": "X.Y"})
    python: str | None = field(default=None, metadata={"help": "Images with this Python.", "metavar": "X.Y"})
    images: tuple[str, ...] = field(default=(), metadata={
        "help": "The image of this name (repeatable).", "flag": "--image", "metavar": "NAME"})
    all: bool = field(default=False, metadata={"help": "Every image of the matrix."})
    # components the image must have (a version, not none): `--with vllm` is the images with vLLM
    components: tuple[str, ...] = field(default=(), metadata={
        "help": "Images that have this component (a key of matrix.yaml's components, e.g. vllm; repeatable).",
        "flag": "--with", "metavar": "COMPONENT"})
    # narrows the others: one platform of images built for several
    platform: str | None = field(default=None, metadata={
        "help": "Only this platform of images built for several (default: each of an image's platforms).",
        "choices": PLATFORMS})

    @property
    def empty(self) -> bool:
        return not (self.cuda or self.torch or self.python or self.components or self.images or self.all)

    def describe(self) -> str:
        parts = [f"--{key} {value}" for key, value in
                 (("cuda", self.cuda), ("torch", self.torch), ("python", self.python)) if value]
        parts += [f"--with {key}" for key in self.components]
        parts += [f"--image {name}" for name in self.images]
        parts += [f"--platform {self.platform}"] if self.platform else []
        return " ".join(parts) or "--all"


def version_matches(wanted: str, actual: str | None) -> bool:
    """12.4 matches 12.4.1; 12.4.1 matches only itself; 12 matches every 12.x."""
    if actual is None:
        return False
    return actual.split(".")[: len(wanted.split("."))] == wanted.split(".")


def choose(plans: list[PlannedImage], selection: Selection, table: Components) -> list[PlannedImage]:
    """The platforms of images the selection names, in matrix order; UserError when none match. table: the matrix's
    components, which `--with` names."""
    names = list(dict.fromkeys(plan.name for plan in plans))  # an image of two platforms is one name
    unknown = [name for name in selection.images if name not in names]
    if unknown:
        raise UserError(f"no image named {', '.join(unknown)}; images: {', '.join(names)}")
    keys = table.keys
    strange = [key for key in selection.components if key not in keys]
    if strange:
        raise UserError(f"--with {', '.join(strange)}: not a component; components: {', '.join(keys)}")
    chosen = [plan for plan in plans if _matches(plan, selection)]
    if not chosen:
        raise UserError(f"no image matches {selection.describe()}; " + _what_exists(plans, selection))
    return chosen


def _matches(plan: PlannedImage, selection: Selection) -> bool:
    return ((selection.cuda is None or version_matches(selection.cuda, plan.gpu.cuda))
            and (selection.torch is None or version_matches(selection.torch, plan.version("torch")))
            and (selection.python is None or version_matches(selection.python, plan.version("python")))
            and all(plan.version(key) for key in selection.components)
            and (not selection.images or plan.name in selection.images)
            and (selection.platform is None or plan.platform == selection.platform))


def _what_exists(plans: list[PlannedImage], selection: Selection) -> str:
    known = {
        "CUDA versions": sorted({p.gpu.cuda_minor for p in plans if p.gpu.cuda_minor}, key=_key),
        "torch versions": sorted({p.version("torch") for p in plans}, key=_key),
        "Pythons": sorted({p.version("python") for p in plans}, key=_key),
    }
    asked = {"CUDA versions": selection.cuda, "torch versions": selection.torch, "Pythons": selection.python}
    shown = [kind for kind, value in asked.items() if value] or list(known)
    return "; ".join(f"{kind}: {', '.join(known[kind])}" for kind in shown)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())
