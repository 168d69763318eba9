"""choose_attention: flash_attention_4 where flash-attn-4 is installed and every GPU runs it, else flash_attention_2
where flash-attn imports and every GPU is sm80+, else sdpa, and one log line that says which and why (the images
differ: flash-attn-4, flash-attn compiled in, or none; the GPUs differ too). An explicit flash-attention choice that
cannot run is one ConfigError."""

import logging
import sys
from pathlib import Path
import types

import pytest
import torch

from vlmgrpo.errors import ConfigError
from vlmgrpo.models import attention
from vlmgrpo.models.attention import choose_attention, cutlass_on_path


@pytest.fixture
def lines():
    """The vlmgrpo logger's records at INFO and above, whatever the CLI did to its level and propagation."""
    logger = logging.getLogger("vlmgrpo")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def distributions(monkeypatch):
    """The flash-attention distributions this test says are installed (none unless it adds them)."""
    present: dict[str, str] = {}
    monkeypatch.setattr(attention, "installed", present.get)
    monkeypatch.setattr(attention, "cutlass_on_path", lambda: True)  # as where flash-attn-4 is installed with pip
    return present


def gpus(monkeypatch, *capabilities):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(capabilities))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(capabilities))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: capabilities[index])


def flash_attn(monkeypatch, distributions, importable: bool):
    distributions["flash-attn"] = "2.8.3"
    if importable:
        monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(__version__="2.8.3"))
    else:  # what a flash-attn built against another torch raises
        monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
        monkeypatch.setattr(sys, "meta_path", [BrokenBuild(), *sys.meta_path])


class BrokenBuild:
    """Finds flash_attn and fails to load it as a build against another torch does."""

    def find_spec(self, name, path=None, target=None):
        if name != "flash_attn":
            return None
        raise ImportError("flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDevice\nmore")


def only_line(records) -> str:
    assert len(records) == 1, [r.getMessage() for r in records]
    return records[0].getMessage()


@pytest.mark.parametrize("requested, capabilities, said", [
    ("auto", ((9, 0), (8, 0)), "flash_attention_2 (flash_attn 2.8.3 imports and every GPU is sm80 or newer)"),
    ("flash_attention_2", ((8, 6),), "flash_attention_2 (requested; flash_attn 2.8.3 imports and every GPU is sm80 or "
                                     "newer)"),
])
def test_flash_attention_2_where_it_imports_and_every_gpu_is_ampere_or_newer(monkeypatch, lines, distributions,
                                                                           requested, capabilities, said):
    gpus(monkeypatch, *capabilities)
    flash_attn(monkeypatch, distributions, True)
    assert choose_attention(requested) == "flash_attention_2"
    assert only_line(lines) == f"attention: {said}"


def test_sdpa_when_flash_attn_does_not_import(monkeypatch, lines, distributions):
    gpus(monkeypatch, (9, 0))
    flash_attn(monkeypatch, distributions, False)
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == ("attention: sdpa (flash_attn does not import (ImportError: flash_attn_2_cuda.so: "
                                "undefined symbol: _ZN3c104cuda9SetDevice))")
    assert lines[0].levelno == logging.INFO


def test_sdpa_on_a_volta_gpu_even_with_flash_attn(monkeypatch, lines, distributions):
    gpus(monkeypatch, (9, 0), (7, 0))
    flash_attn(monkeypatch, distributions, True)
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == "attention: sdpa (GPU 1 is sm70 and flash-attn 2 needs sm80 or newer)"


def test_sdpa_without_a_gpu(monkeypatch, lines, distributions):
    gpus(monkeypatch)
    distributions["flash-attn-4"] = "4.0.0b40"
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == "attention: sdpa (no GPU visible)"


def test_sdpa_without_any_flash_attention(monkeypatch, lines):
    gpus(monkeypatch, (9, 0))
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == "attention: sdpa (no flash-attention in this environment (flash-attn-4 or flash-attn))"


def test_flash_attention_4_first_where_installed_and_every_gpu_runs_it(monkeypatch, lines, distributions):
    gpus(monkeypatch, (9, 0), (10, 0))
    distributions["flash-attn-4"] = "4.0.0b40"
    flash_attn(monkeypatch, distributions, True)
    assert choose_attention("auto") == "flash_attention_4"
    low, _ = attention.fa4_majors()
    assert only_line(lines) == (f"attention: flash_attention_4 (flash-attn-4 4.0.0b40 is installed and every GPU is "
                                f"sm{low}0 to sm12x)")


def test_flash_attention_4_takes_transformers_lower_bound(monkeypatch, lines, distributions):
    """transformers dispatches flash-attention 4 from the compute capability its table says (5.24: 9.0), narrower
    than the kernels' own 8.x: an A100 gets flash-attention 2 where the image has it, else SDPA."""
    from transformers.modeling_flash_attention_utils import FLASH_ATTENTION_COMPATIBILITY_MATRIX

    monkeypatch.setitem(FLASH_ATTENTION_COMPATIBILITY_MATRIX[4], "cuda_min_major_version", 9)
    gpus(monkeypatch, (8, 0))
    distributions["flash-attn-4"] = "4.0.0b40"
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == "attention: sdpa (GPU 0 is sm80 and flash-attention 4 runs on sm90 to sm12x here)"
    lines.clear()
    flash_attn(monkeypatch, distributions, True)
    assert choose_attention("auto") == "flash_attention_2"


