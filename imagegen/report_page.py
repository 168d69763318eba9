"""`imagegen report`: one page, Markdown and HTML, of what build, test and push found per image.

The page is what a user reads instead of logs: a row per image of the matrix, its component
versions, and a cell per stage. A report that was not written (a stage that did not run)
leaves its cells "not run"; a report that cannot be read is a one-line error.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path

import click

from . import atomic
from .errors import MatrixError, UserError
from .listing import VERSION_COLUMNS
from .plan import ImageSpec
from .reports import FAIL, PASS, SKIP, BuildResult, Check, LayerResult, PushResult, TestResult
from .workspace import Workspace

LOG_TAIL_LINES = 6
NOT_RUN = "not run"


class ReportError(UserError):
    """A report file exists but is not a report imagegen wrote."""

    exit_code = 2


@dataclass(frozen=True)
class Reports:
    """The results of each stage by image name; an absent stage maps nothing."""

    builds: dict[str, BuildResult]
    tests: dict[str, TestResult]
    pushes: dict[str, PushResult]
    sources: dict[str, list[Path]]  # stage -> the report files read


@dataclass(frozen=True)
class Cell:
    """One stage of one image as the page shows it: a status class, a headline, details."""

    status: str  # "ok" | "fail" | "skip" | "none": the colour
    headline: str
    details: tuple[str, ...] = ()
    tooltip: str = ""
    checks: tuple[Check, ...] = ()
    log_tail: tuple[str, ...] = ()


# --- reading the reports ----------------------------------------------------------------------------------------


KINDS = ("build", "test", "push")


def report_files(directory: Path | None, build: Path, test: Path, push: Path) -> dict[str, list[Path]]:
    """The given report files, or every KIND.json under a directory (one per CI job, say)."""
    if directory is None:
        return {"build": [build], "test": [test], "push": [push]}
    return {kind: sorted(directory.rglob(f"{kind}.json")) for kind in KINDS}


def read_reports(files: dict[str, list[Path]]) -> Reports:
    parsers = {"build": _build_result, "test": _test_result, "push": _push_result}
    found = {kind: [path for path in files[kind] if path.exists()] for kind in KINDS}
    results = {kind: {name: result for path in found[kind] for name, result in
                      _read_report(path, kind, parsers[kind]).items()} for kind in KINDS}
    return Reports(builds=results["build"], tests=results["test"], pushes=results["push"],
                   sources={kind: paths for kind, paths in found.items() if paths})


def _read_report(path: Path, kind: str, parse) -> dict:
    try:
        payload = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise ReportError(f"{path}: cannot read the {kind} report: {error}") from None
    except json.JSONDecodeError as error:
        raise ReportError(f"{path}: the {kind} report is not JSON: {error}") from None
    if not isinstance(payload, dict) or payload.get("kind") != kind or not isinstance(payload.get("images"), list):
        raise ReportError(f"{path}: not a {kind} report; expected {{\"kind\": \"{kind}\", \"images\": [...]}}")
    results = {}
    for index, entry in enumerate(payload["images"]):
        try:
            result = parse(entry)
        except (TypeError, AttributeError) as error:
            raise ReportError(f"{path}: images[{index}] is not a {kind} result: {error}") from None
        results[result.image] = result
    return results


# The report dataclasses annotate their fields with these (as strings: postponed annotations).
SIMPLE_TYPES = {"str": (str,), "float": (int, float), "int": (int,), "bool": (bool,), "None": (type(None),),
                "dict[str, str]": (dict,)}


def _dataclass_from(cls, entry: dict, **nested):
    if not isinstance(entry, dict):
        raise TypeError(f"expected an object, got {type(entry).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise TypeError(f"unknown field {', '.join(unknown)}")
    for field_ in fields(cls):
        if field_.name in entry:
            _check_type(field_.name, str(field_.type), entry[field_.name])
    return cls(**{**entry, **{key: [make(item) for item in entry.get(key, [])] for key, make in nested.items()}})


def _check_type(name: str, annotation: str, value) -> None:
    """A wrong type would otherwise surface as a traceback while the page is formatted."""
    if annotation.startswith("list["):
        item_types = SIMPLE_TYPES.get(annotation[len("list["):-1], (object,))  # nested dataclasses: parsed later
        if not isinstance(value, list) or not all(isinstance(item, item_types) for item in value):
            raise TypeError(f"{name}: expected {annotation}, got {json.dumps(value)[:60]}")
        return
    accepted = tuple(kind for part in annotation.split("|") for kind in SIMPLE_TYPES.get(part.strip(), (object,)))
    if not isinstance(value, accepted):
        raise TypeError(f"{name}: expected {annotation}, got {json.dumps(value)[:60]}")


def _build_result(entry: dict) -> BuildResult:
    return _dataclass_from(BuildResult, entry, layers=lambda item: _dataclass_from(LayerResult, item))


def _test_result(entry: dict) -> TestResult:
    return _dataclass_from(TestResult, entry, checks=lambda item: _dataclass_from(Check, item))


def _push_result(entry: dict) -> PushResult:
    return _dataclass_from(PushResult, entry)


# --- what each cell says ---------------------------------------------------------------------------------------


STAGES = ("Build", "Tests", "Push")


def build_cell(result: BuildResult | None) -> Cell:
    if result is None:
        return Cell("none", NOT_RUN)
    layers = "; ".join(f"{layer.layer}: {layer.status} {layer.duration_s:.0f} s, "
                       f"{layer.cached_steps}/{layer.total_steps} steps cached" for layer in result.layers)
    if result.status == "built":
        details = [f"{result.duration_s:.0f} s"]
        if result.size_bytes is not None:
            details.append(f"{result.size_bytes / 1e9:.1f} GB")
        if result.image_id:
            details.append(_short_id(result.image_id))
        return Cell("ok", "built", tuple(details), tooltip=layers or result.ref)
    if result.status == "failed":
        where = [f"layer {result.failed_layer}"] if result.failed_layer else []
        where += [f"step {result.failed_step}"] if result.failed_step else []
        return Cell("fail", "failed", tuple(where), tooltip=layers,
                    log_tail=tuple(result.log_tail[-LOG_TAIL_LINES:]))
    return Cell("skip", result.status, tooltip=layers)


def test_cell(result: TestResult | None) -> Cell:
    if result is None:
        return Cell("none", NOT_RUN)
    counts = {status: sum(check.status == status for check in result.checks) for status in (PASS, FAIL, SKIP)}
    summary = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    details = [summary] if summary else []
    if not result.gpu_runtime:
        details.append(f"no GPU: {result.gpu_reason}" if result.gpu_reason else "no GPU")
    status = "ok" if result.passed else "fail"
    return Cell(status, result.status, tuple(details), tooltip=f"{result.ref}, {result.duration_s:.0f} s",
                checks=tuple(result.checks))


def push_cell(result: PushResult | None) -> Cell:
    if result is None:
        return Cell("none", NOT_RUN)
    details = []
    if result.digest:
        details.append(_short_id(result.digest))
    if result.pushed_tags:
        details.append("tags: " + ", ".join(result.pushed_tags))
    if result.already_published:
        details.append("already published: " + ", ".join(result.already_published))
    details += [f"refused {entry.get('tag', '?')}: {entry.get('reason', '')}" for entry in result.refused]
    if result.reason:
        details.append(result.reason)
    status = {"pushed": "ok", "not pushed": "skip"}.get(result.status, "fail")
    return Cell(status, result.status, tuple(details),
                tooltip=f"{result.registry}/{result.repository}@{result.digest}" if result.digest else "")


def _short_id(digest: str) -> str:
    algorithm, _, value = digest.partition(":")
    return f"{algorithm}:{value[:12]}" if value else digest[:12]


def log_link(result: BuildResult | None, out: Path) -> str | None:
    """The build log relative to the page, so the page and reports/ can move together."""
    if result is None or not result.log_file:
        return None
    return Path(os.path.relpath(Path(result.log_file).resolve(), out.resolve())).as_posix()


@dataclass(frozen=True)
class Row:
    spec: ImageSpec
    stages: tuple[Cell, Cell, Cell]
    log: str | None


def rows(specs: list[ImageSpec], reports: Reports, out: Path) -> list[Row]:
    return [Row(spec, (build_cell(reports.builds.get(spec.name)), test_cell(reports.tests.get(spec.name)),
                       push_cell(reports.pushes.get(spec.name))),
                log_link(reports.builds.get(spec.name), out))
            for spec in specs]


def unmatched_images(specs: list[ImageSpec], reports: Reports) -> list[str]:
    """Images the reports mention that the matrix no longer has (renamed or removed)."""
    known = {spec.name for spec in specs}
    mentioned = [*reports.builds, *reports.tests, *reports.pushes]
    return sorted({name for name in mentioned if name not in known})


def stage_totals(page_rows: list[Row]) -> list[str]:
    lines = []
    for index, stage in enumerate(STAGES):
        counts: dict[str, int] = {}
        for row in page_rows:
            headline = row.stages[index].headline
            counts[headline] = counts.get(headline, 0) + 1
        lines.append(f"{stage}: " + ", ".join(f"{count} {headline}" for headline, count in counts.items()))
    return lines


# --- Markdown ---------------------------------------------------------------------------------------------------


def markdown(title: str, page_rows: list[Row], notes: list[str]) -> str:
    header = ["Image", *(name for name, _ in VERSION_COLUMNS), *STAGES, "Log"]
    lines = [f"# {_md(title)}", "", *(f"- {_md(note)}" for note in notes), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in page_rows:
        cells = [f"**{_md(row.spec.name)}**", *(_md(value(row.spec)) for _, value in VERSION_COLUMNS),
                 *(_md_cell(cell) for cell in row.stages),
                 f"[log]({_md_link(row.log)})" if row.log else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


MD_MARK = {"ok": "✅", "fail": "❌", "skip": "⚠️", "none": "➖"}


def _md_cell(cell: Cell) -> str:
    parts = [f"{MD_MARK[cell.status]} {cell.headline}", *cell.details]
    parts += [f"{check.name}: {check.status}" + (f" ({check.detail})" if check.detail else "")
              for check in cell.checks if check.status != PASS]
    parts += [f"`{line}`" for line in cell.log_tail if line.strip()]
    return "<br>".join(_md(part) if not part.startswith("`") else _md_code(part) for part in parts)


def _md(text: str) -> str:
    """Text safe in a Markdown table cell: HTML-escaped (renderers pass HTML through), pipes and newlines gone."""
    return html.escape(" ".join(str(text).split())).replace("|", "&#124;")


def _md_code(text: str) -> str:
    return "<code>" + _md(text.strip("`")) + "</code>"


def _md_link(target: str) -> str:
    return target.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


# --- HTML -------------------------------------------------------------------------------------------------------


CSS = """
body { font: 13px/1.35 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; margin: 20px; color: #1f2328; }
h1 { font-size: 20px; margin: 0 0 6px; }
ul.notes { margin: 0 0 14px; padding-left: 18px; color: #444; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #d0d7de; padding: 4px 6px; vertical-align: top; text-align: left; }
th { background: #f6f8fa; position: sticky; top: 0; font-size: 12px; }
td.version { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 11px; }
td.image { font-weight: 600; white-space: nowrap; }
td.stage { overflow-wrap: anywhere; }
td.build, td.push { min-width: 150px; }
td.tests { min-width: 200px; }
td.ok { background: #dafbe1; } td.fail { background: #ffebe9; } td.skip { background: #fff8c5; }
td.none { background: #f6f8fa; color: #6e7781; }
.headline { font-weight: 600; }
.detail { display: block; font-size: 12px; color: #424a53; }
.checks { display: flex; flex-wrap: wrap; gap: 2px; margin-top: 3px; }
.check { font-size: 10px; padding: 0 4px; border-radius: 7px; border: 1px solid; white-space: nowrap; }
.check.pass { background: #aceebb; border-color: #4ac26b; }
.check.fail { background: #ffcecb; border-color: #fa4549; }
.check.skip { background: #fae17d; border-color: #d4a72c; }
.reason { display: block; font-size: 11px; color: #424a53; margin-top: 2px; }
pre.log { font-size: 10px; background: #fff; border: 1px solid #ffcecb; padding: 3px; margin: 4px 0 0;
          white-space: pre-wrap; overflow-wrap: anywhere; }
@media print {
  @page { size: landscape; margin: 8mm; }
  /* Fourteen columns do not fit a landscape page at full size. */
  body { margin: 0; zoom: 0.7; }
  th { position: static; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
"""


def html_page(title: str, page_rows: list[Row], notes: list[str]) -> str:
    header = ["Image", *(name for name, _ in VERSION_COLUMNS), *STAGES, "Log"]
    head = "".join(f"<th>{html.escape(name)}</th>" for name in header)
    body = "\n".join(_html_row(row) for row in page_rows)
    note_items = "".join(f"<li>{html.escape(note)}</li>" for note in notes)
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n<ul class=\"notes\">{note_items}</ul>\n"
            f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n</body>\n</html>\n")


def _html_row(row: Row) -> str:
    versions = "".join(f"<td class=\"version\">{html.escape(value(row.spec))}</td>" for _, value in VERSION_COLUMNS)
    stages = "".join(_html_stage(stage.lower(), cell) for stage, cell in zip(STAGES, row.stages))
    log = f"<a href=\"{html.escape(row.log)}\">log</a>" if row.log else "-"
    return (f"<tr><td class=\"image\" title=\"{html.escape(row.spec.ref())}\">{html.escape(row.spec.name)}</td>"
            f"{versions}{stages}<td>{log}</td></tr>")


def _html_stage(stage: str, cell: Cell) -> str:
    parts = [f"<span class=\"headline\">{html.escape(cell.headline)}</span>"]
    parts += [f"<span class=\"detail\">{html.escape(detail)}</span>" for detail in cell.details]
    if cell.checks:
        parts.append("<div class=\"checks\">" + "".join(_html_check(check) for check in cell.checks) + "</div>")
        # Reasons print too, not only hover: the page is read on paper and in CI artifacts.
        parts += [f"<span class=\"reason\">{html.escape(check.name)}: {html.escape(check.detail)}</span>"
                  for check in cell.checks if check.status != PASS and check.detail]
    if cell.log_tail:
        parts.append("<pre class=\"log\">" + html.escape("\n".join(cell.log_tail)) + "</pre>")
    title = f" title=\"{html.escape(cell.tooltip)}\"" if cell.tooltip else ""
    return f"<td class=\"stage {stage} {cell.status}\"{title}>{''.join(parts)}</td>"


def _html_check(check: Check) -> str:
    status = check.status if check.status in (PASS, FAIL, SKIP) else FAIL
    return (f"<span class=\"check {status}\" title=\"{html.escape(f'{check.status}: {check.detail}')}\">"
            f"{html.escape(check.name)}</span>")


# --- writing ----------------------------------------------------------------------------------------------------


def page_notes(matrix_path: Path, reports: Reports, page_rows: list[Row], unmatched: list[str]) -> list[str]:
    read = "; ".join(f"{kind}: {', '.join(map(str, paths))}" for kind, paths in reports.sources.items()) or "none"
    notes = [f"Matrix: {matrix_path}", f"Reports read: {read}", *stage_totals(page_rows)]
    if unmatched:
        notes.append("Reports also mention images not in the matrix: " + ", ".join(unmatched))
    return notes


def write_pages(out: Path, matrix_path: Path, repository: str, specs: list[ImageSpec], reports: Reports) -> None:
    page_rows = rows(specs, reports, out)
    notes = page_notes(matrix_path, reports, page_rows, unmatched_images(specs, reports))
    title = f"imagegen report: {repository}"
    atomic.write_text(out / "index.md", markdown(title, page_rows, notes))
    atomic.write_text(out / "index.html", html_page(title, page_rows, notes))


# --- the command ------------------------------------------------------------------------------------------------


@click.command("report")
@click.option("--build", "build_report", type=click.Path(path_type=Path), default=Path("reports/build.json"),
              show_default=True, help="Build report; missing: the build cells say \"not run\".")
@click.option("--test", "test_report", type=click.Path(path_type=Path), default=Path("reports/test.json"),
              show_default=True, help="Test report; missing: the test cells say \"not run\".")
@click.option("--push", "push_report", type=click.Path(path_type=Path), default=Path("reports/push.json"),
              show_default=True, help="Push report; missing: the push cells say \"not run\".")
@click.option("--from", "reports_dir", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="Read every build.json, test.json and push.json under this directory instead.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Directory for index.md and index.html.")
@click.option("--matrix", "matrix_path", type=click.Path(path_type=Path), default=Workspace.matrix,
              show_default=True, help="The compatibility matrix: a row per image.")
@click.option("--trainer", "trainer_dir", type=click.Path(path_type=Path), default=Workspace.trainer,
              help="The trainer distribution (its version is part of every tag).")
def report_command(build_report, test_report, push_report, reports_dir, out, matrix_path, trainer_dir):
    """Write OUT/index.md and OUT/index.html: a row per image, its versions, build, tests and push.

    Reads whichever reports exist; a stage without a report shows "not run". --from DIR
    reads the reports of many jobs at once (a CI run's downloaded artifacts). Log links are
    relative to OUT, so keep the reports beside the page when moving it. Exits 2 when a
    report or the matrix cannot be read.
    """
    # Errors are handled here rather than with cli.py's decorator: cli.py imports this module
    # to register the command, and importing back from it would make import order matter.
    try:
        matrix, specs = Workspace(matrix=matrix_path, trainer=trainer_dir).load()
        reports = read_reports(report_files(reports_dir, build_report, test_report, push_report))
        write_pages(out, matrix_path, matrix.repository, specs, reports)
    except MatrixError as error:
        for problem in error.problems:
            click.echo(f"error: {problem}", err=True)
        raise SystemExit(error.exit_code) from None
    except UserError as error:
        click.echo(f"error: {error}", err=True)
        raise SystemExit(error.exit_code) from None
    click.echo(f"{out / 'index.html'}: {len(specs)} images")
