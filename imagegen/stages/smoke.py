"""Check a built image from the inside: the versions it holds equal its tag, labels and
matrix entry; it runs as a non-root user; its commands answer; and `vlmgrpo selftest`
(the check program baked into the image) passes, with the GPU checks run where the
engine can hand out GPUs and skipped, with the reason, where it cannot.

An image of another platform than the engine's (arm64 on an x86_64 host) runs under QEMU user
emulation, where importing torch hangs or crashes: it gets every check that needs no torch (versions from
the installed distributions' metadata, the machine of every shared library, its user and
commands), and the others are reported as needing a native host.
"""

from __future__ import annotations

import json
import time

from imagegen.engine import containers
from imagegen.core import platforms
from imagegen.render.locked import LockedImage
from imagegen.stages.results import FAIL, PASS, SKIP, Check, TestResult
from imagegen.render.tags import DIGEST_CHARS, INPUTS_LABEL, LABEL_PREFIX, version_prefix

# Label keys (after io.imagegen.) and the `vlmgrpo info` keys that report the same thing.
SELFTEST_TIMEOUT_S = 1800
ELF_MACHINE = {"linux/amd64": 62, "linux/arm64": 183}  # e_machine: EM_X86_64, EM_AARCH64

# Runs inside the image under emulation (standard library only; torch is not imported): the versions
# of the components expected.json names, read from installed metadata, torch's CUDA from its
# version.py, and the ELF machine of every shared library in the virtual environment.
INVENTORY_PROGRAM = r'''
import json, os, re, sys
from importlib import metadata

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

expected = json.load(open(os.environ.get("IMAGEGEN_EXPECTED", "/etc/imagegen/expected.json")))
installed = sorted((d.metadata["Name"].lower(), d.version) for d in metadata.distributions() if d.metadata["Name"])
versions = {key: version(name) for key, name in expected.get("distributions", {}).items()}
versions["python"] = "%d.%d.%d" % sys.version_info[:3]
versions["vlmgrpo"] = version("vlmgrpo")
for key, family in (("cudnn", "nvidia-cudnn-cu"), ("nccl", "nvidia-nccl-cu")):
    versions[key] = next((v for n, v in installed if n.replace("_", "-").startswith(family)), None)
try:
    text = open(metadata.distribution("torch").locate_file("torch/version.py")).read()
    found = re.search(r"^cuda\b[^=]*=\s*['\"]([^'\"]+)", text, re.M)
    versions["torch_cuda"] = found.group(1) if found else None
except (metadata.PackageNotFoundError, OSError):
    versions["torch_cuda"] = None
machines = {}
for directory, _, files in os.walk(sys.prefix):
    for name in files:
        if ".so" in name:
            path = os.path.join(directory, name)
            with open(path, "rb") as stream:
                head = stream.read(20)
            if head[:4] == b"\x7fELF":
                machines.setdefault(str(int.from_bytes(head[18:20], "little")), []).append(path)
print(json.dumps({"versions": versions, "machines": machines}))
'''


def test_image(ref: str, image: LockedImage | None, require_gpu: bool, skip_train: bool,
               client=None) -> TestResult:
    """Every check on one image; a failure is a result, not an exception."""
    client = client or containers.docker_client()
    started = time.monotonic()
    facts = containers.image_facts(ref, client=client)
    engine = platforms.PLATFORM_OF_MACHINE.get(client.info().get("Architecture", ""), "")
    emulated = facts["platform"] != engine
    gpu, gpu_reason = (False, _native_only(facts["platform"])) if emulated else \
        containers.gpu_runtime_available(client)
    labels = {k[len(LABEL_PREFIX) + 1:]: v for k, v in facts["labels"].items() if k.startswith(LABEL_PREFIX + ".")}
    checks = [_labels_match_spec(facts["labels"], image), _runs_as_non_root(facts["user"])]
    versions, inside_checks = (_inventory if emulated else _info)(ref, facts["platform"], client)
    checks += inside_checks
    if versions is not None:
        checks += _versions_match_labels(versions, labels, image)
        checks.append(_tag_matches_inside(facts, versions))
    checks.append(_answers(ref, ["train", "--help"], "command.train_help", client))
    if emulated:
        checks += [Check(name, SKIP, _native_only(facts["platform"])) for name in ("gpu.runtime", "selftest")]
    else:
        checks.append(_gpu_runtime_check(gpu, gpu_reason, require_gpu))
        checks += _selftest(ref, gpu, require_gpu, skip_train, client)
    failed = any(check.status == FAIL for check in checks)
    return TestResult(image=image.name if image else labels.get("image", ref), ref=ref,
                      status="failed" if failed else "passed", platform=facts["platform"],
                      mode="emulated" if emulated else "gpu" if gpu else "native", image_id=facts["id"],
                      gpu_runtime=gpu, gpu_reason=gpu_reason, duration_s=round(time.monotonic() - started, 1),
                      checks=checks)


