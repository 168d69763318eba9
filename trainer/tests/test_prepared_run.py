"""A run resolves what it needs once (training/plan.py): the checks before any weights load resolve the resume point,
the DeepSpeed config and the reward functions, and the run uses what they resolved instead of resolving again. The
process that trains finishes the TRL config and chooses the attention kernel once (training/started.py); the launcher,
`--dry-run` and `--print-config` do neither (TRL's __post_init__ sets up devices; the choice reads the GPUs)."""

import json
import os
import sys
from collections import Counter

import pytest

from conftest import ENV, TESTS, in_process, sft_args, train_args, vlmgrpo

# The functions that resolve each piece, by the module that defines them.
RESOLVERS = {"vlmgrpo.training.checkpoint": ("resolve_resume",), "vlmgrpo.launch.torchrun": ("resolve_deepspeed",),
             "vlmgrpo.rewards": ("check_reward_names", "load_custom"),
             "vlmgrpo.models.attention": ("choose_attention",),
             "vlmgrpo.models.loading": ("load_processing_class", "load_processor")}
# TRL's config finished: GRPOConfig's and SFTConfig's __post_init__ end in this one, which sets up the devices.
FINISH_TRL = "TrainingArguments.__post_init__"


def count_calls(monkeypatch) -> Counter:
    """Wrap each resolver wherever a vlmgrpo module holds it (`from ... import` binds it in the importer too), and
    the TRL config's finishing."""
    from transformers import TrainingArguments

    import vlmgrpo.models.attention  # noqa: F401 - every module on the run's path, loaded before wrapping
    import vlmgrpo.models.loading  # noqa: F401
    import vlmgrpo.commands.grpo  # noqa: F401
    import vlmgrpo.data.rows  # noqa: F401
    import vlmgrpo.training.output  # noqa: F401
    import vlmgrpo.training.runner  # noqa: F401
    import vlmgrpo.commands.sft  # noqa: F401
    import vlmgrpo.training.started  # noqa: F401

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
    finish = TrainingArguments.__post_init__

    def finishing(*args, **kwargs):
        calls[FINISH_TRL] += 1
        return finish(*args, **kwargs)

    monkeypatch.setattr(TrainingArguments, "__post_init__", finishing)
    return calls


@pytest.mark.slow
def test_a_train_run_resolves_each_piece_once(tiny, tmp_path, monkeypatch):
    calls = count_calls(monkeypatch)
    result = in_process(*train_args(tiny, tmp_path / "out", "--max-steps", "1", "--resume", "auto"), check=True)
    assert "no checkpoint under" in result.stderr
    # One custom reward (tests/shaping.py:token_sum) imported once; the rest are built-in names.
    assert calls == {"resolve_resume": 1, "resolve_deepspeed": 1, "check_reward_names": 1, "load_custom": 1,
                     "choose_attention": 1, FINISH_TRL: 1, "load_processor": 1}
    assert result.stderr.count("attention: sdpa") == 1


@pytest.mark.slow
def test_an_sft_run_resolves_each_piece_once(tiny_text, tmp_path, monkeypatch):
    calls = count_calls(monkeypatch)
    in_process(*sft_args(tiny_text, tmp_path / "out", "--max-steps", "1", "--resume", "auto"), check=True)
    # the tokenizer validation loaded to check its chat template is the one the trainer is given
    assert calls == {"resolve_resume": 1, "resolve_deepspeed": 1, "choose_attention": 1, FINISH_TRL: 1,
                     "load_processing_class": 1}


def test_score_imports_each_custom_reward_once(tiny, tmp_path, monkeypatch):
    calls = count_calls(monkeypatch)
    completions = tmp_path / "c.jsonl"
    first = json.loads(open(tiny["data"]).readline())
    completions.write_text(json.dumps({"id": first["id"], "completion": "<answer>[1, 2, 3, 4]</answer>"}) + "\n")
    result = in_process("score", "--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
                        "--set", f"reward_funcs=[iou, {TESTS / 'shaping.py'}:token_sum]", "--completions", completions,
                        check=True)
    assert set(json.loads(result.stdout)["rewards"]) == {"iou", "token_sum"}
    assert calls == {"check_reward_names": 1, "load_custom": 1, "load_processor": 1}  # the answer space's resize


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


