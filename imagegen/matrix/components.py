"""The components of an image: one table that tags, labels, expected.json, the in-image checks,
the listing and report columns, the matrix's image keys and the lock all read.

Adding a component is one row here (plus its value on ImageSpec): every consumer iterates this table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    key: str  # ImageSpec attribute; the key in expected.json and in `vlmgrpo info`'s versions
    title: str  # column heading in the listing and the report page
    label: str  # the image carries io.imagegen.<label>
    # The Python distribution installed for it, which the lock pins and `vlmgrpo selftest` reads back;
    # None for what torch reports at run time (its CUDA, cuDNN and NCCL) and for Python itself.
    distribution: str | None = None
    # Distributions of the lock whose version this component is, when it is not a distribution of
    # its own: torch's cuDNN and NCCL wheels (nvidia-cudnn-cu12, nvidia-nccl-cu13, ...).
    lock_family: str | None = None
    image_key: bool = False  # an image key of matrix.yaml (set per image or under defaults)
    required: bool = False  # an image must pin it; the others may be `none`
    in_resolution: bool = True  # resolved by the lock; flash-attn's wheels live outside any index
    column: bool = True  # shown as a column of `imagegen matrix` and the report


COMPONENTS: tuple[Component, ...] = (
    Component("python", "Python", "python", image_key=True, required=True),
    Component("torch", "torch", "torch", "torch", image_key=True, required=True),
    Component("torch_cuda", "torch CUDA", "torch.cuda", column=False),
    Component("cudnn", "cuDNN", "cudnn", lock_family="nvidia-cudnn-cu"),
    Component("nccl", "NCCL", "nccl", lock_family="nvidia-nccl-cu"),
    Component("torchvision", "torchvision", "torchvision", "torchvision", image_key=True, column=False),
    Component("flash_attn", "flash-attn", "flash-attn", "flash-attn", image_key=True, in_resolution=False),
    Component("deepspeed", "DeepSpeed", "deepspeed", "deepspeed", image_key=True),
    Component("transformers", "transformers", "transformers", "transformers", image_key=True, required=True),
    Component("trl", "TRL", "trl", "trl", image_key=True, required=True),
    Component("accelerate", "accelerate", "accelerate", "accelerate", image_key=True, required=True, column=False),
    Component("peft", "peft", "peft", "peft", image_key=True, required=True, column=False),
)

BY_KEY = {component.key: component for component in COMPONENTS}

# Image keys that are components installed from the index and pinned by the image: what the
# trainer's requirements must accept, what the lock must hold at exactly that version.
PINNED_DISTRIBUTIONS = tuple(c for c in COMPONENTS if c.distribution and c.image_key)
