"""flash_attn_4.*: in an image with flash-attention 4, what can be shown without a GPU.

flash_attn_4.import        `import flash_attn.cute` works and the flash-attn-4 distribution provides it (flash-attn 2
                           installs the same top-level module)
flash_attn_4.cutlass       its CUTLASS DSL imports, with the libraries of the image's CUDA major (nvidia-cutlass-dsl
                           carries cu12 libraries always and cu13 ones through its `cu13` extra; without a driver it
                           takes the newest it has)
flash_attn_4.transformers  transformers finds the package as it decides flash-attention 4 is there, registers the
                           `flash_attention_4` attention, and the trainer's model classes accept flash attention

What needs a GPU (the kernels are compiled by the DSL when first called) is gpu.flash_attn_4's. Attached to images
with flash-attention 4 (NEEDS).
"""

from __future__ import annotations

import re

from vlmgrpo.image.checks import FAIL, PASS, Context, expected_version, result
from imagegen_contract.inventory import installed_version

NAMES = ("flash_attn_4.import", "flash_attn_4.cutlass", "flash_attn_4.transformers")
PHASE = "components"
NEEDS = ("flash_attn_4",)
# The classes `train`, `sft` and `eval` load for the model kinds the trainer knows (models/loading.py).
MODEL_CLASSES = ("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
                 "InternVLForConditionalGeneration", "Qwen2ForCausalLM")


def import_check() -> tuple[str, str]:
    from vlmgrpo.models.attention import CUTLASS_OFF_PATH

    try:
        import flash_attn.cute
    except ModuleNotFoundError as error:
        if error.name != "cutlass":
            raise
        return FAIL, f"flash_attn.cute does not import: {CUTLASS_OFF_PATH}"

    version = installed_version("flash-attn-4")
    if version is None:
        return FAIL, f"flash_attn.cute imports from {flash_attn.cute.__file__}, but no flash-attn-4 is installed"
    return PASS, f"flash-attn-4 {version}: flash_attn.cute imports"


def cutlass_flavor() -> str:
    """The CUDA major of the CUTLASS DSL's compiled module that `import cutlass` loaded ("13" for cu13)."""
    import cutlass
    from cutlass._mlir import _mlir_libs

    loaded = getattr(_mlir_libs, "_cutlass_ir", None)
    found = re.search(r"\.cu(\d+)\.", getattr(loaded, "__file__", "") or "")
    return found.group(1) if found else f"unknown (cutlass {getattr(cutlass, '__version__', '?')})"


def cutlass_check(torch_cuda: str | None) -> tuple[str, str]:
    flavor = cutlass_flavor()
    wanted = (torch_cuda or "").split(".")[0]
    detail = f"nvidia-cutlass-dsl {installed_version('nvidia-cutlass-dsl')} imports with its cu{flavor} libraries"
    if wanted and flavor != wanted:
        return FAIL, (f"{detail}; torch is built for CUDA {torch_cuda}: the image needs its cu{wanted} libraries "
                      "(matrix.yaml: the flash_attn_4 row's cuda_extras)")
    return PASS, detail


def transformers_check() -> tuple[str, str]:
    import transformers
    from transformers.modeling_flash_attention_utils import FLASH_ATTENTION_COMPATIBILITY_MATRIX
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if not FLASH_ATTENTION_COMPATIBILITY_MATRIX[4]["pkg_availability_check"]():
        return FAIL, f"transformers {transformers.__version__} does not find flash-attention 4's package"
    if "flash_attention_4" not in ALL_ATTENTION_FUNCTIONS:
        return FAIL, f"transformers {transformers.__version__} has no flash_attention_4 attention"
    refused = [name for name in MODEL_CLASSES if hasattr(transformers, name)
               and not getattr(getattr(transformers, name), "_supports_flash_attn", False)]
    if refused:
        return FAIL, f"transformers {transformers.__version__}: {', '.join(refused)} do not support flash attention"
    known = [name for name in MODEL_CLASSES if hasattr(transformers, name)]
    low = FLASH_ATTENTION_COMPATIBILITY_MATRIX[4].get("cuda_min_major_version")
    return PASS, (f"transformers {transformers.__version__} takes flash_attention_4 for {', '.join(known)} "
                  f"(on sm{low or 8}0 and newer); its kernels compile on first use on a GPU, not checked here")


def run(context: Context) -> list[dict[str, str]]:
    results = [result("flash_attn_4.import", *import_check())]
    results.append(result("flash_attn_4.cutlass", *cutlass_check(expected_version(context.expected, "torch_cuda"))))
    results.append(result("flash_attn_4.transformers", *transformers_check()))
    return results
