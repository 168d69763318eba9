"""What an image holds, as the one inventory program reports it: vlmgrpo/inventory.py in the trainer, a
standard-library program imagegen runs as text inside any image with Python (also under QEMU emulation,
where importing torch crashes), so that `imagegen test`, `imagegen sbom` and the image's own `vlmgrpo info`
and `vlmgrpo selftest` read one answer."""

from __future__ import annotations

import json
from pathlib import Path

from imagegen.core.errors import UserError
from imagegen.engine import containers
from imagegen.engine.containers import ContainerError

PROGRAM = "src/vlmgrpo/inventory.py"  # in the trainer's source tree
TIMEOUT_S = 600


def program(trainer_dir: Path) -> str:
    """The inventory program's text, from the trainer source the images are built from."""
    path = trainer_dir / PROGRAM
    try:
        return path.read_text()
    except OSError as error:
        raise UserError(f"{path}: cannot read the inventory program ({error.strerror}); pass --trainer DIR, the "
                        "trainer source the image was built from") from None


def of_image(image: str, text: str, *, client=None) -> dict:
    """The inventory of a local image; ContainerError when the image cannot run it."""
    run = containers.run_in_image(image, ["python", "-c", text], gpu=False, timeout_s=TIMEOUT_S, client=client)
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        detail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        raise ContainerError(f"{image}: cannot list what it holds (`python -c <inventory>` exited {run.exit_code}: "
                             f"{detail}); the image needs `python` on its PATH") from None
