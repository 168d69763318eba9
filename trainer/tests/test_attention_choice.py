"""choose_attention: flash_attention_2 where flash-attn imports and every GPU is sm80+, else sdpa, and one log line
that says which and why (the images differ: flash-attn compiled in, or none; the GPUs differ too)."""

import logging
import sys
import types

import pytest
import torch

from vlmgrpo.models import loading as model
from vlmgrpo.models.loading import choose_attention


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


def gpus(monkeypatch, *capabilities):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(capabilities))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(capabilities))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: capabilities[index])


def flash_attn(monkeypatch, importable: bool):
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


def test_flash_attention_2_where_it_imports_and_every_gpu_is_ampere_or_newer(monkeypatch, lines):
    gpus(monkeypatch, (9, 0), (8, 0))
    flash_attn(monkeypatch, True)
    assert choose_attention("auto") == "flash_attention_2"
    assert only_line(lines) == "attention: flash_attention_2 (flash_attn 2.8.3 imports and every GPU is sm80 or newer)"


def test_sdpa_when_flash_attn_does_not_import(monkeypatch, lines):
    gpus(monkeypatch, (9, 0))
    flash_attn(monkeypatch, False)
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == ("attention: sdpa (flash_attn does not import (ImportError: flash_attn_2_cuda.so: "
                                "undefined symbol: _ZN3c104cuda9SetDevice))")
    assert lines[0].levelno == logging.INFO


def test_sdpa_on_a_volta_gpu_even_with_flash_attn(monkeypatch, lines):
    gpus(monkeypatch, (9, 0), (7, 0))
    flash_attn(monkeypatch, True)
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == "attention: sdpa (GPU 1 is sm70 and flash-attn 2 needs sm80 or newer)"


def test_sdpa_without_a_gpu(monkeypatch, lines):
    gpus(monkeypatch)
    assert choose_attention("auto") == "sdpa"
    assert only_line(lines) == "attention: sdpa (no GPU visible)"


def test_a_requested_flash_attention_2_that_cannot_run_is_a_warning(monkeypatch, lines):
    gpus(monkeypatch, (7, 5))
    flash_attn(monkeypatch, True)
    assert choose_attention("flash_attention_2") == "sdpa"
    assert only_line(lines) == ("attention: sdpa, not the requested flash_attention_2 (GPU 0 is sm75 and flash-attn 2 "
                                "needs sm80 or newer)")
    assert lines[0].levelno == logging.WARNING


@pytest.mark.parametrize("requested", ["sdpa", "eager"])
def test_an_explicit_choice_is_kept_and_said(monkeypatch, lines, requested):
    gpus(monkeypatch, (9, 0))
    flash_attn(monkeypatch, True)
    assert choose_attention(requested) == requested
    assert only_line(lines) == f"attention: {requested} (requested)"
    assert model.flash_attn_usable()
