"""A run resolves what it needs once (run/prepared.py): the checks before any weights load resolve the resume point,
the DeepSpeed config and the reward functions, and the run uses what they resolved instead of resolving again."""

import json
import sys
from collections import Counter

import pytest

from conftest import TESTS, in_process, sft_args, train_args

# The functions that resolve each piece, by the module that defines them.
RESOLVERS = {"vlmgrpo.run.checkpoint": ("resolve_resume",), "vlmgrpo.run.launch": ("resolve_deepspeed",),
             "vlmgrpo.rewards": ("check_reward_names", "load_custom")}


def count_calls(monkeypatch) -> Counter:
    """Wrap each resolver wherever a vlmgrpo module holds it (`from ... import` binds it in the importer too)."""
    import vlmgrpo.run.grpo  # noqa: F401 - every module on the run's path, loaded before wrapping
    import vlmgrpo.run.preflight  # noqa: F401
    import vlmgrpo.run.runner  # noqa: F401
    import vlmgrpo.run.sft  # noqa: F401

    calls = Counter()
    for module_name, names in RESOLVERS.items():
        for name in names:
            original = getattr(sys.modules[module_name], name)

            def counted(*args, _name=name, _original=original, **kwargs):
                calls[_name] += 1
                return _original(*args, **kwargs)

            for module in [m for key, m in sys.modules.items() if key.startswith("vlmgrpo") and m is not None]:
                if getattr(module, name, None) is original:
                    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.slow
def test_a_train_run_resolves_each_piece_once(tiny, tmp_path, monkeypatch):
    calls = count_calls(monkeypatch)
    result = in_process(*train_args(tiny, tmp_path / "out", "--max-steps", "1", "--resume", "auto"), check=True)
    assert "no checkpoint under" in result.stderr
    # One custom reward (tests/shaping.py:token_sum) imported once; the rest are built-in names.
    assert calls == {"resolve_resume": 1, "resolve_deepspeed": 1, "check_reward_names": 1, "load_custom": 1}


@pytest.mark.slow
def test_an_sft_run_resolves_each_piece_once(tiny_text, tmp_path, monkeypatch):
    calls = count_calls(monkeypatch)
    in_process(*sft_args(tiny_text, tmp_path / "out", "--max-steps", "1", "--resume", "auto"), check=True)
    assert calls == {"resolve_resume": 1, "resolve_deepspeed": 1}


def test_score_imports_each_custom_reward_once(tiny, tmp_path, monkeypatch):
    calls = count_calls(monkeypatch)
    completions = tmp_path / "c.jsonl"
    first = json.loads(open(tiny["data"]).readline())
    completions.write_text(json.dumps({"id": first["id"], "completion": "<answer>[1, 2, 3, 4]</answer>"}) + "\n")
    result = in_process("score", "--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
                        "--set", f"reward_funcs=[iou, {TESTS / 'shaping.py'}:token_sum]", "--completions", completions,
                        check=True)
    assert set(json.loads(result.stdout)["rewards"]) == {"iou", "token_sum"}
    assert calls == {"check_reward_names": 1, "load_custom": 1}


def test_eval_loads_its_config_once(tiny, tmp_path, monkeypatch):
    """REC eval scores by IoU whatever rewards the config names: it says so on the config it loaded, not by loading
    the file a second time (which also logged its reward note twice)."""
    import vlmgrpo.config.load as load

    loads = []
    original = load.load_config
    monkeypatch.setattr(load, "load_config", lambda *args, **kwargs: loads.append(args) or original(*args, **kwargs))
    result = in_process("eval", "--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
                        "--set", "reward_funcs=[format]", "--output", tmp_path / "out", "--dry-run", check=True)
    assert len(loads) == 1 and "rows" in result.stdout
