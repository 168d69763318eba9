"""What each command is asked, as dataclasses whose fields make its options (cli/fields.py): each field's metadata
holds its option's help, so each help is written once; commands that ask the same share it through the field makers
below. And the checks click runs on an option's value before any work."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click

from imagegen.engine.registry import COMPRESSIONS, registry_problem
from imagegen.matrix.schema import PLATFORMS
from imagegen.reports.listing import FORMATS
from imagegen.workspace import MATRIX_FILE, REPOSITORY_VARIABLE


def base_images_option(context, parameter, values) -> tuple[tuple[str, str], ...]:
    """--base-image REF (every platform) or PLATFORM=REF, as (platform or "", ref) pairs."""
    chosen = []
    for value in values:
        platform, equals, ref = value.partition("=")
        if equals and platform.startswith("linux/"):
            if platform not in PLATFORMS:
                raise click.BadParameter(f"{platform} is not one of {', '.join(PLATFORMS)}")
            chosen.append((platform, ref))
        else:
            chosen.append(("", value))
    return tuple(chosen)


def checked_registry(context, parameter, registry: str | None) -> str | None:
    """--registry, by the distribution spec's grammar, before any work."""
    problem = registry_problem(registry) if registry else None
    if problem:
        raise click.BadParameter(problem)
    return registry


def report_field(kind: str):
    """--report of the build, test or push command."""
    def replaceable(context, parameter, path: Path) -> Path:
        """Before any work: the report goes to a new file or replaces an earlier one of its kind, nothing else."""
        from imagegen.stages.results import why_not_replaceable

        problem = why_not_replaceable(path, kind)
        if problem:
            raise click.BadParameter(problem)
        return path

    return field(default=Path(f"reports/{kind}.json"), metadata={
        "help": f"Write the {kind} results here as JSON (a new file, or an earlier {kind} report).",
        "flag": "--report", "callback": replaceable})


def base_images_field():
    """--base-image of `build` and `render`."""
    return field(default=(), metadata={
        "flag": "--base-image", "metavar": "[PLATFORM=]REF", "callback": base_images_option, "help": (
            "Build FROM this image instead of the matrix's base: a mirror, a digest (nvidia/cuda@sha256:...) or a "
            "locally made image; PLATFORM=REF for one platform (--base-image linux/arm64=local/debian:bookworm-arm64), "
            "repeatable.")})


def apt_mirror_field():
    """--apt-mirror of `build` and `render`."""
    return field(default=None, metadata={"metavar": "URL", "help": "Fetch OS packages from this mirror."})


def force_field():
    return field(default=False, metadata={"help": "Overwrite a version tag that holds another image."})


def compression_field():
    """--compression of `push` and `build --push`."""
    return field(default="gzip", metadata={"choices": COMPRESSIONS, "help": (
        "Of the layers pushed. gzip: every engine pulls it, so it stays the default. zstd (through skopeo): the "
        "smallest, and a faster pull than gzip on every engine that pulls it (it decompresses several times as fast); "
        "Docker 23.0+, containerd 1.5+ and podman pull it, Docker 20.10 cannot. none: the layers as the engine holds "
        "them, nothing to decompress, at about twice gzip's bytes, for a registry near the nodes: push it to the "
        "mirror, or to a namespace of its own (HOST/NS/raw). docs/user-guide.md, 'Layer compression', says which for which engine.")})


def registry_user_field():
    return field(default=None, metadata={"metavar": "USER", "help": "User name for the registry; default: what "
                                         "`docker login` stored (docker config and credential helpers)."})


def registry_password_stdin_field():
    return field(default=False, metadata={"help": "Read the registry password or token from stdin (with "
                                          "--registry-user)."})


def require_gpu_field():
    return field(default=False, metadata={"help": "Fail, instead of skip, the GPU checks when the engine cannot "
                                          "hand out GPUs."})


def skip_train_field():
    return field(default=False, metadata={"help": "Leave out the two-step GRPO run of the selftest."})


