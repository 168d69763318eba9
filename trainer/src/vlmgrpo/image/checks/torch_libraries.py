"""torch.cudnn, torch.nccl: cuDNN and NCCL as torch reports them, where no wheel family pins them (an
nvidia/cuda base's cuDNN, NCCL built into torch), so the inventory, which imports nothing, cannot read them
(inventory.LIBRARY_KEYS). Unqueryable (e.g. no GPU driver) is a skip, not a failure."""

from __future__ import annotations

from typing import Any

from vlmgrpo.image.info import cudnn_parts, cudnn_version, nccl_version
from imagegen_contract.inventory import LIBRARY_KEYS, version_matches
from vlmgrpo.image.checks import FAIL, PASS, SKIP, Context, libraries_from_torch, result

NAMES = tuple(f"torch.{key}" for key in LIBRARY_KEYS)  # not version.<key>: that is the inventory's, of the others
PHASE = "versions"
NEEDS = ("expected", "libraries_from_torch")  # no file, or both pinned by wheel families: the runner skips


def library_version_check(key: str, expected: Any) -> dict[str, str]:
    name = f"torch.{key}"
    if expected is None:
        return result(name, SKIP, f"{key} not expected (null)")
    if key == "cudnn":
        raw, why = cudnn_version()
        actual = cudnn_parts(raw) if raw else None
    else:
        actual, why = nccl_version()
    if actual is None:
        return result(name, SKIP, why or f"{key} cannot be queried")
    inside = ".".join(map(str, actual))
    ok = version_matches(key, inside, expected)
    return result(name, PASS if ok else FAIL, f"{key} {inside}, expected {expected}")


def run(context: Context) -> list[dict[str, str]]:
    wanted = context.expected["versions"]
    return [library_version_check(key, wanted[key]) for key in libraries_from_torch(context.expected)]
