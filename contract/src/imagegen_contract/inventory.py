"""What an environment holds, as one JSON object, read with the standard library only.

    python -m imagegen_contract.inventory [EXPECTED]
    python -c "<this file's text>" [EXPECTED]

It imports nothing outside the standard library (not torch, not packaging), so it runs in any image with Python >= 3.8,
also under QEMU emulation where importing torch crashes: imagegen runs this file's text inside images for
`imagegen test` and `imagegen sbom`, and `vlmgrpo info` and `vlmgrpo selftest` read their versions from it.

EXPECTED is imagegen's expected-versions file (imagegen.render.expected defines it), JSON: {"format": 1, "versions":
{key: version | null}, "distributions": {key: distribution}, "families": {key: distribution-name prefix}, "gpu_count":
..., "cuda_archs": [...], "driver": {...}}, a file without "format" being format 1; its path is the argument, else
$IMAGEGEN_EXPECTED, else there is none (imagegen owns where the file lies).

The object's keys:
  "python":           the interpreter's full version (platform.python_version(), e.g. "3.11.7" or "3.13.0rc1").
  "distributions":    every installed distribution (the first of a name on sys.path, as import finds it), sorted by
                      name, each {"name", "version", "hashes": {algorithm: digest} from direct_url.json's
                      archive_info ({} when absent), "license_expression": License-Expression or null, "license":
                      License's first 300 characters or null, "license_classifiers": ["License :: ...", ...]}.
  "os":               {"id", "version_id"}: ID and VERSION_ID from /etc/os-release (/usr/lib/os-release), or null.
  "package_manager":  "deb" (dpkg-query found), "rpm" (rpm found) or null.
  "os_packages":      the installed OS packages, sorted by name, each {"name", "version", "arch"}; [] without one.
  "machines":         {ELF e_machine number as a string ("62" x86-64, "183" AArch64, ...): [paths of the shared
                      libraries (*.so, *.so.N) under sys.prefix built for it, sorted]}; links are not followed.
  "versions":         component key -> version or null, read without importing anything: each key of EXPECTED's
                      "distributions" (that distribution's version), each key of its "families" (the version of the
                      installed distribution whose name starts with the prefix; several are listed ", "-joined, in
                      name order, so a comparison with one expected version fails), "python" (major.minor.micro),
                      "torch_cuda" (the `cuda = '...'` line of torch/version.py) and "vlmgrpo".
  "version_checks":   the one verdict on the versions (version_checks): [{"name": "version.<key>", "status": "pass" or
                      "fail", "detail"}] for each key of EXPECTED's "versions" but cuDNN and NCCL read from torch, by
                      version_matches; `imagegen test` reports it, and so does `vlmgrpo selftest` run alone; null
                      without EXPECTED.
  "expected":         EXPECTED's content as read, or null without one: what the image was built to hold, which
                      `imagegen test` compares with its labels for an image it has no matrix entry of.
"""

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata

# The shape of the expected-versions file this program reads (imagegen.render.expected.FORMAT): another is refused.
EXPECTED_FORMAT = 1
LICENSE_CHARS = 300
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")
_SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)\s*$", re.MULTILINE)
_RELEASE = re.compile(r"^v?(\d+(?:\.\d+)*)(.*)$")
# Torch reports these with three parts (cuDNN 9.1.0), their wheels with four (nvidia-cudnn-cu12 9.1.0.70).
LIBRARY_KEYS = ("cudnn", "nccl")
DPKG_FORMAT = "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n"
RPM_FORMAT = "%{NAME}\t%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\t%{ARCH}\n"


