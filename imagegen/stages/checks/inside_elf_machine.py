"""Every shared library in the image's environment is built for the image's platform: an x86_64 wheel in an
arm64 image (a wheelhouse mix-up) would only fail at import, on the user's machine. A library for another machine
in a folder named for that machine's target is a cross-compilation file its wheel ships on purpose (the x86_64 wheel
of nvidia-cutlass-dsl has lib/stubs/aarch64-unknown-linux-gnu/), and one whose own name says its machine is picked by
that name at run time (debugpy's aarch64 wheel, which JupyterLab's kernel brings, ships its x86-64 process-attach
helper pydevd_attach_to_process/attach_linux_amd64.so): counted, not failed."""

import re

from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME = "inside.elf_machine"
NAMES, PHASE, NEEDS = (NAME,), "inside", ("inventory",)
ELF_MACHINE = {"linux/amd64": 62, "linux/arm64": 183}  # e_machine: EM_X86_64, EM_AARCH64
TARGET_FOLDER = {"62": ("x86_64",), "183": ("aarch64", "sbsa")}  # how folders for a machine's target begin
TARGET_NAME = {"62": ("x86_64", "amd64"), "183": ("aarch64", "arm64")}  # a word of a file name that says its machine


def shipped_for_its_target(path: str, machine: str) -> bool:
    """In a folder for the library's own target, or named for it: a file for that machine, shipped on purpose."""
    prefixes = TARGET_FOLDER.get(machine)
    folders, name = path.split("/")[:-1], path.rsplit("/", 1)[-1]
    named = re.search(r"(^|[-_.])(" + "|".join(TARGET_NAME.get(machine, ())) + r")([-_.]|$)", name)
    return bool(prefixes) and (any(part.startswith(prefixes) for part in folders) or named is not None)


def libraries_are_for(platform: str, machines: dict[str, list[str]]) -> Check:
    wanted = str(ELF_MACHINE[platform])
    count = sum(len(paths) for paths in machines.values())
    other = [(machine, path) for machine, paths in machines.items() if machine != wanted for path in paths]
    foreign = [path for machine, path in other if not shipped_for_its_target(path, machine)]
    if foreign or not count:
        return Check(NAME, FAIL, f"{len(foreign)} of {count} shared libraries are not built for {platform}: "
                                 f"{', '.join(foreign[:5])}")
    cross = f" but {len(other)} named for another target, as their wheels ship them" if other else ""
    return Check(NAME, PASS, f"all {count - len(other)} shared libraries in the environment are {platform}{cross}")


def run(context: Context) -> list[Check]:
    return context.with_inventory(NAME, lambda found: [libraries_are_for(context.platform, found["machines"])])
