"""Section 7: the tiny examples of examples/README.md on this CPU, from data to a served model, each command timed
from process start."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .common import REPO, VLMGRPO, goal, run, table

# What examples/README.md and the user guide promise for these runs on a CPU.
REC_GOAL_S = 60
SFT_THEN_GRPO_GOAL_S = 120
PATH_GOAL_S = 300  # the whole path, make-tiny to an answered query


def serve_and_query(model: Path, work: Path) -> tuple[float, float]:
    """(seconds from `vlmgrpo serve` to ready, seconds for one chat completion with an image, the official client)."""
    from vlmgrpo.processes import free_port, wait_for_health

    port = free_port()
    started = time.monotonic()
    with open(work / "serve.log", "w") as log:
        server = subprocess.Popen([*VLMGRPO, "serve", "--model", str(model), "--served-model-name", "rec-tiny",
                                   "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_for_health(f"http://127.0.0.1:{port}/health", 600, lambda: server.poll() is None):
            raise RuntimeError(f"vlmgrpo serve did not get ready ({server.poll()}); log {work / 'serve.log'}")
        ready = time.monotonic() - started
        started = time.monotonic()
        query(port, work / "tiny" / "data" / "images" / "0000.png")
        return ready, time.monotonic() - started
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def query(port: int, image: Path) -> str:
    import base64

    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    url = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()
    answer = client.chat.completions.create(model="rec-tiny", max_tokens=32, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "Please provide the bounding box coordinate of the region this sentence describes: "
                                 "the yellow rectangle."}]}])
    return answer.choices[0].message.content


def section(work: Path) -> str:
    for name in ("rec_tiny.yaml", "sft_tiny.yaml"):
        shutil.copy(REPO / "examples" / name, work)
    rec = ["--config", work / "rec_tiny.yaml"]
    commands = [
        ("make-tiny", ["make-tiny", "--out", work / "tiny"]),
        ("train rec_tiny.yaml", ["train", *rec, "--output", work / "grpo"]),
        ("eval before (base model)", ["eval", *rec, "--output", work / "eval-before"]),
        ("sft sft_tiny.yaml", ["sft", "--config", work / "sft_tiny.yaml", "--output", work / "sft"]),
        ("train rec_tiny.yaml --model SFT/merged", ["train", *rec, "--model", work / "sft" / "merged", "--output",
                                                    work / "grpo-after-sft"]),
        ("eval after (SFT then GRPO)", ["eval", *rec, "--model", work / "grpo-after-sft", "--output",
                                        work / "eval-after"]),
    ]
    seconds = {label: run([*VLMGRPO, *map(str, argv)], log=work / f"{argv[0]}-{index}.log")
               for index, (label, argv) in enumerate(commands)}
    seconds["serve until ready"], seconds["one query (openai client)"] = serve_and_query(work / "grpo-after-sft", work)
    accuracy = {name: json.loads((work / name / "eval.json").read_text())["accuracy"]
                for name in ("eval-before", "eval-after")}
    rec_s = seconds["make-tiny"] + seconds["train rec_tiny.yaml"]
    two_stage_s = sum(seconds[label] for label in ("make-tiny", "sft sft_tiny.yaml",
                                                    "train rec_tiny.yaml --model SFT/merged"))
    path_s = sum(value for label, value in seconds.items() if label != "train rec_tiny.yaml")
    return "\n".join([
        "## 7. The tiny examples on a CPU: from data to a served model",
        "",
        "Each `vlmgrpo` command of examples/README.md run once, in this order, timed from process start to exit "
        "(Python start-up, imports and model loading included): 8 GRPO steps of `rec_tiny.yaml`; REC accuracy of "
        "the base model on its 16 rows; 8 LoRA SFT steps of `sft_tiny.yaml` with evaluations at steps 4 and 8 and "
        "the merge; 8 GRPO steps from the merged model; REC accuracy of the result; `serve` of the result until "
        "its health answers, and one chat completion with an image through the official `openai` client.",
        "",
        table(("command", "wall s"), [(label, f"{value:.1f}") for label, value in seconds.items()]),
        "",
        f"- `rec_tiny.yaml` (make-tiny, train): **{rec_s:.1f} s**; goal under {REC_GOAL_S} s: "
        f"{goal(rec_s < REC_GOAL_S)}.",
        f"- SFT then GRPO (make-tiny, sft, train from the merge): **{two_stage_s:.1f} s**; goal under "
        f"{SFT_THEN_GRPO_GOAL_S} s: {goal(two_stage_s < SFT_THEN_GRPO_GOAL_S)}.",
        f"- The whole path (make-tiny, eval, sft, train, eval, serve, query): **{path_s:.1f} s**; goal under "
        f"{PATH_GOAL_S} s: {goal(path_s < PATH_GOAL_S)}.",
        f"- REC accuracy before / after: {accuracy['eval-before']:.2f} / {accuracy['eval-after']:.2f} (a tiny random "
        "model in 16 steps: the point is the path, not the number).",
    ])
