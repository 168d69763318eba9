"""Compatibility rules: does each image entry fit the component facts of the matrix?

Every rule returns Problems that name the file, line and key, the rule broken and what
is allowed; `check` runs them all so a user sees every mistake at once.
"""

from __future__ import annotations

import re
from collections import Counter

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from imagegen.core import sizes
from imagegen.core.errors import Problem
from imagegen.matrix import cuda_wheels, drivers, known_bad, source_builds, torch_archs
from imagegen.matrix.versions import image_versions, torch_build, torch_cuda
from imagegen.matrix.model import ImageEntry, Matrix

PYTORCH_INDEX = "pytorch-index"  # an image's `lock:` when its torch build is on the PyTorch index alone


def check(matrix: Matrix, trainer_requirements: tuple[Requirement, ...] = ()) -> list[Problem]:
    problems = _check_facts(matrix)
    for image in matrix.images:
        image_problems = _check_image(matrix, image)
        problems += image_problems or _check_trainer_fits(matrix, image, trainer_requirements)
    problems += _check_unique_names(matrix)
    return problems


def warnings(matrix: Matrix) -> list[Problem]:
    """Combinations that work but nobody tested, or that known regressions make slow: said, not refused."""
    found = []
    for image in matrix.images:
        if image.torch in matrix.torch:
            found += known_bad.matches(matrix, image, image_versions(matrix, image), warned=True)
            found += torch_archs.warnings(matrix, image, torch_build(matrix, image))
        deepspeed = image.versions.get("deepspeed")
        release = matrix.packages.get("deepspeed", {}).get(deepspeed or "")
        tested = release.tested_torch if release else ()
        if deepspeed and tested and _minor(image.torch) not in tested:
            found.append(matrix.problem(
                _at(image, "deepspeed"),
                f"deepspeed {deepspeed} is tested with torch {', '.join(tested)}, "
                f"not {_minor(image.torch)}", "deepspeed-tested-torch"))
    return found


def _at(image: ImageEntry, key: str) -> tuple:
    return ("images", image.index, key)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _check_facts(matrix: Matrix) -> list[Problem]:
    problems = []
    for minor, cuda in matrix.cuda.items():
        if cuda.os not in matrix.os:
            problems.append(matrix.problem(("cuda", minor, "os"), f"unknown os {cuda.os!r}; "
                                           f"allowed: {', '.join(matrix.os)}", "known-os"))
        problems += _check_archs(matrix, minor)
        if not cuda.version.startswith(minor + "."):
            problems.append(matrix.problem(("cuda", minor, "version"), f"version {cuda.version} is not a "
                                           f"{minor}.x release", "cuda-version"))
    for version, torch in matrix.torch.items():
        if _specifier(torch.python) is None:
            problems.append(matrix.problem(("torch", version, "python"), f"{torch.python!r} is not a version "
                                           "range; write one such as \">=3.9,<3.14\"", "python-range"))
        if torch.pypi_build not in torch.builds:
            problems.append(matrix.problem(("torch", version, "pypi_build"), f"{torch.pypi_build} is not one of "
                                           f"its builds: {', '.join(torch.builds)}", "pypi-build"))
    return problems + known_bad.fact_problems(matrix) + drivers.fact_problems(matrix)


def _check_archs(matrix: Matrix, minor: str) -> list[Problem]:
    cuda = matrix.cuda[minor]
    archs_of = cuda.archs_by_platform
    listed = matrix.located.data["cuda"][minor]["archs"]
    per_platform = isinstance(listed, dict)
    problems = [matrix.problem(("cuda", minor, "archs", platform), f"{platform} is not among its platforms "
                               f"({', '.join(cuda.platforms)})", "cuda-arch") for platform in archs_of
                if platform not in cuda.platforms]
    problems += [matrix.problem(("cuda", minor, "archs"), f"no archs for {platform}: list the compute "
                                f"capabilities of its GPUs under archs.{platform}", "cuda-arch")
                 for platform in cuda.platforms if platform not in archs_of]
    for platform, archs in archs_of.items():
        for index, arch in enumerate(archs):
            if not re.fullmatch(r"\d+\.\d+", arch):
                path = ("cuda", minor, "archs", *((platform,) if per_platform else ()), index)
                problems.append(matrix.problem(path, f"{arch!r} is not a compute capability such as \"8.0\"",
                                               "cuda-arch"))
    return problems


