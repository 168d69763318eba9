"""Every bad input stops `train` (and `--dry-run`) before any weights load: exit 2, one line, no traceback."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ENV, merged
from vlmgrpo.commands.cli import main


def run_train(tiny, output, *extra, dry_run=False):
    args = merged(["train", "--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
                   "--output", str(output), "--num-generations", "2", "--batch-size", "2", "--max-steps", "1"], extra)
    return CliRunner().invoke(main, args + (["--dry-run"] if dry_run else []))


def earlier_run(path: Path) -> Path:
    (path / "checkpoint-1").mkdir(parents=True)
    return path


BAD = [
    (["--model", "/nonexistent/model"], "key 'model_name_or_path': /nonexistent/model does not exist (no such "
                                        "directory); give the directory of a saved model"),
    (["--num-generations", "0"], "command line: key 'num_generations': must be >= 2 (GRPO compares at least 2"),
    (["--batch-size", "0"], "command line: key 'per_device_train_batch_size': must be >= 1"),
    (["--max-completion-length", "0"], "command line: key 'max_completion_length': must be >= 1"),
    (["--set", "learning_rate=-1e-6"], "command line: key 'learning_rate': must be > 0 (a step size), got -1e-06"),
    (["--set", "reward_funcs=[iou, formatt]"], "unknown reward 'formatt' (did you mean format?)"),
    (["--set", "question_template=Where is it? Answer."], "key 'question_template' has no {question} or "
                                                          "{Question} placeholder"),
    (["--set", "report_to=mlflow"], "key 'report_to': mlflow is not installed in this environment; pip install mlflow"),
    (["--set", "report_to=tensorbored"], "key 'report_to': unknown reporter 'tensorbored'"),
    (["--set", "eval_strategy=steps"], "key 'eval_strategy': steps needs rows to evaluate on; set val_split_ratio"),
    (["--set", "val_split_ratio=1.0"], "key 'val_split_ratio': must be >= 0 and < 1"),
    (["--nnodes", "2", "--node-rank", "2"], "key 'node_rank': 2 is not below nnodes 2"),
    # issue 53, item 4: one rule for numbers, finite (a NaN passed every range check; .inf trained to NaN weights)
    (["--set", "learning_rate=.inf"], "key 'learning_rate': must be a finite number, got inf"),
    (["--set", "temperature=.nan"], "key 'temperature': must be a finite number, got nan"),
    (["--set", "top_p=.nan"], "key 'top_p': must be a finite number, got nan"),
    (["--set", "beta=.nan"], "key 'beta': must be a finite number, got nan"),
    (["--set", "val_split_ratio=.nan"], "key 'val_split_ratio': must be a finite number, got nan"),
    (["--set", "judge_timeout=.inf"], "key 'judge_timeout': must be a finite number, got inf"),
    (["--set", "reward_weights=[1.0, .nan]"], "key 'reward_weights': must be finite numbers, got [1.0, nan]"),
    # issue 53, item 9: a callable that is no reward passed, then an 80-line traceback at step 1
    (["--set", "reward_funcs=[iou, os:system]"], "reward 'os:system': os.system is not a reward function: TRL calls"),
    # issue 53, item 8: a seed numpy refuses, then a traceback
    (["--set", "seed=-1"], "key 'seed': must be >= 0 and <= 4294967295 (numpy's random generator takes seeds"),
    # issue 52, item 5: kernels fetched or patched in at the first step (a traceback there before)
    (["--set", "use_liger_kernel=true"], "key 'use_liger_kernel': TRL patches the model with the liger-kernel "
                                         "package, which is not installed here"),
    (["--set", "model_init_kwargs={use_kernels: true}"], "key 'model_init_kwargs': use_kernels: transformers "
                                                         "downloads these kernels from the Hugging Face Hub"),
]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "train"])
@pytest.mark.parametrize("extra,message", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_input_is_one_line_before_any_model_loads(tiny, tmp_path, extra, message, dry_run):
    result = run_train(tiny, tmp_path / "out", *extra, dry_run=dry_run)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("error: ")


@pytest.mark.parametrize("text, says", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply to be a DeepSpeed configuration"),  # issue 53, item 10
    ("[1, 2]", "a DeepSpeed configuration is a JSON object, not list"),
])
def test_a_deepspeed_json_that_is_no_configuration_is_one_line(tiny, tmp_path, text, says):
    (tmp_path / "ds.json").write_text(text)
    result = run_train(tiny, tmp_path / "out", "--deepspeed", str(tmp_path / "ds.json"), dry_run=True)
    assert result.exit_code == 2 and says in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_folder_of_someone_else_s_files_or_a_system_directory_is_no_output(tiny, tmp_path):
    """issue 53, item 5: an existing --output holding a user's README.md and config.json had both replaced, exit 0;
    `--output /` and `/etc` passed --dry-run as root."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("notes")
    (mine / "config.json").write_text("{}")
    result = run_train(tiny, mine, dry_run=True)
    assert result.exit_code == 2 and f"{mine} is not empty (README.md, config.json) and holds no earlier run" in \
        result.output and "--overwrite-output" in result.output
    assert run_train(tiny, mine, "--overwrite-output", dry_run=True).exit_code == 0
    assert (mine / "README.md").read_text() == "notes"
    for system, says in (("/", "/ is the file system's root"), ("/etc", "/etc is the system directory /etc"),
                         ("/usr/share/x", "/usr/share/x is inside the system directory /usr")):
        result = run_train(tiny, system, "--overwrite-output", dry_run=True)
        assert result.exit_code == 2 and says in result.output, result.output
    (tmp_path / "empty").mkdir()
    assert run_train(tiny, tmp_path / "empty", dry_run=True).exit_code == 0


