"""What every check of an image reads: the image's facts and labels, its matrix entry when there is one, how
the engine runs it (natively, under emulation, with a GPU or not), and its inventory, run once."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

from imagegen.core import platforms
from imagegen.engine import containers
from imagegen.render.expected import UnreadableExpected
from imagegen.render.locked import LockedImage
from imagegen.render.tags import LABEL_PREFIX
from imagegen.stages import inventory
from imagegen.stages.results import FAIL, PASS, Check


@dataclass
class Context:
    ref: str
    image: LockedImage | None  # its matrix entry; None for an image given by reference only
    facts: dict  # containers.image_facts
    client: object
    emulated: bool  # another platform than the engine's: QEMU user emulation
    gpu: bool  # the engine can give the container GPUs
    gpu_reason: str
    require_gpu: bool
    skip_train: bool
    inventory_program: str
    runner: ModuleType  # stages.inventory.runner: the contract's check runner, which runs the image's own checks too
    _inventory: dict | None = field(default=None, repr=False)
    _inventory_error: str = ""

    @classmethod
    def of(cls, ref: str, image: LockedImage | None, require_gpu: bool, skip_train: bool, program: str,
           runner: ModuleType, client=None) -> "Context":
        client = client or containers.docker_client()
        facts = containers.image_facts(ref, client=client)
        engine = platforms.PLATFORM_OF_MACHINE.get(client.info().get("Architecture", ""), "")
        emulated = facts["platform"] != engine
        gpu, reason = (False, native_only(facts["platform"])) if emulated else containers.gpu_runtime_available(client)
        return cls(ref, image, facts, client, emulated, gpu, reason, require_gpu, skip_train, program, runner)

    @property
    def platform(self) -> str:
        return self.facts["platform"]

    @property
    def labels(self) -> dict[str, str]:
        """The io.imagegen.* labels, without the prefix."""
        prefix = LABEL_PREFIX + "."
        return {k[len(prefix):]: v for k, v in self.facts["labels"].items() if k.startswith(prefix)}

    def inventory(self) -> dict | None:
        """What the image holds (stages.inventory), run once; None when it could not be read (see
        inventory_error)."""
        if self._inventory is None and not self._inventory_error:
            try:
                self._inventory = inventory.of_image(self.ref, self.inventory_program, client=self.client)
            except containers.ContainerError as error:
                self._inventory_error = str(error)
        return self._inventory

    @property
    def inventory_error(self) -> str:
        return self._inventory_error

    def run(self, args: list[str], timeout_s: int = 300, gpu: bool = False, shm_size: str | None = None):
        return containers.run_in_image(self.ref, args, gpu=gpu, timeout_s=timeout_s, shm_size=shm_size,
                                       client=self.client)

    def with_inventory(self, name: str, use: Callable[[dict], list[Check]]) -> list[Check]:
        """use(the image's inventory), read (the runner skips a check without it: NEEDS "inventory"), or a failure
        when the expected file it read is not of imagegen's shape."""
        found = self.inventory()
        try:
            return use(found)
        except UnreadableExpected as error:
            return [Check(name, FAIL, str(error))]


def native_only(platform: str) -> str:
    return (f"needs a native {platform} host: this engine runs the image under QEMU user emulation, where "
            "importing torch hangs or crashes")


def passed(name: str, ok: bool, detail: str) -> Check:
    return Check(name, PASS if ok else FAIL, detail)


def tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])