def _check_platforms(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    """Every platform the image is built for has its base, its torch wheels and its flash-attn."""
    problems = []
    cuda = matrix.cuda.get(image.cuda) if image.cuda else None
    build = torch_build(matrix, image)
    for platform in image.platforms:
        if cuda is not None and not cuda_wheels.from_wheels(image) and platform not in cuda.platforms:
            problems.append(matrix.problem(_at(image, "platforms"), f"the nvidia/cuda {cuda.version} images have no "
                                           f"{platform} variant (its platforms: {', '.join(cuda.platforms)})",
                                           "platform-base"))
        if build is not None and platform not in build.platforms:
            problems.append(matrix.problem(_at(image, "platforms"), f"torch {image.torch}'s CUDA {build.cuda} build "
                                           f"has no {platform} wheels (its platforms: {', '.join(build.platforms)})",
                                           "platform-torch"))
        if platform != "linux/amd64" and image.versions.get("flash_attn") and "flash_attn" not in image.source_builds:
            problems.append(matrix.problem(_at(image, "flash_attn"), f"flash-attn publishes no {platform} wheels: "
                                           "use {version: ..., build: source} or none for an image built for "
                                           f"{platform}", "platform-flash-attn"))
    if len(set(image.platforms)) != len(image.platforms):
        problems.append(matrix.problem(_at(image, "platforms"), "a platform is listed twice", "platform-base"))
    return problems


def _check_image(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    problems = _check_versions_parse(matrix, image)
    if problems:
        return problems
    problems += _check_base(matrix, image)
    torch = matrix.torch.get(image.torch)
    if torch is None:
        return problems + [matrix.problem(_at(image, "torch"), f"torch {image.torch} is not in the torch "
                                          f"section; known: {', '.join(matrix.torch)}", "known-torch")]
    problems += _check_torch_build(matrix, image)
    pythons = _specifier(torch.python)  # an unparseable range is reported by _check_facts
    if pythons is not None and image.python not in pythons:
        problems.append(matrix.problem(_at(image, "python"), f"torch {torch.version} has wheels for Python "
                                       f"{torch.python}, not {image.python}", "python-in-torch-range"))
    problems += _check_python_source(matrix, image)
    problems += _check_flash_attn(matrix, image)
    problems += _check_stack(matrix, image)
    problems += _check_max_size(matrix, image)
    problems += _check_platforms(matrix, image)
    problems += _check_lock_source(matrix, image)
    problems += _check_named_components(matrix, image)
    return problems


def _check_versions_parse(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    problems = []
    pinned = {c.key: image.versions.get(c.key) for c in matrix.components
              if c.image_key and not c.artifact and c.key in image.versions}  # artifacts are checked apart
    for key, value in pinned.items():
        if value == "":
            problems.append(matrix.problem(("images", image.index), f"missing {key!r}: set it on the image "
                                           "or under defaults", "required-key"))
        elif value is not None and not _is_version(value):
            problems.append(matrix.problem(_at(image, key), f"{value!r} is not an exact version such as "
                                           "\"1.2.3\"", "exact-version"))
    return problems


def _check_base(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    if image.cuda is None and image.base is None:
        return [matrix.problem(("images", image.index), "set cuda (an nvidia/cuda base), base (an image name) "
                               "with os, or both (CUDA from NVIDIA's wheels on that base)", "base-image")]
    if image.cuda is not None and image.cuda not in matrix.cuda:
        return [matrix.problem(_at(image, "cuda"), f"CUDA {image.cuda} is not in the cuda section; known: "
                               f"{', '.join(matrix.cuda)}", "known-cuda")]
    if image.base is not None and image.os not in matrix.os:
        return [matrix.problem(_at(image, "os"), f"an image with its own base must say its os; known: "
                               f"{', '.join(matrix.os)}", "known-os")]
    return cuda_wheels.check(matrix, image)


def _check_torch_build(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    torch = matrix.torch[image.torch]
    if image.torch_build == "pypi":
        return []
    wanted = image.torch_build or image.cuda
    if wanted is None:
        return [matrix.problem(_at(image, "torch_build"), "an image without a CUDA base needs torch_build: "
                               f"pypi or one of {', '.join(torch.builds)}", "torch-cuda-build")]
    problems = []
    if wanted not in torch.builds:
        problems.append(matrix.problem(_at(image, "torch_build" if image.torch_build else "torch"),
                                       f"torch {torch.version} has no build for CUDA {wanted}; its builds: "
                                       f"{', '.join(torch.builds)}", "torch-cuda-build"))
    elif image.cuda is not None and wanted != image.cuda:
        problems.append(matrix.problem(_at(image, "torch_build"), f"torch build CUDA {wanted} differs from "
                                       f"the base's CUDA {image.cuda}; use the same", "torch-cuda-build"))
    return problems


def _check_python_source(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    os_name = image.os if image.base is not None or image.cuda not in matrix.cuda else matrix.cuda[image.cuda].os
    os_facts = matrix.os.get(os_name)
    if os_facts is None or os_facts.python == image.python or os_facts.extra_python:
        return []
    return [matrix.problem(_at(image, "python"), f"{os_name} ships Python {os_facts.python} and has no "
                           f"source for {image.python}; use {os_facts.python} or an os with extra_python",
                           "python-source")]


def _check_flash_attn(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    version = image.versions.get("flash_attn")
    if version is None:
        return []
    if not _is_version(version):
        return [matrix.problem(_at(image, "flash_attn"), f"{version!r} is not a version; use one "
                               "such as \"2.8.3\", none, or {version: X, build: source}", "exact-version")]
    if image.cuda is None and image.torch_build != "pypi":
        return []
    if "flash_attn" in image.source_builds:
        if image.flavor == "runtime":
            return [matrix.problem(_at(image, "flash_attn"), "a source build needs the devel base (nvcc); "
                                   "set flavor: devel", "flash-attn-source-needs-devel")]
        return source_builds.check_cxx_standard(matrix, image)
    release = matrix.flash_attn.get(version)
    if release is None:
        return [matrix.problem(_at(image, "flash_attn"), f"flash-attn {version} has no prebuilt "
                               f"wheels listed; listed: {', '.join(matrix.flash_attn)}; or set "
                               "{version: ..., build: source}", "flash-attn-wheel")]
    torch = matrix.torch[image.torch]
    cuda = torch_cuda(matrix, image)
    gaps = []
    build = torch_build(matrix, image)
    if build is not None and build.cxx11_abi not in release.cxx11_abi:
        gaps.append(f"the {_abi(build.cxx11_abi)} of torch {torch.version}'s CUDA {build.cuda} build "
                    f"(its wheels: {', '.join(_abi(abi) for abi in release.cxx11_abi) or 'none'})")
    major = cuda.split(".")[0] if cuda else None
    covered = release.torch_for(major) if major else release.torch
    if _minor(torch.version) not in covered:
        on = f" on CUDA {major}" if major in release.torch_by_cuda else ""
        gaps.append(f"torch {_minor(torch.version)} (covered{on}: {', '.join(covered)})")
    if major is not None and major not in release.cuda:
        gaps.append(f"CUDA {major} (covered: {', '.join(release.cuda)})")
    if image.python not in release.python:
        gaps.append(f"Python {image.python} (covered: {', '.join(release.python)})")
    if not gaps:
        return []
    return [matrix.problem(_at(image, "flash_attn"), f"flash-attn {version} has no prebuilt wheel for "
                           + "; ".join(gaps) + ". Pick a covering release, or opt into "
                           "{version: ..., build: source}", "flash-attn-wheel")]


def _abi(cxx11: bool) -> str:
    return "C++11 ABI" if cxx11 else "pre-C++11 ABI"


def _check_stack(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    problems = []
    torchvision = matrix.torch[image.torch].torchvision
    stated = image.versions.get("torchvision")
    if stated is not None and stated != torchvision:
        problems.append(matrix.problem(_at(image, "torchvision"), f"torch {image.torch} pairs with torchvision "
                                       f"{torchvision}, not {stated}", "torchvision-matches-torch"))
    for component in matrix.components.pinned:
        if component.key not in ("torch", "torchvision"):  # torch's own facts are checked above
            problems += _check_package_facts(matrix, image, component.key)
    return problems + known_bad.matches(matrix, image, image_versions(matrix, image), warned=False)


def _check_package_facts(matrix: Matrix, image: ImageEntry, key: str) -> list[Problem]:
    """The image's Python and torch satisfy what the pinned release declares on the index."""
    version = image.versions.get(key)
    if version is None:
        return []
    name = matrix.components[key].distribution
    release = matrix.packages.get(name, {}).get(version)
    if release is None:
        return [matrix.problem(_at(image, key), f"no facts for {name} {version}: `imagegen facts update "
                               f"{name}=={version}` adds packages.{name}.\"{version}\" with its Requires-Python and "
                               "torch as PyPI says",
                               "package-facts")]
    problems = []
    pythons = _specifier(release.python or "")
    if pythons is None:
        problems.append(matrix.problem(("packages", name, version, "python"), f"{release.python!r} is not a "
                                       "version range such as \">=3.9\"", "python-range"))
    elif not pythons.contains(image.python + ".0", prereleases=True):
        problems.append(matrix.problem(_at(image, "python"), f"{name} {version} requires Python {release.python}, the "
                                       f"image has {image.python}; pick another Python or another {name}",
                                       "package-python"))
    torches = _specifier(release.torch) if release.torch else None
    if release.torch and torches is None:
        problems.append(matrix.problem(("packages", name, version, "torch"), f"{release.torch!r} is not a "
                                       "version range such as \">=2.6\"", "version-range"))
    elif torches is not None and not torches.contains(image.torch, prereleases=True):
        problems.append(matrix.problem(_at(image, key), f"{name} {version} requires torch {release.torch}, the "
                                       f"image has {image.torch}", "package-torch"))
    build = torch_build(matrix, image)
    if release.cxx11_abi is not None and build is not None and build.cxx11_abi != release.cxx11_abi:
        problems.append(matrix.problem(_at(image, key), f"{name} {version} loads code built with the "
                                       f"{_abi(release.cxx11_abi)} into torch, and torch {image.torch}'s CUDA "
                                       f"{build.cuda} build has the {_abi(build.cxx11_abi)}: pick a torch build with "
                                       f"the {_abi(release.cxx11_abi)}, or set {key}: none", "package-abi"))
    return problems


def _check_lock_source(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    """An image whose torch build only the PyTorch index serves says so: it locks where that index answers."""
    torch = matrix.torch.get(image.torch)
    cuda = torch_cuda(matrix, image) if torch else None
    if torch is None or cuda is None:
        return []
    on_pypi = cuda == torch.pypi_build
    declared = image.lock_source == PYTORCH_INDEX
    if on_pypi and declared:
        return [matrix.problem(_at(image, "lock"), f"torch {image.torch}'s CUDA {cuda} build is on PyPI, so the "
                               f"image locks anywhere: drop `lock: {PYTORCH_INDEX}`", "lock-source")]
    if not on_pypi and not declared:
        return [matrix.problem(("images", image.index, "name"), f"torch {image.torch}'s CUDA {cuda} build is on "
                               f"the PyTorch index alone, which not every machine reaches: declare `lock: "
                               f"{PYTORCH_INDEX}` so that an unlocked image is a warning, not an error",
                               "lock-source")]
    return []


def _check_max_size(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    if image.max_size is None:
        return []
    try:
        sizes.parse(image.max_size)
    except ValueError as error:
        return [matrix.problem(_at(image, "max_size"), f"{error}; write a size such as \"7GB\" or \"6.5GiB\"",
                               "size")]
    return []


def _check_trainer_fits(matrix: Matrix, image: ImageEntry, requirements: tuple[Requirement, ...]) -> list[Problem]:
    """The trainer is installed last, under the image's pins: its requirements must accept them."""
    problems = []
    for requirement in requirements:
        component = matrix.components.of_distribution(requirement.name)
        version = image.versions.get(component.key) if component and component.pinned else None
        if version and not requirement.specifier.contains(version, prereleases=True):
            problems.append(matrix.problem(_at(image, component.key), f"the trainer requires {requirement}, "
                                           f"the image pins {version}", "trainer-requirements"))
    return problems


def _check_named_components(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    """A component marked in_name is in the names of the images that have it, and only theirs (-vllm0.31)."""
    problems = []
    for component in (c for c in matrix.components if c.in_name):
        version = image.versions.get(component.key)
        wanted = f"-{component.key}{_minor(version)}" if version else None
        if (wanted and not image.name.endswith(wanted)) or (not wanted and f"-{component.key}" in image.name):
            problems.append(matrix.problem(_at(image, "name"), f"{component.key} {version or 'none'}: an image with "
                                           f"{component.key} is named ...-{component.key}<X.Y> and only such an "
                                           f"image{f'; name it ...{wanted}' if wanted else ''}", "component-in-name"))
    return problems


def _check_unique_names(matrix: Matrix) -> list[Problem]:
    counts = Counter(image.name for image in matrix.images)
    problems = []
    seen: set[str] = set()
    for image in matrix.images:
        if counts[image.name] > 1 and image.name in seen:
            problems.append(matrix.problem(_at(image, "name"), f"name {image.name!r} is used by another image; "
                                           "names must be unique", "unique-name"))
        seen.add(image.name)
    if matrix.latest is not None and matrix.latest not in counts:
        problems.append(matrix.problem(("latest",), f"latest names {matrix.latest!r}, which is no image; "
                                       f"images: {', '.join(counts)}", "known-image"))
    return problems


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return text.count(".") >= 1


def _specifier(text: str) -> SpecifierSet | None:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None
