"""Every shared library in the image's environment is built for the image's platform: an x86_64 wheel in an
arm64 image (a wheelhouse mix-up) would only fail at import, on the user's machine."""

from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME, ORDER = "inside.elf_machine", 40
ELF_MACHINE = {"linux/amd64": 62, "linux/arm64": 183}  # e_machine: EM_X86_64, EM_AARCH64


def libraries_are_for(platform: str, machines: dict[str, list[str]]) -> Check:
    wanted = str(ELF_MACHINE[platform])
    count = sum(len(paths) for paths in machines.values())
    foreign = [path for machine, paths in machines.items() if machine != wanted for path in paths]
    if foreign or not count:
        return Check(NAME, FAIL, f"{len(foreign)} of {count} shared libraries are not built for {platform}: "
                                 f"{', '.join(foreign[:5])}")
    return Check(NAME, PASS, f"all {count} shared libraries in the environment are {platform}")


def run(context: Context) -> list[Check]:
    return context.with_inventory(NAME, lambda found: [libraries_are_for(context.platform, found["machines"])])
