"""expected.json: what an image was built to hold, which its checks compare with what they find inside.

One definition for its writer (imagegen.render.contexts puts it in the framework layer at PATH) and its readers on
the host (imagegen.stages.checks, through the inventory's "expected"). Inside the image the trainer reads it with the
standard library alone: its format numbers and shape are the contract's (imagegen_contract.expected, whose validator
tests/test_expected.py holds this model's output to). A change of its shape is a new FORMAT.
"""

from __future__ import annotations

import json
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagegen.matrix.plan import PlannedImage
from imagegen_contract.expected import FORMAT

PATH = "/etc/imagegen/expected.json"  # the image's IMAGEGEN_EXPECTED names it


class DriverEntry(BaseModel):
    """The driver the image needs (imagegen.matrix.drivers.DriverRequirement.as_dict, versioned on its own): the
    trainer refuses an older host driver at start (vlmgrpo.image.driver)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int
    cuda: str
    min_driver: str
    datacenter_branches: list[str]
    compat_package: bool


class Expected(BaseModel):
    """The file's content. Only the components the image names: one added to other images leaves this file, and so
    the image's inputs digest and tag, as they were."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Absent in the files of images rendered before it was written: those are format 1.
    format: Literal[FORMAT] = FORMAT
    versions: dict[str, Optional[str]]  # component key -> version, None where the image says `none`
    distributions: dict[str, str] = Field(default_factory=dict)  # component key -> the distribution it is read from
    # component key -> the distribution-name prefix the lock pins it by (torch's cuDNN and NCCL wheels)
    families: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)  # component key -> io.imagegen.<label> that says its version
    in_name: list[str] = Field(default_factory=list)  # the components its version tag names (tags.version_prefix)
    gpu_count: Optional[int] = None  # the GPUs the in-image check wants torch to see; None: any
    cuda_archs: list[str] = Field(default_factory=list)  # the compute capabilities it must run on
    driver: Optional[DriverEntry] = None  # None: no CUDA at all

    def text(self) -> str:
        """The file as rendered: keys sorted, so the same image renders the same bytes."""
        return json.dumps(self.model_dump(), indent=2, sort_keys=True) + "\n"


def of_plan(plan: PlannedImage, versions: dict) -> Expected:
    """What `vlmgrpo selftest` and `imagegen test` must find inside the planned image: each of its components'
    version, the distribution it is read from, and the distribution-name prefix the lock pins it by, so that the
    image's own checks follow the component table."""
    own = plan.components
    return Expected(versions=dict(versions), distributions=own.distributions, families=own.families,
                    labels={c.key: c.label for c in own}, in_name=list(own.in_name), cuda_archs=list(plan.gpu.archs),
                    driver=DriverEntry(**plan.gpu.driver.as_dict()) if plan.gpu.driver else None)


class UnreadableExpected(ValueError):
    """An image's expected.json is not of this FORMAT's shape."""


def of_inventory(found: dict) -> Expected | None:
    """The expected file an image's inventory read inside it ("expected"), None where it read none;
    UnreadableExpected where it is not of this shape."""
    content = found.get("expected")
    try:
        return Expected.model_validate(content) if content else None
    except ValidationError as error:
        where = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}" for e in error.errors())
        raise UnreadableExpected(f"the image's {PATH} is not imagegen's expected file, format {FORMAT} ({where}): "
                                 "was it built by another imagegen?") from None