def test_a_reward_file_named_in_a_config_is_the_one_beside_it(tiny, tmp_path, monkeypatch):
    """issue 53, item 9: a relative file.py:function in a YAML was imported from the current directory: a same-named
    file there was run."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.py").write_text("def score(prompts, completions, **kwargs):\n"
                                                 "    return [0.0 for _ in completions]\n")
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "mine.py").write_text("raise SystemExit('the wrong file was imported')\n")
    config = tmp_path / "configs" / "run.yaml"
    config.write_text("reward_funcs: [iou, mine.py:score]\n")
    monkeypatch.chdir(tmp_path / "cwd")
    result = run_train(tiny, tmp_path / "out", "--config", str(config), "--print-config")
    assert result.exit_code == 0, result.output
    assert f"reward_funcs: [iou, '{tmp_path / 'configs' / 'mine.py'}:score']" in result.output
    result = run_train(tiny, tmp_path / "out", "--config", str(config), dry_run=True)  # imports the rewards
    assert result.exit_code == 0 and "the wrong file" not in result.output, result.output


def test_output_and_model_paths(tiny, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = run_train(tiny, a_file)
    assert result.exit_code == 2 and f"key 'output_dir': {a_file} exists and is not a directory" in result.output
    result = run_train(tiny, a_file / "out")
    assert result.exit_code == 2 and f"{a_file} is not a directory, so {a_file / 'out'} cannot be created" in \
        result.output
    result = run_train(tiny, tmp_path / "out", "--model", str(tmp_path))
    assert result.exit_code == 2 and f"{tmp_path} has no config.json, so it is not a saved transformers model" in \
        result.output


def test_an_earlier_run_needs_resume_or_overwrite(tiny, tmp_path):
    output = earlier_run(tmp_path / "out")
    (output / "metrics.jsonl").write_text('{"step": 1}\n')
    result = run_train(tiny, output, dry_run=True)
    assert result.exit_code == 2
    assert (f"{output} already holds an earlier run (checkpoint-1, metrics.jsonl); continue it with --resume auto, "
            "start over with --overwrite-output") in result.output
    for flag in (["--resume", "auto"], ["--overwrite-output"]):
        assert run_train(tiny, output, *flag, dry_run=True).exit_code == 0
    assert (output / "checkpoint-1").is_dir()  # a dry run removes nothing


@pytest.mark.parametrize("model,message", [
    ("{tmp}/missing", "key 'model_name_or_path': {tmp}/missing does not exist"),
    ("nosuchorg/nosuchmodel", "key 'model_name_or_path': nosuchorg/nosuchmodel is neither a local directory nor a "
                              "model in the hub cache, and downloads are off (HF_HUB_OFFLINE=1)"),
])
@pytest.mark.slow
def test_a_real_process_prints_no_traceback(tiny, tmp_path, model, message):
    result = subprocess.run([sys.executable, "-m", "vlmgrpo", "train", "--model", model.format(tmp=tmp_path),
                             "--data", tiny["data"], "--output", str(tmp_path / "out")],
                            capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: command line: {message.format(tmp=tmp_path)}")


def as_another_user(command: list[str], uid: int = 4321) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *command],
                          capture_output=True, text=True, env=dict(ENV, HOME="/dev/null"), timeout=120)


@pytest.fixture
def shared_dir():
    """A directory every uid can enter (pytest's own tmp_path is root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="vlmgrpo-uid-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.slow
def test_files_another_uid_cannot_read_or_write(tiny, shared_dir):
    """A model saved by root (transformers writes model.safetensors 0600) and an output directory root owns, as the
    image's arbitrary training uid meets them."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the check as another uid")
    probe = as_another_user([sys.executable, "-c", "import vlmgrpo"])
    if probe.returncode:
        pytest.skip(f"uid 4321 cannot run this Python: {probe.stderr.strip()[-200:]}")
    model = shared_dir / "model"
    shutil.copytree(tiny["model"], model)  # keeps the 0600 of model.safetensors
    (model / "model.safetensors").chmod(0o600)
    owned = shared_dir / "out"
    owned.mkdir()
    os.chown(owned, 4321, 4321)
    # The model and the output are checked before the data, which this uid never gets to read.
    command = [sys.executable, "-m", "vlmgrpo", "train", "--model", str(model), "--data", tiny["data"]]
    result = as_another_user(command + ["--output", str(owned / "run")])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    weights = model / "model.safetensors"
    assert result.stderr.strip() == (f"error: command line: key 'model_name_or_path': {weights} is not readable by "
                                     f"uid 4321 (mode 0600, owner uid 0); make it readable: chmod a+r {weights}")
    # serve checks the model as train does, before its engine starts (which said "file not found" after loading)
    served = as_another_user([sys.executable, "-m", "vlmgrpo", "serve", "--model", str(model), "--port", "1"])
    assert served.returncode == 2 and "Traceback" not in served.stderr
    assert served.stderr.strip() == (f"error: --model: {weights} is not readable by uid 4321 (mode 0600, owner uid "
                                     f"0); make it readable: chmod a+r {weights}")
    weights.chmod(0o644)  # the fix the message names; the model passes now, and the output is checked next
    result = as_another_user(command + ["--output", str(shared_dir / "root-owned" / "run"), "--dry-run"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"key 'output_dir': cannot write to {shared_dir} (to create {shared_dir}/root-owned/run in it) as uid " \
           "4321 (mode 0755, owner uid 0, or a read-only mount)" in result.stderr


def test_an_output_at_or_inside_the_model_or_adapter_is_refused_before_anything_is_written(tiny, tmp_path):
    """`--output` equal to `--model` saved the trained (or merged) model over its base, in place, exit 0."""
    model = shutil.copytree(tiny["model"], tmp_path / "model")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    said = "saving there would overwrite the model it is read from; choose an --output outside it"
    for output, place in ((model, "is"), (model / "out", "is inside")):
        result = run_train(tiny, output, "--model", str(model), dry_run=True)
        assert result.exit_code == 2 and result.output.strip() == (
            f"error: command line: key 'output_dir': {output} {place} the model (model_name_or_path) {model}: {said}")
        sft = CliRunner().invoke(main, ["sft", "--model", str(model), "--data", tiny["sft"], "--output", str(output),
                                        "--dry-run"])
        assert sft.exit_code == 2 and f"key 'output_dir': {output} {place} the model" in sft.output
    for output, named in ((model, f"the base model {model}"), (adapter, f"the adapter (--adapter) {adapter}")):
        merged = CliRunner().invoke(main, ["merge", "--adapter", str(adapter), "--model", str(model),
                                           "--output", str(output)])
        assert merged.exit_code == 2 and merged.output.strip() == f"error: --output: {output} is {named}: {said}"
    assert sorted(p.name for p in model.iterdir()) == sorted(p.name for p in Path(tiny["model"]).iterdir())


def test_overwrite_output_removes_a_linked_checkpoint_s_link_and_keeps_what_it_points_to(tmp_path):
    from vlmgrpo.config.load import load_config
    from vlmgrpo.commands.grpo import GRPO
    from vlmgrpo.models.source import ModelSource
    from vlmgrpo.training.output import clear_earlier_run, plan_output

    elsewhere = tmp_path / "kept" / "checkpoint-7"
    elsewhere.mkdir(parents=True)
    (elsewhere / "trainer_state.json").write_text('{"global_step": 7}')
    output = earlier_run(tmp_path / "out")
    (output / "checkpoint-2").symlink_to(elsewhere, target_is_directory=True)
    config = load_config(None, {"output_dir": str(output), "overwrite_output": True}, GRPO)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    planned = plan_output(config, ModelSource(str(model), None, True))
    assert planned.clear == ("checkpoint-1", "checkpoint-2")  # the plan says what goes; clearing removes it
    assert clear_earlier_run(planned, config.where("overwrite_output")) == [
        "checkpoint-1", f"checkpoint-2 (a link; {elsewhere} kept)"]
    assert not os.path.lexists(output / "checkpoint-2") and (elsewhere / "trainer_state.json").is_file()
