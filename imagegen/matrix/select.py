"""Pick images from the plan: --cuda, --torch, --python, --image and --all, combined with AND."""

from __future__ import annotations

from dataclasses import dataclass

from imagegen.core.errors import UserError
from imagegen.matrix.plan import ImageSpec


@dataclass(frozen=True)
class Selection:
    cuda: str | None = None
    torch: str | None = None
    python: str | None = None
    images: tuple[str, ...] = ()
    all: bool = False
    platform: str | None = None  # narrows the others: one platform of images built for several

    @property
    def empty(self) -> bool:
        return not (self.cuda or self.torch or self.python or self.images or self.all)

    def describe(self) -> str:
        parts = [f"--{key} {value}" for key, value in
                 (("cuda", self.cuda), ("torch", self.torch), ("python", self.python)) if value]
        parts += [f"--image {name}" for name in self.images]
        parts += [f"--platform {self.platform}"] if self.platform else []
        return " ".join(parts) or "--all"


def version_matches(wanted: str, actual: str | None) -> bool:
    """12.4 matches 12.4.1; 12.4.1 matches only itself; 12 matches every 12.x."""
    if actual is None:
        return False
    return actual.split(".")[: len(wanted.split("."))] == wanted.split(".")


def choose(specs: list[ImageSpec], selection: Selection) -> list[ImageSpec]:
    """The specs the selection names, in matrix order; UserError when none match."""
    unknown = [name for name in selection.images if name not in {s.name for s in specs}]
    if unknown:
        raise UserError(f"no image named {', '.join(unknown)}; images: {', '.join(s.name for s in specs)}")
    chosen = [spec for spec in specs if _matches(spec, selection)]
    if not chosen:
        raise UserError(f"no image matches {selection.describe()}; " + _what_exists(specs, selection))
    return chosen


def _matches(spec: ImageSpec, selection: Selection) -> bool:
    return ((selection.cuda is None or version_matches(selection.cuda, spec.cuda))
            and (selection.torch is None or version_matches(selection.torch, spec.torch))
            and (selection.python is None or version_matches(selection.python, spec.python))
            and (not selection.images or spec.name in selection.images)
            and (selection.platform is None or spec.platform == selection.platform))


def _what_exists(specs: list[ImageSpec], selection: Selection) -> str:
    known = {
        "CUDA versions": sorted({s.cuda_minor for s in specs if s.cuda_minor}, key=_key),
        "torch versions": sorted({s.torch for s in specs}, key=_key),
        "Pythons": sorted({s.python for s in specs}, key=_key),
    }
    asked = {"CUDA versions": selection.cuda, "torch versions": selection.torch, "Pythons": selection.python}
    shown = [kind for kind, value in asked.items() if value] or list(known)
    return "; ".join(f"{kind}: {', '.join(known[kind])}" for kind in shown)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())
