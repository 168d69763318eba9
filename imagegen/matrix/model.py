"""matrix.yaml as typed, plain data: component facts and the image entries that use them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path as FilePath

from imagegen.matrix.components import IMAGE, Components
from imagegen.matrix.components import table as components_table
from imagegen.core.errors import MatrixError, Problem, UserError
from imagegen.matrix import schema, yamlsource

NONE = "none"  # spelled in the matrix for a component an image leaves out
DEFAULT_PLATFORMS = ("linux/amd64",)
CXX_STANDARD = 17  # of a torch release or a flash-attn build that says none


@dataclass(frozen=True)
class OsFacts:
    name: str
    python: str
    glibc: str  # the manylinux level its wheels are resolved for
    extra_python: str | None


@dataclass(frozen=True)
class CudaFacts:
    minor: str  # "12.4"
    version: str  # "12.4.1"
    os: str
    cudnn: int | None  # of the base image: None when it carries none (torch's nvidia-cudnn wheel is what torch loads)
    base_devel: str
    base_runtime: str
    driver_minimum: str
    platforms: tuple[str, ...]  # those its base images exist for
    archs: dict[str, tuple[str, ...]]  # platform -> compute capabilities to build for


@dataclass(frozen=True)
class TorchBuild:
    """One CUDA build of a torch release: what its wheels pin, and their C++ ABI."""

    cuda: str
    cudnn: str
    nccl: str
    cxx11_abi: bool
    platforms: tuple[str, ...]  # those it has wheels for
    source: str | None = None  # where its pins come from, when no index here confirms them (the release's, if unset)
    archs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # platform -> what its wheels were compiled for


@dataclass(frozen=True)
class TorchFacts:
    version: str
    builds: dict[str, TorchBuild]
    pypi_build: str
    python: str  # a PEP 440 specifier such as ">=3.9,<3.14"
    torchvision: str
    source: str | None = None  # where its facts come from (PyTorch's build matrix at the release tag)
    cxx_standard: int = CXX_STANDARD  # what its headers require (ATen/ATen.h's `#error C++20 or later ...`)


@dataclass(frozen=True)
class FlashAttnRelease:
    version: str
    torch: tuple[str, ...]
    cuda: dict[str, str]  # CUDA major -> the tag in the wheel's name
    python: tuple[str, ...]
    cxx11_abi: tuple[bool, ...]  # the C++ ABIs its wheels are built for
    requires: tuple[str, ...]  # its own requirements, installed from the lock beside it
    source: str | None = None  # its release page: what lists its wheels
    cxx_standard: int = CXX_STANDARD  # the -std=c++NN its source build compiles with
    torch_by_cuda: dict[str, tuple[str, ...]] = field(default_factory=dict)  # CUDA major -> torch minors, if fewer

    def torch_for(self, cuda_major: str) -> tuple[str, ...]:
        """The torch major.minor releases its wheels for that CUDA major cover."""
        return self.torch_by_cuda.get(cuda_major, self.torch)


@dataclass(frozen=True)
class PackageRelease:
    """What one release of a package declares on the index."""

    python: str | None  # Requires-Python, if it declares one
    torch: str | None  # the torch it requires, if any
    tested_torch: tuple[str, ...]  # torch major.minor its CI tests (DeepSpeed)


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
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read the matrix file: {exc.strerror}. "
                        "Pass --matrix PATH to point at another one.") from None
    return parse(text, str(path))


def parse(text: str, file: str) -> Matrix:
    located = yamlsource.load(text, file)
    if not isinstance(located.data, dict):
        raise MatrixError([located.problem((), "the matrix must be a mapping with keys such as "
                                           "cuda, torch and images", "type")])
    problems = schema.check(located)
    if problems:
        raise MatrixError(problems)
    return _build(located)


def _build(located: yamlsource.Located) -> Matrix:
    data = located.data
    defaults = data.get("defaults", {})
    table = components_table(data["components"])
    return Matrix(
        located=located,
        repository=data["repository"],
        latest=data.get("latest"),
        os={name: OsFacts(name, o["python"], o["glibc"], o.get("extra_python")) for name, o in data["os"].items()},
        cuda={minor: _cuda(minor, c) for minor, c in data["cuda"].items()},
        torch={v: _torch(v, t) for v, t in data["torch"].items()},
        flash_attn={v: FlashAttnRelease(v, tuple(f["torch"]), dict(f["cuda"]), tuple(f["python"]),
                                        tuple(f["cxx11_abi"]), tuple(f.get("requires", ())), f.get("source"),
                                        f.get("cxx_standard", CXX_STANDARD),
                                        {major: tuple(t) for major, t in (f.get("torch_by_cuda") or {}).items()})
                    for v, f in data.get("flash_attn", {}).items()},
        packages={name: {v: PackageRelease(r.get("python"), r.get("torch"), tuple(r.get("tested_torch", ())))
                         for v, r in releases.items()}
                  for name, releases in data.get("packages", {}).items()},
        known_bad=[KnownBad({key: k[key] for key in table.keys if key in k}, k.get("with"), k["reason"], i,
                            k.get("warn", False), tuple(k.get("issues", ())))
                   for i, k in enumerate(data.get("known_bad", []))],
        components=table,
        images=[_image(i, {**defaults, **entry}, table) for i, entry in enumerate(data["images"])],
    )


def _cuda(minor: str, c: dict) -> CudaFacts:
    platforms = tuple(c.get("platforms", DEFAULT_PLATFORMS))
    archs = c["archs"] if isinstance(c["archs"], dict) else {platform: c["archs"] for platform in platforms}
    return CudaFacts(minor, c["version"], c["os"], c.get("cudnn"), c["base"]["devel"], c["base"]["runtime"],
                     c["driver"]["minimum"], platforms,
                     {platform: tuple(listed) for platform, listed in archs.items()})


def _torch(version: str, t: dict) -> TorchFacts:
    """A build's cudnn, nccl and cxx11_abi default to the release's."""
    builds = {cuda: TorchBuild(cuda, b.get("cudnn", t["cudnn"]), b.get("nccl", t["nccl"]),
                               b.get("cxx11_abi", t["cxx11_abi"]),
                               tuple(b.get("platforms", t.get("platforms", DEFAULT_PLATFORMS))),
                               b.get("source", t.get("source")),
                               {platform: tuple(archs) for platform, archs in (b.get("archs") or {}).items()})
              for cuda, b in t["builds"].items()}
    return TorchFacts(version, builds, t["pypi_build"], t["python"], t["torchvision"], t.get("source"),
                      t.get("cxx_standard", CXX_STANDARD))


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
        if isinstance(value, dict):  # {version: ..., build: source|wheel}
            if value["build"] == "source":
                source_builds.add(component.key)
            value = value["version"]
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
