"""Reading datasets, shared by GRPO's REC rows (rec.py) and SFT's chat rows (chat.py): `data:` entries
(.jsonl / .json files, YAML mixtures, mappings), sampling, image roots, image headers, and the loop that validates
every row up front with the row validator of the command (load_data's `validate`) and gathers every problem as
`file:line: problem`. Images are opened only when a row is read for training.
"""

from __future__ import annotations

import math
import os
import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from vlmgrpo.access import unreadable
from vlmgrpo.boxes import ABSOLUTE, NORM1000
from vlmgrpo.config.load import JOIN
from vlmgrpo.config.yamlfile import YamlFileError, read_yaml
from vlmgrpo.errors import DataError
from vlmgrpo.records import read_records

PLACEHOLDER = "<image>"
_SAMPLING = re.compile(r"^(?:all|(first|end|random):(\d+)(%?))$")  # all: VLM-R1's "no sampling"
DATA_SUFFIXES = (".jsonl", ".json")
MIXTURE_SUFFIXES = (".yaml", ".yml")


@dataclass
class DatasetSpec:
    path: str
    image_root: Optional[str] = None
    sampling: Optional[str] = None  # first:N, end:N, random:N, or N% instead of N
    box_space: str = ABSOLUTE
    declared_in: str = "config"
    reward_method: Optional[str] = None  # the accuracy method of rows that name none (rewards/accuracy.py)


@dataclass
class FileReport:
    path: str
    rows_read: int = 0
    rows_used: int = 0
    images: int = 0
    errors: int = 0


@dataclass
class LoadedData:
    samples: list[Any]  # the training rows: rec_data.Sample or chat_data.ChatSample
    reports: list[FileReport] = field(default_factory=list)
    validation: list[Any] = field(default_factory=list)  # held out by val_split_ratio

    def summary(self) -> str:
        lines = [f"{r.path}: {r.rows_read} rows read, {r.rows_used} used, {r.images} images, {r.errors} errors"
                 for r in self.reports]
        images = sum(r.images for r in self.reports)
        rows = len(self.samples) + len(self.validation)
        lines.append(f"total: {rows} rows, {images} images, {sum(r.errors for r in self.reports)} errors")
        if self.validation:
            lines.append(f"split: {len(self.samples)} training rows, {len(self.validation)} validation rows")
        return "\n".join(lines)

    def split_validation(self, ratio: float, seed: int) -> None:
        """Hold out ceil(ratio x rows) rows, as datasets' train_test_split (which VLM-R1 uses) sizes its test set."""
        if not ratio:
            return
        count = math.ceil(ratio * len(self.samples))
        if count >= len(self.samples):
            raise DataError([f"val_split_ratio {ratio} holds out {count} of {len(self.samples)} rows, leaving none "
                             "to train on; lower it or add rows"])
        order = random.Random(seed).sample(range(len(self.samples)), len(self.samples))
        held_out = set(order[:count])
        self.validation = [s for i, s in enumerate(self.samples) if i in held_out]
        self.samples = [s for i, s in enumerate(self.samples) if i not in held_out]


# --- dataset specs ---------------------------------------------------------------------------------------------


def _spec_from_mapping(entry: dict, base: Path, declared_in: str, default_root, default_space,
                       default_method=None) -> DatasetSpec:
    path = entry.get("path", entry.get("json_path"))  # json_path: VLM-R1's data_config key
    if not isinstance(path, str):
        raise DataError([f"{declared_in}: dataset entry {entry!r} has no 'path'"])
    unknown = set(entry) - {"path", "json_path", "image_root", "image_folder", "sampling", "sampling_strategy",
                            "box_space", "reward_method"}
    if unknown:
        raise DataError([f"{declared_in}: dataset entry for {path}: unknown key(s) {', '.join(sorted(unknown))}; "
                         "allowed: path, image_root, sampling, box_space, reward_method"])
    root = entry.get("image_root", entry.get("image_folder", default_root))
    return DatasetSpec(
        path=str(base / path) if not os.path.isabs(path) else path,
        image_root=str(base / root) if root and not os.path.isabs(root) else root,
        sampling=entry.get("sampling", entry.get("sampling_strategy")),
        box_space=entry.get("box_space", default_space),
        declared_in=declared_in,
        reward_method=entry.get("reward_method", default_method),
    )


def _mixture_specs(path: str, default_root, default_space, default_method) -> list[DatasetSpec]:
    try:
        content = read_yaml(path, "mixture file") or {}
    except YamlFileError as exc:
        raise DataError([str(exc)]) from None
    entries = content.get("datasets") if isinstance(content, dict) else None
    if not isinstance(entries, list):
        raise DataError([f"{path}: a mixture file needs a 'datasets:' list of {{path, image_root, sampling}}"])
    base = Path(path).parent
    return [_spec_from_mapping(e if isinstance(e, dict) else {"path": e}, base, path, default_root, default_space,
                               default_method) for e in entries]


