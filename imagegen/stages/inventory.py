"""What an image holds, as the one inventory program reports it: imagegen_contract.inventory, a standard-library
program imagegen runs as text inside any image with Python (also under QEMU emulation, where importing torch crashes),
so that `imagegen test`, `imagegen sbom` and the image's own `vlmgrpo info` and `vlmgrpo selftest` read one answer.
The check runner is the contract's too (imagegen_contract.checkrunner): the host's checks and the image's run by it.
Both come from the contract distribution imagegen is installed with, which the images install from the same source."""

from __future__ import annotations

import json
from importlib import resources

from imagegen_contract import checkrunner
from imagegen_contract import inventory as inventory_module

from imagegen.engine import containers
from imagegen.engine.containers import ContainerError

TIMEOUT_S = 600


def program() -> str:
    """The inventory program's text, as `python -c` runs it in an image."""
    return resources.files(inventory_module.__package__).joinpath("inventory.py").read_text(encoding="utf-8")


def runner():
    """The one check runner, of the host's checks and the image's own."""
    return checkrunner


def of_image(image: str, text: str, *, client=None) -> dict:
    """The inventory of a local image; ContainerError when the image cannot run it."""
    run = containers.run_in_image(image, ["python", "-c", text], gpu=False, timeout_s=TIMEOUT_S, client=client)
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        detail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        raise ContainerError(f"{image}: cannot list what it holds (`python -c <inventory>` exited {run.exit_code}: "
                             f"{detail}); the image needs `python` on its PATH") from None
