import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent

# The image runs as an arbitrary uid with a HOME it cannot write: the trainer must not need one.
# /dev/null is not a directory, so nothing can be created under it even as root.
ENV = dict(os.environ, HOME="/dev/null", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
           HF_HOME=os.environ.get("HF_HOME", "/tmp/vlmgrpo-test-hf-home"), PYTHONUNBUFFERED="1")


def vlmgrpo(*args, timeout=300, check=False, env=None, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "vlmgrpo", *map(str, args)], capture_output=True, text=True,
                            timeout=timeout, env=env or ENV, **kwargs)
    if check and result.returncode:
        raise AssertionError(f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}")
    return result


def in_process(*args, check=False, env=None) -> subprocess.CompletedProcess:
    """The command run in this process through click's test runner, for tests whose point is its output rather than
    a fresh interpreter: torch and trl are imported once, not per test (a real process spends ~7 s importing them;
    the tests that must see a real process still start one)."""
    from click.testing import CliRunner

    from vlmgrpo.commands.cli import main

    changed = {key: value for key, value in (env or ENV).items() if os.environ.get(key) != value}
    result = CliRunner().invoke(main, [str(arg) for arg in args], env=changed)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    done = subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)
    if check and done.returncode:
        raise AssertionError(f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}")
    return done


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """The tiny model and dataset, made once per session."""
    from vlmgrpo.models.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("tiny"), rows=8)


@pytest.fixture(scope="session")
def tiny_text(tmp_path_factory):
    """A tiny text-only Qwen2 causal LM with chat rows in the three SFT formats, made once per session."""
    from vlmgrpo.models.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("tiny-text"), rows=8, family="qwen2")


def merged(defaults, extra) -> list:
    """A test's defaults with what `extra` gives instead: the command line refuses a key given twice (an option, a
    --set key), so an option or --set key of `extra` replaces the defaults' (every one of a repeated option)."""
    def items(args):
        found, args, i = [], [str(arg) for arg in args], 0
        while i < len(args):
            takes = args[i].startswith("--") and "=" not in args[i] and i + 1 < len(args) \
                and not args[i + 1].startswith("--")
            found.append((args[i], args[i + 1] if takes else None))
            i += 2 if takes else 1
        return found

    def key(item):
        option, value = item
        return f"--set {value.split('=')[0].strip()}" if option == "--set" and value else option

    given = {key(item) for item in items(extra)}
    kept = [item for item in items(defaults) if key(item) not in given or not item[0].startswith("--")]
    return [word for item in kept + items(extra) for word in item if word is not None]


def train_args(tiny, output, *extra):
    """A small, fast run; the dense shaping reward (tests only) makes gradients non-zero for a random policy."""
    return merged(["train", "--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
                   "--output", output, "--num-generations", "4", "--batch-size", "4", "--max-completion-length", "12",
                   "--set", "gradient_accumulation_steps=1", "--set", "learning_rate=0.001",
                   "--set", f"reward_funcs=[iou, format, {TESTS / 'shaping.py'}:token_sum]"], extra)


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def sft_args(tiny_text, output, *extra):
    """A small, fast SFT run on all three formats of the tiny text model's rows."""
    return merged(["sft", "--model", tiny_text["model"], "--data", tiny_text["messages"], "--data",
                   tiny_text["sharegpt"], "--data", tiny_text["alpaca"], "--output", output, "--batch-size", "4",
                   "--set", "logging_steps=1", "--set", "learning_rate=0.01"], extra)


LORA = ["--set", "use_lora=true", "--set", "lora_r=4", "--set", "lora_alpha=8"]


def fake_distribution(site, name, version, metadata_lines=(), direct_url=None):
    """An installed distribution's metadata (a .dist-info directory) under site, for the inventory to find."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("\n".join(["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}",
                                              *metadata_lines]) + "\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
