"""Section 8: data at VLM-R1's scale through `vlmgrpo train --dry-run` and `vlmgrpo sft --dry-run`.

120k rows over 25k distinct image files (RefCOCO's ratio of rows to images), written as a JSON list (VLM-R1's REC
files are lists) and as JSONL; every row is read and validated and every image header opened, as before a real run.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import yaml

from .common import VLMGRPO, goal, run, table

ROWS = 120_000
IMAGES = 25_000
LIST_GOAL_RATIO = 2.0  # the JSON list within 2x the JSONL
LIST_GOAL_S = 30.0
# Runs argv, then writes the peak resident memory of its process tree (KiB, Linux) to argv[1].
PEAK_RSS = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[2:]).returncode; "
            "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
            "sys.exit(code)")


def make_images(tiny: Path, images: Path) -> None:
    """25k image files: copies of one tiny PNG under distinct names (the reader opens each header)."""
    png = (tiny / "data" / "images" / "0000.png").read_bytes()
    images.mkdir()
    for index in range(IMAGES):
        (images / f"{index:05d}.png").write_bytes(png)


def rec_row(index: int) -> dict:
    x, y = index % 40, (index // 40) % 40
    return {"id": index, "image": f"{index % IMAGES:05d}.png", "conversations": [
        {"from": "human", "value": f"<image>Please provide the bounding box coordinate of the region this sentence "
                                   f"describes: object number {index}."},
        {"from": "gpt", "value": json.dumps({"bbox_2d": [x, y, x + 30, y + 30]})}]}


def sft_row(index: int) -> dict:
    row = rec_row(index)
    answer = row["conversations"][1]["value"]
    row["conversations"][1]["value"] = f"<think>Object {index}.</think> <answer>{answer}</answer>"
    return row


def write_data(work: Path, name: str, make_row) -> dict[str, Path]:
    rows = [make_row(index) for index in range(ROWS)]
    paths = {"JSON list": work / f"{name}.json", "JSONL": work / f"{name}.jsonl"}
    paths["JSON list"].write_text(json.dumps(rows, indent=2))  # pretty-printed, as VLM-R1 ships its lists
    paths["JSONL"].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return paths


def dry_run(work: Path, command: str, model: Path, data: Path, images: Path) -> tuple[float, float]:
    """(wall seconds from process start, peak RSS in GB) of one `vlmgrpo COMMAND --dry-run`."""
    config = {"model_name_or_path": str(model), "data": [{"path": str(data), "image_root": str(images)}],
              "output_dir": str(work / "out"), "max_steps": 1}
    path = work / f"{command}-{data.suffix[1:]}.yaml"
    path.write_text(yaml.safe_dump(config))
    peak = work / f"{path.stem}.peak"
    seconds = run([sys.executable, "-c", PEAK_RSS, str(peak), *VLMGRPO, command, "--config", str(path), "--dry-run"],
                  log=work / f"{path.stem}.log")
    return seconds, int(peak.read_text()) * 1024 / 1e9


def section(work: Path) -> str:
    tiny = work / "tiny"
    run([*VLMGRPO, "make-tiny", "--out", str(tiny), "--rows", "4"])
    started = time.monotonic()
    images = work / "images"
    make_images(tiny, images)
    files = {command: write_data(work, name, make_row)
             for command, name, make_row in (("train", "rec", rec_row), ("sft", "sft", sft_row))}
    made_s = time.monotonic() - started
    rows, measured = [], {}
    for command, paths in files.items():
        for form, path in paths.items():
            seconds, peak_gb = dry_run(work, command, tiny / "model", path, images)
            measured[(command, form)] = seconds
            rows.append((f"`{command} --dry-run`", form, f"{path.stat().st_size / 1e6:.0f} MB", f"{seconds:.1f}",
                         f"{peak_gb:.2f} GB"))
    shutil.rmtree(images)
    lines = ["## 8. Data at scale", "",
             f"{ROWS // 1000}k rows over {IMAGES // 1000}k distinct image files (RefCOCO's rows per image), each "
             "row a REC question with its box (SFT: the answer in the GRPO format); the same rows as a pretty-printed "
             "JSON list and as JSONL. Each run is the console script from process start to exit: every row read "
             "and validated and every image header opened, the model's config and processor loaded, no weights "
             "(`--dry-run`). Peak memory: the largest resident set of the process tree.", "",
             table(("command", "file", "size", "wall s", "peak memory"), rows), ""]
    for command in ("train", "sft"):
        ratio = measured[(command, "JSON list")] / measured[(command, "JSONL")]
        met = ratio <= LIST_GOAL_RATIO and measured[(command, "JSON list")] < LIST_GOAL_S
        lines.append(f"- `{command}`: JSON list / JSONL = {ratio:.2f}; goal within {LIST_GOAL_RATIO:.0f}x and under "
                     f"{LIST_GOAL_S:.0f} s: {goal(met)}.")
    lines.append(f"- Making the images and data files (not part of the runs): {made_s:.0f} s in all.")
    return "\n".join(lines)


if __name__ == "__main__":  # one-off: python -m bench.data_scale DIR
    print(section(Path(sys.argv[1])))