def normalize(name):
    """A distribution name as PEP 503 compares names: Flash_Attn and flash-attn are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed():
    """Normalized name -> Distribution, the first of each name on sys.path."""
    found = {}
    for distribution in metadata.distributions():
        name = distribution.metadata.get("Name")
        if name and normalize(name) not in found:
            found[normalize(name)] = distribution
    return found


def installed_version(name):
    """The installed version of one distribution, or None."""
    distribution = installed().get(normalize(name))
    return distribution.version if distribution else None


def archive_hashes(distribution):
    """The hashes pip recorded for the archive it installed from (PEP 610 direct_url.json), {} without them."""
    try:
        info = json.loads(distribution.read_text("direct_url.json") or "{}").get("archive_info") or {}
    except ValueError:
        return {}
    hashes = dict(info.get("hashes") or {})
    if not hashes and "=" in (info.get("hash") or ""):
        algorithm, _, digest = info["hash"].partition("=")
        hashes[algorithm] = digest
    return hashes


def describe(distribution):
    meta = distribution.metadata
    license_text = meta.get("License")
    return {
        "name": meta.get("Name"),
        "version": distribution.version,
        "hashes": archive_hashes(distribution),
        "license_expression": meta.get("License-Expression"),
        "license": license_text[:LICENSE_CHARS] if license_text else None,
        "license_classifiers": [c for c in (meta.get_all("Classifier") or []) if c.startswith("License ::")],
    }


def distributions():
    found = installed()
    return [describe(found[name]) for name in sorted(found)]


def os_release(paths=OS_RELEASE):
    for path in paths:
        try:
            with open(path) as stream:
                lines = stream.read().splitlines()
        except OSError:
            continue
        fields = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
        return {"id": _unquoted(fields.get("ID")), "version_id": _unquoted(fields.get("VERSION_ID"))}
    return None


def _unquoted(value):
    return value.strip().strip("\"'") if value is not None else None


def package_manager():
    if shutil.which("dpkg-query"):
        return "deb"
    if shutil.which("rpm"):
        return "rpm"
    return None


def os_packages(manager):
    """Installed OS packages as the package manager lists them; [] without one or when it fails."""
    if manager is None:
        return []
    command = (["dpkg-query", "-W", "-f", DPKG_FORMAT] if manager == "deb"
               else ["rpm", "-qa", "--qf", RPM_FORMAT])
    try:
        output = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                universal_newlines=True, timeout=300).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    packages = []
    for line in output.splitlines():
        fields = line.split("\t")
        if manager == "deb":
            if len(fields) != 4 or fields[0][1:2] != "i":  # the second status letter: i for installed
                continue
            fields = fields[1:]
        if len(fields) == 3:
            packages.append({"name": fields[0], "version": fields[1], "arch": fields[2]})
    return sorted(packages, key=lambda package: (package["name"], package["arch"]))


def elf_machine(path):
    """The e_machine field of an ELF file's header, or None for anything else."""
    try:
        with open(path, "rb") as stream:
            header = stream.read(20)
    except OSError:
        return None
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    return int.from_bytes(header[18:20], "big" if header[5] == 2 else "little")


def machines(root=None):
    """ELF machine number (a string) -> the shared libraries under root (sys.prefix) built for it."""
    found = {}
    for directory, _, files in os.walk(root or sys.prefix):
        for name in files:
            path = os.path.join(directory, name)
            if not _SHARED_LIBRARY.search(name) or os.path.islink(path):
                continue
            machine = elf_machine(path)
            if machine is not None:
                found.setdefault(str(machine), []).append(path)
    return {machine: sorted(paths) for machine, paths in sorted(found.items())}


def torch_cuda():
    """torch's CUDA version from torch/version.py's text, without importing torch."""
    for entry in sys.path:
        path = os.path.join(entry or os.curdir, "torch", "version.py")
        if os.path.isfile(path):
            with open(path) as stream:
                match = _TORCH_CUDA.search(stream.read())
            return (match.group(1) or match.group(2)) if match else None
    return None


def component_versions(expected=None):
    """The "versions" object: EXPECTED's distributions and families, python, torch_cuda, vlmgrpo."""
    found = installed()
    expected = expected or {}
    versions = {}
    for key, name in (expected.get("distributions") or {}).items():
        distribution = found.get(normalize(name))
        versions[key] = distribution.version if distribution else None
    for key, prefix in (expected.get("families") or {}).items():
        members = [name for name in sorted(found) if name.startswith(normalize(prefix))]
        versions[key] = ", ".join(found[name].version for name in members) or None
    versions["python"] = "%d.%d.%d" % sys.version_info[:3]
    versions["torch_cuda"] = torch_cuda()
    versions["vlmgrpo"] = found["vlmgrpo"].version if "vlmgrpo" in found else None
    return versions