@dataclass(frozen=True)
class WorkspaceFlags:
    """Where the matrix, the locks, the templates and the trainer are (cli/options.py makes the Workspace)."""
    matrix_path: Path | None = field(default=None, metadata={"flag": "--matrix", "help": (
        f"The compatibility matrix (default: {MATRIX_FILE} of the repository: the nearest folder from here upwards "
        f"that has one, or ${REPOSITORY_VARIABLE}).")})
    locks_dir: Path | None = field(default=None, metadata={"flag": "--locks", "help": (
        "Directory of the image locks (default: locks/ beside the matrix).")})
    templates: Path | None = field(default=None, metadata={"help": (
        "Directory of the layer templates (default: the repository's templates/).")})
    trainer_dir: Path | None = field(default=None, metadata={"flag": "--trainer", "help": (
        "The trainer distribution baked into the images (default: the repository's trainer/).")})


@dataclass(frozen=True)
class TestSettings:
    """What `imagegen test` is asked, beyond which images and where the workspace is."""
    require_gpu: bool = require_gpu_field()
    skip_train: bool = skip_train_field()
    report_path: Path = report_field("test")


@dataclass(frozen=True)
class BuildSettings:
    """What `imagegen build` is asked, beyond which images and where the workspace is."""
    base_images: tuple[tuple[str, str], ...] = base_images_field()
    apt_mirror: str | None = apt_mirror_field()
    ca_bundle: Path | None = field(default=None, metadata={"help": (
        "PEM bundle pip and uv trust inside the build, for TLS-intercepting proxies; mounted as a secret, never in a "
        "layer. Default: the file named by SSL_CERT_FILE, REQUESTS_CA_BUNDLE or PIP_CERT.")})
    pip_index_url: str | None = field(default=None, metadata={"metavar": "URL", "help": "The index inside the build "
                                                              "(a mirror)."})
    pip_extra_index_url: tuple[str, ...] = field(default=(), metadata={"metavar": "URL", "help": "Another index "
                                                                       "(repeatable)."})
    wheelhouse: Path | None = field(default=None, metadata={"help": (
        "Directory of wheels the installers take first; mounted into the install steps, never copied into a layer.")})
    docker_binary: str | None = field(default=None, metadata={"flag": "--docker", "metavar": "PATH", "help": (
        "The docker client to build with (default: $IMAGEGEN_DOCKER, else the first that builds with BuildKit).")})
    builder: str | None = field(default=None, metadata={"metavar": "NAME", "help": "A buildx builder, e.g. a remote "
                                                        "BuildKit."})
    context_dir: Path = field(default=Path("build/contexts"), metadata={"help": "Where the build contexts are "
                                                                         "rendered."})
    no_cache: bool = field(default=False, metadata={"help": (
        "Run every step again, as on a clean engine (the cache mounts of apt and pip stay). The inputs, and so the "
        "version tag, stay the same.")})
    keep_going: bool = field(default=False, metadata={"help": "Go on with the other images after one fails."})
    progress: str = field(default="auto", metadata={"choices": ["auto", "tty", "plain"], "help": (
        "tty: one live line per image and layer; plain: BuildKit's whole output (for CI logs); auto: tty on a "
        "terminal. The whole output always goes to REPORT_DIR/logs/.")})
    test: bool = field(default=False, metadata={"help": "Test each image right after it is built."})
    require_gpu: bool = require_gpu_field()
    skip_train: bool = skip_train_field()
    push: bool = field(default=False, metadata={"help": "Push each image whose tests passed (implies --test)."})
    registry: str | None = field(default=None, metadata={
        "metavar": "HOST[/NAMESPACE]", "callback": checked_registry, "help": "Where --push publishes."})
    compression: str = compression_field()
    force: bool = force_field()
    allow_unhashed: bool = field(default=False, metadata={"help": (
        "Build an image whose lock holds an artifact without a sha256 (a flash-attn wheel locked where GitHub did not "
        "answer); the image's label io.imagegen.unhashed and the build report name it. Refused otherwise.")})
    registry_user: str | None = registry_user_field()
    registry_password_stdin: bool = registry_password_stdin_field()
    report_path: Path = report_field("build")