def test_flash_attention_4_where_transformers_allows_ampere(monkeypatch, lines, distributions):
    from transformers.modeling_flash_attention_utils import FLASH_ATTENTION_COMPATIBILITY_MATRIX

    monkeypatch.setitem(FLASH_ATTENTION_COMPATIBILITY_MATRIX[4], "cuda_min_major_version", None)
    gpus(monkeypatch, (8, 0))
    distributions["flash-attn-4"] = "4.0.0b40"
    assert choose_attention("auto") == "flash_attention_4"


def test_requested_flash_attention_2_runs_as_4_in_an_image_with_only_4(monkeypatch, lines, distributions):
    """VLM-R1's scripts pass --attn_implementation flash_attention_2; the torch 2.14+ images carry 4 alone."""
    gpus(monkeypatch, (9, 0))
    distributions["flash-attn-4"] = "4.0.0b40"
    assert choose_attention("flash_attention_2") == "flash_attention_4"
    assert only_line(lines).startswith("attention: flash_attention_4, not the requested flash_attention_2 "
                                       "(flash-attn 2 is not installed; flash-attn-4 4.0.0b40 is installed")
    assert lines[0].levelno == logging.WARNING


@pytest.mark.parametrize("requested, capabilities, installed, why", [
    ("flash_attention_4", (), {"flash-attn-4": "4.0.0b40"}, "no GPU visible"),
    ("flash_attention_4", ((9, 0),), {}, "flash-attn-4 is not installed"),
    ("flash_attention_4", ((7, 0),), {"flash-attn-4": "4.0.0b40"}, "GPU 0 is sm70 and flash-attention 4 runs on"),
    ("flash_attention_2", ((9, 0),), {}, "flash-attn 2 is not installed, and flash-attention 4 cannot stand in: "
                                         "flash-attn-4 is not installed"),
    ("flash_attention_2", ((7, 5),), {"flash-attn-4": "4.0.0b40"}, "flash-attn 2 is not installed, and "
                                                                      "flash-attention 4 cannot stand in: GPU 0 is sm75"),
])
def test_a_flash_attention_choice_that_cannot_run_is_one_error(monkeypatch, lines, distributions, requested,
                                                                capabilities, installed, why):
    gpus(monkeypatch, *capabilities)
    distributions.update(installed)
    with pytest.raises(ConfigError) as raised:
        choose_attention(requested)
    message = str(raised.value)
    assert message.startswith(f"key 'attn_implementation': {requested} cannot run here (")
    assert why in message and "\n" not in message
    assert message.endswith("use auto (the best kernel this image and GPU run, else sdpa) or sdpa")
    assert not lines


@pytest.mark.parametrize("requested", ["sdpa", "eager"])
def test_an_explicit_choice_is_kept_and_said(monkeypatch, lines, distributions, requested):
    gpus(monkeypatch, (9, 0))
    flash_attn(monkeypatch, distributions, True)
    assert choose_attention(requested) == requested
    assert only_line(lines) == f"attention: {requested} (requested)"
    assert attention.fa2_status(attention.gpu_capabilities())[0]


def test_flash_attn_4_namespace_is_not_taken_for_flash_attn_2(monkeypatch, lines, distributions):
    """flash-attn-4 installs flash_attn as a namespace package: `import flash_attn` succeeds without flash-attn 2."""
    gpus(monkeypatch, (8, 0))
    distributions["flash-attn-4"] = "4.0.0b40"
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    assert attention.fa2_status([(8, 0)]) == (False, "flash-attn 2 is not installed")


def test_flash_attention_4_whose_cutlass_dsl_is_off_the_path_is_not_chosen(monkeypatch, lines, distributions):
    """flash-attn-4 installed with `pip install --target` on PYTHONPATH: its CUTLASS DSL's .pth file is never read, so
    `cutlass` cannot be imported (a lent H200 showed it). auto takes SDPA and says why; asked for, it is one error."""
    gpus(monkeypatch, (9, 0))
    distributions["flash-attn-4"] = "4.0.0b40"
    monkeypatch.setattr(attention, "cutlass_on_path", lambda: False)
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == f"attention: sdpa (flash-attn-4 4.0.0b40 is installed but {attention.CUTLASS_OFF_PATH})"
    with pytest.raises(ConfigError, match="flash_attention_4 cannot run here .*module cutlass is not on the path"):
        choose_attention("flash_attention_4")


def test_cutlass_on_path_finds_without_importing(monkeypatch, tmp_path):
    """The real function (imported before the fixture stands in for it)."""
    monkeypatch.delitem(sys.modules, "cutlass", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    (tmp_path / "cutlass").mkdir()
    (tmp_path / "cutlass" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    assert cutlass_on_path() and "cutlass" not in sys.modules
    monkeypatch.setattr(sys, "path", [path for path in sys.path if path != str(tmp_path)])
    assert cutlass_on_path() == any((Path(p) / "cutlass").exists() for p in sys.path if p)
