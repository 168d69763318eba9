"""matrix.yaml as typed data: the facts as the schema validated them (schema.CudaFacts, TorchFacts, ...), and each
image entry resolved once: its defaults applied and its components gathered by key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path as FilePath

from imagegen.matrix.components import IMAGE, Components
from imagegen.core.errors import MatrixError, Problem, UserError
from imagegen.matrix import schema, yamlsource
from imagegen.matrix.schema import (DEFAULT_PLATFORMS, CudaFacts, DriverFacts, FlashAttnRelease, OsFacts,
                                   PackageRelease, TorchFacts)

NONE = "none"  # spelled in the matrix for a component an image leaves out


@dataclass(frozen=True)
class KnownBad:
    """A combination users reported broken: a version range per component key; `with_component` what else the
    image has (deepspeed, or qwen-vl: its trainer runs Qwen-VL models); warned instead of refused if `warn`."""

    ranges: dict[str, str]
    with_component: str | None
    reason: str
    index: int
    warn: bool = False
    issues: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageEntry:
    """One image of the matrix, every platform of it, as the file says (defaults applied)."""

    index: int
    name: str
    cuda: str | None
    base: str | None
    os: str | None
    flavor: str
    torch_build: str | None
    platforms: tuple[str, ...]
    # Each component the image sets (or inherits from defaults), by key; None where it says `none`. A component it
    # never names is absent, so that adding one to some images leaves the others' labels and tags as they were. A
    # component torch decides (cuDNN, NCCL) is absent unless the image repeats it (torchvision may).
    versions: dict[str, str | None]
    source_builds: frozenset[str]  # artifact components ({version: ..., build: source}) compiled in the build
    deepspeed_ops: tuple[str, ...]
    max_size: str | None = None  # a size budget such as "7GB"; checked by rules, enforced after the build
    lock_source: str = "pypi"  # where its lock can be made: "pypi", or "pytorch-index" (see matrix.yaml)

    @property
    def python(self) -> str:
        return self.versions["python"] or ""

    @property
    def torch(self) -> str:
        return self.versions["torch"] or ""


@dataclass
class Matrix:
    located: yamlsource.Located
    repository: str
    latest: str | None
    os: dict[str, OsFacts]
    cuda: dict[str, CudaFacts]
    drivers: DriverFacts  # which CUDA each driver branch supports, and the datacenter brands (imagegen.matrix.drivers)
    torch: dict[str, TorchFacts]
    flash_attn: dict[str, FlashAttnRelease]
    packages: dict[str, dict[str, PackageRelease]]  # package -> version -> facts
    known_bad: list[KnownBad]
    components: Components
    images: list[ImageEntry] = field(default_factory=list)

    def problem(self, path: tuple, message: str, rule: str) -> Problem:
        """A problem at `path`; an image key the image inherits points at its line in defaults."""
        if len(path) == 3 and path[0] == "images" and path[2] not in self.located.data["images"][path[1]] \
                and path[2] in self.located.data.get("defaults", {}):
            name = self.located.data["images"][path[1]].get("name", path[1])
            return self.located.problem(("defaults", path[2]), f"(inherited by image {name}) {message}", rule)
        return self.located.problem(path, message, rule)


def read(path: FilePath) -> Matrix:
    """Read and shape-check a matrix file; compatibility rules are checked by `rules`."""
    try:
        text = yamlsource.read(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the matrix file: {exc.strerror}. "
                        "Pass --matrix PATH to point at another one.") from None
    return parse(text, str(path))


def parse(text: str, file: str) -> Matrix:
    located = yamlsource.load(text, file)
    if not isinstance(located.data, dict):
        raise MatrixError([located.problem((), "the matrix must be a mapping with keys such as "
                                           "cuda, torch and images", "type")])
    valid, problems = schema.validated(located)
    if problems:
        raise MatrixError(problems)
    return _build(located, valid)


def _build(located: yamlsource.Located, valid) -> Matrix:
    table = schema.component_table(valid.components)
    return Matrix(
        located=located,
        repository=valid.repository,
        latest=valid.latest,
        os=dict(valid.os),
        cuda=schema.keyed(valid.cuda),
        drivers=valid.drivers,
        torch=schema.keyed(valid.torch),
        flash_attn=schema.keyed(valid.flash_attn),
        packages={name: dict(releases) for name, releases in (valid.packages or {}).items()},
        known_bad=[_known_bad(i, k, table) for i, k in enumerate(valid.known_bad or ())],
        components=table,
        images=[_image(i, {**_set(valid.defaults), **_set(entry)}, table) for i, entry in enumerate(valid.images)],
    )


def _set(model) -> dict:
    """The keys a validated entry (an image, the defaults) sets, with their validated values; {} for no entry. An
    optional key it leaves out is None in the model, and None is no value it may set."""
    return {key: getattr(model, key) for key in model.model_fields_set} if model is not None else {}


def _known_bad(index: int, entry, table: Components) -> KnownBad:
    """A validated known-bad entry: its range of each component it names (an unnamed one is None in the model)."""
    ranges = {key: getattr(entry, key) for key in table.keys if getattr(entry, key) is not None}
    return KnownBad(ranges, entry.with_, entry.reason, index, bool(entry.warn), tuple(entry.issues or ()))


def _image(index: int, e: dict, table: Components) -> ImageEntry:
    missing = [c.key for c in table if c.required and c.source == IMAGE and c.key not in e]
    if missing:
        # Reported by rules with a line number; keep a placeholder to carry on.
        e = {**e, **{k: "" for k in missing}}
    versions, source_builds = {}, set()
    for component in table:
        if component.key not in e:
            continue
        value = e[component.key]
        if isinstance(value, schema.SourceBuild):  # {version: ..., build: source|wheel}
            if value.build == "source":
                source_builds.add(component.key)
            value = value.version
        versions[component.key] = None if value == NONE else value
    return ImageEntry(
        index=index,
        name=e["name"],
        cuda=e.get("cuda"),
        base=e.get("base"),
        os=e.get("os"),
        flavor=e.get("flavor", "devel"),
        torch_build=e.get("torch_build"),
        platforms=tuple(e.get("platforms", DEFAULT_PLATFORMS)),
        versions=versions,
        source_builds=frozenset(source_builds),
        deepspeed_ops=tuple(e.get("deepspeed_ops", ())),
        max_size=e.get("max_size"),
        lock_source=e.get("lock", "pypi"),
    )