def _native_only(platform: str) -> str:
    return (f"needs a native {platform} host: this engine runs the image under QEMU user emulation, where "
            "importing torch hangs or crashes")


def _labels_match_spec(labels: dict[str, str], image: LockedImage | None) -> Check:
    if image is None:
        return Check("labels.match_matrix", SKIP, "no matrix entry given; the image's own labels are the reference")
    differing = [f"{key}={labels.get(key)!r} (matrix: {value!r})" for key, value in image.labels.items()
                 if labels.get(key) != value]
    if differing:
        return Check("labels.match_matrix", FAIL, "; ".join(differing))
    return Check("labels.match_matrix", PASS, f"{len(image.labels)} labels equal the matrix entry")


def _runs_as_non_root(user: str) -> Check:
    if user.split(":")[0] in ("", "0", "root"):
        return Check("user.nonroot", FAIL, f"the image's USER is {user or 'unset'} (root)")
    return Check("user.nonroot", PASS, f"USER {user}")


def _info(ref: str, platform: str, client) -> tuple[dict | None, list[Check]]:
    """The versions `vlmgrpo info` reports, torch imported."""
    run = containers.run_in_image(ref, ["info"], gpu=False, timeout_s=300, client=client)
    try:
        info = json.loads(run.stdout)
    except json.JSONDecodeError:
        return None, [Check("command.info", FAIL, f"exit {run.exit_code}, no JSON: "
                            f"{_tail(run.stdout + run.stderr)}")]
    return info["versions"], [Check("command.info", PASS, "prints versions and hardware as JSON")]


def _inventory(ref: str, platform: str, client) -> tuple[dict | None, list[Check]]:
    """The versions the installed metadata records, and the machine every shared library was built for."""
    run = containers.run_in_image(ref, ["python", "-c", INVENTORY_PROGRAM], gpu=False, timeout_s=600, client=client)
    try:
        found = json.loads(run.stdout)
    except json.JSONDecodeError:
        return None, [Check("inside.inventory", FAIL, f"exit {run.exit_code}, no JSON: "
                            f"{_tail(run.stdout + run.stderr)}")]
    checks = [Check("command.info", SKIP, _native_only(platform)),
              Check("inside.inventory", PASS, "versions from the installed distributions' metadata")]
    return found["versions"], checks + [_libraries_are_for(platform, found["machines"])]


def _libraries_are_for(platform: str, machines: dict[str, list[str]]) -> Check:
    wanted = str(ELF_MACHINE[platform])
    count = sum(len(paths) for paths in machines.values())
    foreign = [path for machine, paths in machines.items() if machine != wanted for path in paths]
    if foreign or not count:
        return Check("inside.elf_machine", FAIL, f"{len(foreign)} of {count} shared libraries are not built for "
                     f"{platform}: {', '.join(foreign[:5])}")
    return Check("inside.elf_machine", PASS, f"all {count} shared libraries in the environment are {platform}")