def _per_file(count: int, joined: Optional[str], key: str, vlm_r1_option: str) -> list[Optional[str]]:
    """One value per data file: the same for all, or VLM-R1's ':'-joined list, one per file in order."""
    if not joined or JOIN not in joined:
        return [joined] * count
    values = joined.split(JOIN)
    if len(values) != count:
        raise DataError([f"{key} lists {len(values)} ':'-joined values for {count} data file(s); give one per data "
                         f"file, in the same order (as VLM-R1's {vlm_r1_option})"])
    return values


def expand_specs(entries: list[Any], image_root: Optional[str], box_space: str,
                 reward_method: Optional[str] = None) -> list[DatasetSpec]:
    entries = [part for entry in entries
               for part in (str(entry).split(JOIN) if not isinstance(entry, dict) else [entry])]
    files = [i for i, e in enumerate(entries) if not isinstance(e, dict) and not e.endswith(MIXTURE_SUFFIXES)]
    roots = dict(zip(files, _per_file(len(files), image_root, "image_root", "--image_folders")))
    methods = dict(zip(files, _per_file(len(files), reward_method, "reward_method", "--reward_method")))
    # mixtures and mappings name their own root and method, or take the one given for all
    shared_root = None if image_root and JOIN in image_root else image_root
    shared_method = None if reward_method and JOIN in reward_method else reward_method
    specs = []
    for index, entry in enumerate(entries):
        if isinstance(entry, dict):
            specs.append(_spec_from_mapping(entry, Path("."), "config", shared_root, box_space, shared_method))
        elif entry.endswith(MIXTURE_SUFFIXES):
            specs.extend(_mixture_specs(entry, shared_root, box_space, shared_method))
        else:
            specs.append(DatasetSpec(path=entry, image_root=roots[index], box_space=box_space,
                                     reward_method=methods[index]))
    if not specs:
        raise DataError(["no data: set 'data' in the config or pass --data FILE"])
    return specs


def check_spec(spec: DatasetSpec) -> list[str]:
    problems = []
    if not spec.path.endswith(DATA_SUFFIXES):
        problems.append(f"{spec.declared_in}: {spec.path}: data files must be .jsonl or .json (mixtures .yaml)")
    elif not os.path.isfile(spec.path):
        problems.append(f"{spec.declared_in}: data file {spec.path} does not exist")
    elif unreadable(spec.path):
        problems.append(f"{spec.declared_in}: data file {unreadable(spec.path)}")
    if spec.sampling is not None and not _SAMPLING.match(str(spec.sampling)):
        problems.append(f"{spec.declared_in}: {spec.path}: sampling {spec.sampling!r} is not one of all, first:N, "
                        "end:N, random:N (N a count or a percentage like 10%)")
    if spec.box_space not in (ABSOLUTE, NORM1000):
        problems.append(f"{spec.declared_in}: {spec.path}: box_space {spec.box_space!r} is not one of: "
                        f"{ABSOLUTE}, {NORM1000}")
    return problems


# --- sampling ---------------------------------------------------------------------------------------------------------


def apply_sampling(rows: list, sampling: Optional[str], seed: int) -> list:
    kind, number, percent = _SAMPLING.match(sampling).groups() if sampling else (None, None, None)
    if kind is None:
        return rows
    count = math.ceil(len(rows) * int(number) / 100) if percent else int(number)  # VLM-R1 rounds N% up
    count = min(count, len(rows))
    if kind == "first":
        return rows[:count]
    if kind == "end":
        return rows[len(rows) - count:]
    return random.Random(seed).sample(rows, count)


# --- images and the validation loop ---------------------------------------------------------------------------


def row_image_paths(record: dict, image_root: Optional[str]) -> tuple[list[str], Optional[str]]:
    images = record.get("image", record.get("images"))
    if images is None:
        return [], None  # a text-only row
    if isinstance(images, str):
        images = [images]
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images) or not images:
        return [], f"'image' must be a path or a list of paths, got {images!r}"
    return [i if os.path.isabs(i) or not image_root else os.path.join(image_root, i) for i in images], None


def _image_size(path: str) -> tuple[Optional[tuple[int, int]], Optional[str]]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:  # reads the header only
            return image.size, None
    except FileNotFoundError:
        return None, f"image not found: {path}"
    except PermissionError:
        return None, f"image {unreadable(path)}"
    except (UnidentifiedImageError, OSError) as exc:
        return None, f"image unreadable: {path} ({exc.__class__.__name__})"
    except Image.DecompressionBombError as exc:  # over twice PIL's MAX_IMAGE_PIXELS, said by the header
        return None, f"image too large to decode: {path} ({exc})"