@dataclass(frozen=True)
class PushSettings:
    """What `imagegen push` is asked, beyond which images and where the workspace is."""
    registry: str = field(default=None, metadata={
        "metavar": "HOST[/NAMESPACE]", "callback": checked_registry, "required": True, "help": "Where to publish."})
    skip_tests: bool = field(default=False, metadata={"help": "Push without a passing test result (not "
                                                      "recommended)."})
    force: bool = force_field()
    test_report: Path = field(default=Path("reports/test.json"), metadata={"help": "The test results that allow a "
                                                                            "push."})
    index_only: bool = field(default=False, metadata={"flag": "--index", "help": (
        "Only list each image's platform images, pushed before by one job per platform, in a multi-platform index "
        "under its tags.")})
    compression: str = compression_field()
    registry_user: str | None = registry_user_field()
    registry_password_stdin: bool = registry_password_stdin_field()
    report_path: Path = report_field("push")
    sign_key: Path | None = field(default=None, metadata={"metavar": "KEY.pem", "help": (
        "Sign each pushed image and its provenance with this EC private key (PEM; an encrypted one takes its password "
        "from COSIGN_PASSWORD), as cosign does: `cosign verify --key` and `imagegen verify --key` check them.")})


@dataclass(frozen=True)
class VerifySettings:
    """What `imagegen verify` is asked, beyond the image."""
    key: Path | None = field(default=None, metadata={"metavar": "KEY.pub", "help": (
        "The public key (PEM) the image and its provenance must be signed with (`push --sign-key`).")})
    registry_user: str | None = registry_user_field()
    registry_password_stdin: bool = registry_password_stdin_field()


@dataclass(frozen=True)
class MatrixSettings:
    """What `imagegen matrix` is asked, beyond which images and where the workspace is."""
    output_format: str = field(default="table", metadata={
        "flag": "--format", "choices": sorted(FORMATS), "help": "github prints a strategy.matrix include list for "
                                                                "fromJSON."})
    driver: str | None = field(default=None, metadata={"metavar": "VERSION", "help": (
        "Instead: which images start on this NVIDIA driver (nvidia-smi's Driver Version, e.g. 550.54.15), on "
        "datacenter GPUs and on others, and which through forward compatibility (the cuda-compat of nvidia/cuda "
        "bases).")})


@dataclass(frozen=True)
class RenderSettings:
    """What `imagegen render` is asked, beyond which images and where the workspace is."""
    out: Path = field(metadata={"required": True, "help": "Directory for the build contexts."})
    base_images: tuple[tuple[str, str], ...] = base_images_field()
    apt_mirror: str | None = apt_mirror_field()


@dataclass(frozen=True)
class FactsCheckSettings:
    """What `imagegen facts check` is asked, beyond where the workspace is."""
    strict: bool = field(default=False, metadata={"help": (
        "Exit 1 also while any fact is not checked (an index that does not answer): what the scheduled locks workflow "
        "runs, where every index answers.")})
    base_registry: str | None = field(default=None, metadata={"metavar": "HOST[:PORT]", "help": (
        "Ask this registry (a mirror) whether each base tag exists, as HOST/REPOSITORY:TAG, instead of the registry "
        "the base's name points to (Docker Hub).")})


@dataclass(frozen=True)
class SbomSettings:
    """What `imagegen sbom` is asked, beyond the image and where the workspace is."""
    out: Path | None = field(default=None, metadata={"help": "Write it to this file instead of stdout."})


def stage_report_field(stage: str):
    """--build, --test and --push of `imagegen report`: where that stage's report is read."""
    return field(default=Path(f"reports/{stage}.json"), metadata={"flag": f"--{stage}", "help": (
        f"{stage.title()} report; missing: the {stage} cells say \"not run\".")})


@dataclass(frozen=True, kw_only=True)
class ReportSettings:
    """What `imagegen report` is asked, beyond where the workspace is."""
    build_report: Path = stage_report_field("build")
    test_report: Path = stage_report_field("test")
    push_report: Path = stage_report_field("push")
    reports_dir: Path | None = field(default=None, metadata={
        "flag": "--from", "type": click.Path(path_type=Path, exists=True, file_okay=False),
        "help": "Read every build.json, test.json and push.json under this directory instead."})
    out: Path = field(metadata={"required": True, "help": "Directory for index.md and index.html."})