def _versions_match_labels(versions: dict, labels: dict[str, str], image: LockedImage | None) -> list[Check]:
    checks = []
    keys = {c.label: c.key for c in image.plan.components} if image else \
        {label: label.replace("-", "_").replace(".", "_") for label in labels}
    for label, key in {**keys, "trainer": "vlmgrpo"}.items():
        if label not in labels:
            continue
        inside = versions.get(key)
        wanted = labels[label]
        same = _same_version(label, inside, wanted)
        detail = f"inside {inside or 'absent'}, label {wanted}"
        checks.append(Check(f"inside.{label}", PASS if same else FAIL, detail))
    return checks


def _same_version(label: str, inside: str | None, wanted: str) -> bool:
    """Inside reports may be shorter (cuDNN 9.1.0 for 9.1.0.70) or carry a local part (+cu124)."""
    if wanted == "none":
        return inside is None
    if inside is None:
        return False
    inside = inside.split("+")[0]
    parts = len(inside.split("."))
    if label == "python":
        return inside.split(".")[:2] == wanted.split(".")[:2]
    return inside == wanted or (label in ("cudnn", "nccl") and wanted.split(".")[:parts] == inside.split("."))


def _tag_matches_inside(facts: dict, versions: dict) -> Check:
    """Every version tag is rebuilt from what the image reports, and ends in the digest of the inputs
    its label records; any difference means it lies."""
    derived = version_prefix(versions.get("vlmgrpo"), versions)
    label = facts["labels"].get("org.opencontainers.image.version")
    if not label:
        return Check("tag.matches_inside", FAIL, "no org.opencontainers.image.version label: not an imagegen "
                     f"image, or its labels were stripped; the image holds {derived}")
    version_tags = [label]
    version_tags += [platforms.without_arch(ref.rsplit(":", 1)[1]) for ref in facts["tags"]
                     if "-torch" in ref.rsplit(":", 1)[1]]
    lying = [tag for tag in version_tags if not tag.startswith(derived + "-")]
    if lying:
        return Check("tag.matches_inside", FAIL, f"tag {lying[0]} but the image holds {derived}")
    inputs = facts["labels"].get(INPUTS_LABEL, "").removeprefix("sha256:")[:DIGEST_CHARS]
    other = [tag for tag in version_tags if not inputs or not tag.endswith("-" + inputs)]
    if other:
        return Check("tag.matches_inside", FAIL, f"tag {other[0]} does not end in the digest of the inputs the "
                     f"image was built from ({INPUTS_LABEL}={inputs or 'absent'})")
    return Check("tag.matches_inside", PASS, f"{', '.join(sorted(set(version_tags)))} match the inside")


def _answers(ref: str, args: list[str], name: str, client) -> Check:
    run = containers.run_in_image(ref, args, gpu=False, timeout_s=300, client=client)
    if run.exit_code == 0:
        return Check(name, PASS, f"`{' '.join(args)}` exits 0")
    return Check(name, FAIL, f"`{' '.join(args)}` exits {run.exit_code}: {_tail(run.stderr or run.stdout)}")


def _gpu_runtime_check(gpu: bool, reason: str, require_gpu: bool) -> Check:
    if gpu:
        return Check("gpu.runtime", PASS, reason)
    return Check("gpu.runtime", FAIL if require_gpu else SKIP, reason)


def _selftest(ref: str, gpu: bool, require_gpu: bool, skip_train: bool, client) -> list[Check]:
    args = ["selftest"] + (["--require-gpu"] if require_gpu else []) + (["--skip-train"] if skip_train else [])
    run = containers.run_in_image(ref, args, gpu=gpu, timeout_s=SELFTEST_TIMEOUT_S, shm_size="2g", client=client)
    try:
        report = json.loads(run.stdout)
        checks = [Check(f"selftest.{c['name']}", c["status"], c.get("detail", "")) for c in report["checks"]]
    except (json.JSONDecodeError, KeyError, TypeError):
        return [Check("selftest", FAIL, f"exit {run.exit_code}, no report: {_tail(run.stderr or run.stdout)}")]
    if run.exit_code != 0 and not any(check.status == FAIL for check in checks):
        checks.append(Check("selftest", FAIL, f"exit {run.exit_code} with no failing check"))
    return checks


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])