def _decode_errors() -> tuple:
    """What PIL raises for an image that does not decode whole: a truncated file, a decompression bomb."""
    from PIL import Image

    return (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def _undecodable(path: str, exc: BaseException) -> str:
    return f"image cannot be decoded: {path} ({exc.__class__.__name__}: {exc})"


def _decoded(path: str) -> Optional[str]:
    """Why the image cannot be decoded whole, None when it can."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
    except _decode_errors() as exc:
        return _undecodable(path, exc)
    return None


def load_rgb(path: str, where: Optional[str] = None):
    """An image as training reads it (RGB). One that no longer decodes (truncated, replaced since the run's checks
    read its header) is a DataError naming the row and the file, not a traceback at the step that drew it;
    `--dry-run` finds them all up front."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except _decode_errors() as exc:
        raise DataError([f"{where + ': ' if where else ''}{_undecodable(path, exc)}; fix or remove the row "
                         "(`--dry-run` decodes every image)"]) from None


def decode_images(data: "LoadedData") -> None:
    """What `--dry-run` adds to the checks every run makes: each image decoded whole, as training will decode it,
    so that a truncated file fails now, naming its row, and not at the step that first draws it."""
    first_row: dict[str, str] = {}
    for sample in (*data.samples, *data.validation):
        for path in sample.image_paths:
            first_row.setdefault(path, sample.location)
    with ThreadPoolExecutor(max_workers=8) as pool:
        problems = [f"{first_row[path]}: {problem}" for path, problem in zip(first_row, pool.map(_decoded, first_row))
                    if problem]
    if problems:
        raise DataError(problems)


def _read_sizes(paths: set[str]) -> dict[str, Any]:
    with ThreadPoolExecutor(max_workers=8) as pool:  # image headers: I/O bound on network storage
        return dict(zip(paths, pool.map(_image_size, paths)))


# validate(record, spec, line, image sizes) -> (sample, problems): validate_row for GRPO, validate_chat_row for SFT.
RowValidator = Callable[[Any, DatasetSpec, int, dict[str, Any]], tuple[Optional[Any], list[str]]]


def load_spec(spec: DatasetSpec, seed: int, validate: RowValidator) -> tuple[list[Any], FileReport, list[str]]:
    report = FileReport(spec.path)
    problems = check_spec(spec)
    if problems:
        report.errors = len(problems)
        return [], report, problems
    rows = []
    for line, record, error in read_records(spec.path):
        report.rows_read += 1
        if error:
            problems.append(f"{spec.path}:{line}: {error}")
        else:
            rows.append((line, record))
    rows = apply_sampling(rows, spec.sampling, seed)
    wanted = {p for _, r in rows if isinstance(r, dict) for p in row_image_paths(r, spec.image_root)[0]}
    sizes = _read_sizes(wanted)
    samples = []
    for line, record in rows:
        sample, row_problems = validate(record, spec, line, sizes)
        problems.extend(row_problems)
        if sample:
            samples.append(sample)
    problems.sort(key=lambda problem: int(problem[len(spec.path) + 1:].split(":", 1)[0]))  # by line
    report.rows_used, report.images = len(samples), sum(len(s.image_paths) for s in samples)
    report.errors = len(problems)
    return samples, report, problems


def load_data(entries: list[Any], image_root: Optional[str], box_space: str = ABSOLUTE, seed: int = 42, *,
              validate: RowValidator, eval_entries: Sequence[Any] = (), reward_method: Optional[str] = None
              ) -> LoadedData:
    """Read and validate every dataset (and the evaluation datasets); raise one DataError listing all problems.

    validate: rec_data.validate_row (GRPO rows whose answers hold a box; functools.partial it with
    require_box=False for answers of any text) or chat_data.validate_chat_row."""
    loaded = LoadedData(samples=[])
    problems: list[str] = []
    sources = [(entries, loaded.samples)] + ([(eval_entries, loaded.validation)] if eval_entries else [])
    for entries_of, rows in sources:
        for spec in expand_specs(entries_of, image_root, box_space, reward_method):
            samples, report, spec_problems = load_spec(spec, seed, validate)
            rows.extend(samples)
            loaded.reports.append(report)
            problems.extend(spec_problems)
    if problems:
        raise DataError(problems)
    if not loaded.samples:
        raise DataError(["the datasets hold no rows"])
    if eval_entries and not loaded.validation:
        raise DataError(["the evaluation datasets (eval_data) hold no rows"])
    return loaded


def content_parts(text: str) -> list[dict]:
    """Text with <image> placeholders as a chat turn's content parts: an image block at each placeholder."""
    content: list[dict] = []
    for index, part in enumerate(text.split(PLACEHOLDER)):
        if index:
            content.append({"type": "image"})
        if part.strip():
            content.append({"type": "text", "text": part})
    return content