@pytest.mark.parametrize("mode", ["--dry-run", "--print-config"])
def test_a_launcher_neither_finishes_trl_nor_chooses_attention(tiny, tmp_path, monkeypatch, mode):
    calls = count_calls(monkeypatch)
    result = in_process(*train_args(tiny, tmp_path / "out"), mode, check=True)
    assert not calls["choose_attention"] and not calls[FINISH_TRL]
    assert "attention:" not in result.stderr


# Counts, in every Python process of a run, the attention choices and TRL config finishings, and writes them to
# $COUNTS_DIR/<pid>.json at exit with the process's role: a torchrun worker has LOCAL_RANK set.
COUNTING_SITECUSTOMIZE = """
import atexit, json, os
from collections import Counter

import transformers
import vlmgrpo.models.attention as attention

calls = Counter()
finish, choose = transformers.TrainingArguments.__post_init__, attention.choose_attention


def finishing(*args, **kwargs):
    calls["%s"] += 1
    return finish(*args, **kwargs)


def choosing(*args, **kwargs):
    calls["choose_attention"] += 1
    return choose(*args, **kwargs)


transformers.TrainingArguments.__post_init__, attention.choose_attention = finishing, choosing


@atexit.register
def write():
    role = "worker" if "LOCAL_RANK" in os.environ else "launcher"
    with open(os.path.join(os.environ["COUNTS_DIR"], f"{os.getpid()}.json"), "w") as stream:
        json.dump({"role": role, "calls": calls}, stream)
""" % FINISH_TRL


@pytest.mark.slow
def test_each_torchrun_worker_finishes_trl_and_chooses_attention_once(tiny, tmp_path):
    """Two workers on the CPU: each (a process of its own) finishes its TRL config and chooses its kernel once; the
    launcher and torchrun do neither."""
    from test_train import free_port

    site, counts = tmp_path / "site", tmp_path / "counts"
    site.mkdir(), counts.mkdir()
    (site / "sitecustomize.py").write_text(COUNTING_SITECUSTOMIZE)
    env = dict(ENV, COUNTS_DIR=str(counts), PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    result = vlmgrpo(*train_args(tiny, tmp_path / "out", "--max-steps", "1", "--batch-size", "2",
                                 "--nproc-per-node", "2", "--master-port", free_port()), env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    processes = [json.loads(path.read_text()) for path in counts.iterdir()]
    workers = [p["calls"] for p in processes if p["role"] == "worker"]
    assert workers == [{"choose_attention": 1, FINISH_TRL: 1}] * 2
    others = [p["calls"] for p in processes if p["role"] == "launcher"]
    assert len(others) >= 2 and not any(others)  # vlmgrpo's launcher and torchrun, at least
    assert result.stderr.count("attention: sdpa") == 1  # each worker says it; rank 0's copy is shown (cli.py)


def test_an_attention_request_that_cannot_run_fails_in_the_worker(tiny, tmp_path, monkeypatch):
    """No GPU here: flash_attention_2 cannot run. `--dry-run` cannot know (it names it among what it does not check);
    the run stops with the one error line before any weights load."""
    calls = count_calls(monkeypatch)
    args = train_args(tiny, tmp_path / "out", "--max-steps", "1", "--set", "attn_implementation=flash_attention_2")
    checked = in_process(*args, "--dry-run", check=True)
    assert "attention flash_attention_2 on the GPUs" in checked.stdout
    result = in_process(*args)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "cannot run here" in line]
    assert len(errors) == 1 and errors[0].startswith("error: key 'attn_implementation': flash_attention_2 cannot run "
                                                     "here (")
    assert calls["choose_attention"] == 1 and calls[FINISH_TRL] == 1
    assert "trainable parameters" not in result.stderr