def public_version(version):
    """A version as PEP 440 compares public versions, without `packaging`: the local part (+cu124) dropped, trailing
    zeros of the release trimmed (2.6 is 2.6.0), the rest (rc1, .post1) lowercased."""
    match = _RELEASE.match(str(version).split("+")[0].strip().lower())
    if not match:
        return (), str(version).strip().lower()
    release = [int(part) for part in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return tuple(release), match.group(2).lstrip(".-_")


def version_matches(key, inside, expected, families=()):
    """The one rule a component's version inside is judged by, against what the image was built to hold:
    expected absent (None) means not installed; python by major.minor; a library torch reports shorter than its wheel
    (LIBRARY_KEYS) or a wheel family (families: nvidia-cudnn-cu12 9.1.0.70 for 9.1.0) where the shorter of the two
    starts the longer, in at least three parts or all of the longer; any other by its public version."""
    if expected is None:
        return inside is None
    if inside is None:
        return False
    inside, expected = str(inside), str(expected)
    if "," in inside:  # several installed distributions of one family (component_versions joins them): never one
        return False
    if key == "python":
        return inside.split(".")[:2] == expected.split(".")[:2]
    if key in LIBRARY_KEYS or key in families:
        ours, theirs = inside.split("+")[0].split("."), expected.split("+")[0].split(".")
        shared = min(len(ours), len(theirs))
        return ours[:shared] == theirs[:shared] and shared >= min(3, max(len(ours), len(theirs)))
    return public_version(inside) == public_version(expected)


def version_check(key, inside, wanted, families=()):
    """version.<key>: one component read here against the version the image was built to hold, by version_matches;
    {"name", "status": "pass" | "fail", "detail"}, the result shape of imagegen_contract.checkrunner (not imported: this
    program is the standard library alone)."""
    if key == "python":
        detail = "python %s, expected %s" % (inside, wanted)
    elif wanted is None and inside is None:
        detail = "%s absent, as expected" % key
    elif wanted is None:
        detail = "%s %s installed, expected absent" % (key, inside)
    elif inside is None:
        detail = "%s not installed, expected %s" % (key, wanted)
    else:
        detail = "%s %s, expected %s" % (key, inside, wanted)
    passed = version_matches(key, inside, wanted, families)
    return {"name": "version." + key, "status": "pass" if passed else "fail", "detail": detail}


def version_checks(expected, versions):
    """The one verdict on EXPECTED's versions, reported by `imagegen test` (also under emulation) and by `vlmgrpo
    selftest`: version.<key> for each key it names, read here. cuDNN and NCCL that no wheel family pins are read from
    torch (vlmgrpo.image.checks.torch_libraries), so are left out; any other key this program cannot read fails."""
    families = expected.get("families") or {}
    checks = []
    for key, wanted in (expected.get("versions") or {}).items():
        if key in versions:
            checks.append(version_check(key, versions[key], wanted, families))
        elif key not in LIBRARY_KEYS or key in families:
            checks.append({"name": "version." + key, "status": "fail",
                           "detail": "the expected file names no distribution for %s" % key})
    return checks


def read_expected(path):
    """(the expected-versions file's content, None) or (None, why there is none or {} and why it is unusable)."""
    if not path:
        return None, "no expected-versions file: set IMAGEGEN_EXPECTED or pass --expected FILE"
    if not os.path.isfile(path):
        return None, "no expected-versions file at %s" % path
    try:
        with open(path) as stream:
            expected = json.load(stream)
    except (OSError, ValueError) as exc:
        return {}, "cannot read %s: %s" % (path, exc)
    if not isinstance(expected, dict) or not isinstance(expected.get("versions"), dict):
        return {}, "%s does not hold imagegen's {\"versions\": {...}, \"distributions\": {...}}" % path
    if expected.get("format", EXPECTED_FORMAT) != EXPECTED_FORMAT:
        return {}, "%s is format %s of imagegen's expected-versions file; this trainer reads format %d" % (
            path, expected.get("format"), EXPECTED_FORMAT)
    return expected, None


def inventory(expected=None):
    manager = package_manager()
    versions = component_versions(expected)
    return {
        "python": platform.python_version(),
        "distributions": distributions(),
        "os": os_release(),
        "package_manager": manager,
        "os_packages": os_packages(manager),
        "machines": machines(),
        "versions": versions,
        "version_checks": version_checks(expected, versions) if expected is not None else None,
        "expected": expected,
    }


def main(argv):
    path = argv[0] if argv else os.environ.get("IMAGEGEN_EXPECTED")
    expected, reason = read_expected(path) if path else (None, None)
    if reason:
        sys.stderr.write("error: %s\n" % reason)
        return 2
    sys.stdout.write(json.dumps(inventory(expected)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:2]))
