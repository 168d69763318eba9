"""The report page, Markdown and HTML, of what build, test and push found per image.

The page is what a user reads instead of logs: a row per image of the matrix, its component
versions, and a cell per stage. A report that was not written (a stage that did not run)
leaves its cells "not run". The HTML comes from templates/report.html.j2.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path

import jinja2

from imagegen_contract import atomic

from imagegen.core import platforms, sizes
from imagegen.matrix.components import Components
from imagegen.reports.listing import Listed, version_columns
from imagegen.stages.results import (FAIL, KINDS, PASS, SKIP, BuildResult, Check, PushResult, TestResult,
                                     read_report)

LOG_TAIL_LINES = 6
NOT_RUN = "not run"
HTML_TEMPLATE = "report.html.j2"


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

    @property
    def reasons(self) -> list[Check]:
        """Checks whose detail the page prints, not only on hover: it is read on paper and in CI artifacts."""
        return [check for check in self.checks if check.status != PASS and check.detail]


def report_files(directory: Path | None, build: Path, test: Path, push: Path) -> dict[str, list[Path]]:
    """The given report files, or every KIND.json under a directory (one per CI job, say)."""
    if directory is None:
        return {"build": [build], "test": [test], "push": [push]}
    return {kind: sorted(directory.rglob(f"{kind}.json")) for kind in KINDS}


def read_reports(files: dict[str, list[Path]]) -> Reports:
    found = {kind: [path for path in files[kind] if path.exists()] for kind in KINDS}
    results = {kind: {name: result for path in found[kind] for name, result in read_report(path, kind).items()}
               for kind in KINDS}
    return Reports(builds=results["build"], tests=results["test"], pushes=results["push"],
                   sources={kind: paths for kind, paths in found.items() if paths})


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
        if result.sbom_components:
            details.append("SBOM: " + ", ".join(f"{count} {kind}" for kind, count in
                                                 (("Python", result.sbom_components.get("python", 0)),
                                                  ("OS", result.sbom_components.get("os", 0)))))
        return Cell("ok", "built", tuple(details), tooltip=layers or result.ref)
    if result.status == "failed":
        where = [f"layer {result.failed_layer}"] if result.failed_layer else []
        if result.failed_step:
            where.append(f"step {result.failed_step}" if result.failed_layer else result.failed_step)
        where += [f"{sizes.human(entry['bytes'])} {entry['path']}" for entry in result.largest_paths]
        where += [result.hint] if result.hint else []
        return Cell("fail", "failed", tuple(where), tooltip=layers,
                    log_tail=tuple(result.log_tail[-LOG_TAIL_LINES:]))
    return Cell("skip", result.status, tooltip=layers)


VERIFIED = {"gpu": "GPU-verified", "native": "tested natively", "emulated": "tested under emulation"}


def test_cell(result: TestResult | None, built: bool = False) -> Cell:
    """The checks, and how far the platform's image was verified: on a GPU, natively, under emulation,
    or built only."""
    if result is None:
        return Cell("none", "built only" if built else NOT_RUN)
    counts = {status: sum(check.status == status for check in result.checks) for status in (PASS, FAIL, SKIP)}
    summary = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    details = [VERIFIED.get(result.mode, result.mode)] + ([summary] if summary else [])
    if not result.gpu_runtime:
        details.append(f"no GPU: {result.gpu_reason}" if result.gpu_reason else "no GPU")
    status = "ok" if result.passed else "fail"
    return Cell(status, result.status, tuple(details), tooltip=f"{result.ref}, {result.duration_s:.0f} s",
                checks=tuple(result.checks))


def push_cell(result: PushResult | None, index: PushResult | None = None) -> Cell:
    """The platform image's push, and the multi-platform index of its image when there is one."""
    if result is None:
        return Cell("none", NOT_RUN)
    details = []
    if result.digest:
        details.append(_short_id(result.digest))
    if result.pushed_tags:
        details.append("tags: " + ", ".join(result.pushed_tags))
    if result.pushed_tags and result.platform != platforms.INDEX:
        details.append(f"{result.layers} layers")
    if result.already_published:
        details.append("already published: " + ", ".join(result.already_published))
    details += [f"refused {entry.get('tag', '?')}: {entry.get('reason', '')}" for entry in result.refused]
    if result.reason:
        details.append(result.reason)
    if result.sbom_digest:
        details.append(f"SBOM {_short_id(result.sbom_digest)} refers to it ({result.sbom_found_by})")
    if result.sbom_error:
        details.append(f"SBOM not attached: {result.sbom_error}")
    status = {"pushed": "ok", "not pushed": "skip"}.get(result.status, "fail")
    if index is not None:
        details.append(f"index {index.status}: " + (", ".join(index.pushed_tags + index.already_published)
                                                     or index.reason))
        status = status if index.status == "pushed" else {"not pushed": "skip"}.get(index.status, "fail")
    return Cell(status, result.status, tuple(details),
                tooltip=f"{result.registry}/{result.repository}@{result.digest}" if result.digest else "")


def _short_id(digest: str) -> str:
    algorithm, _, value = digest.partition(":")
    return f"{algorithm}:{value[:12]}" if value else digest[:12]


def relative_link(target: str, out: Path) -> str:
    """A file the reports name, relative to the page, so the page and reports/ can move together."""
    return Path(os.path.relpath(Path(target).resolve(), out.resolve())).as_posix()


@dataclass(frozen=True)
class Row:
    image: Listed
    stages: tuple[Cell, Cell, Cell]
    files: tuple[tuple[str, str], ...]  # (label, link relative to the page): the build log, the SBOM

    @property
    def label(self) -> str:
        """The image, and its platform where the image has several."""
        plan = self.image.plan
        return plan.name + (f" ({plan.platform})" if len(plan.platforms) > 1 else "")

    @property
    def title(self) -> str:
        """Its reference once locked; its state before."""
        return self.image.locked.ref() if self.image.locked else self.image.state

    @property
    def versions(self) -> list[str]:
        return [value(self.image) for _, value in version_columns(self.image.table)]


def rows(images: list[Listed], reports_read: Reports, out: Path) -> list[Row]:
    page_rows = []
    for image in images:
        key = image.plan.key
        build = reports_read.builds.get(key)
        files = {"log": build.log_file, "SBOM": build.sbom_file} if build else {}
        index = reports_read.pushes.get(platforms.key(image.plan.name, platforms.INDEX))
        tests = test_cell(reports_read.tests.get(key), built=bool(build and build.status == "built"))
        built = build_cell(build) if build or image.locked else Cell("none", NOT_RUN, (image.state,))
        page_rows.append(Row(image, (built, tests, push_cell(reports_read.pushes.get(key), index)),
                             tuple((label, relative_link(path, out)) for label, path in files.items() if path)))
    return page_rows


def unmatched_images(images: list[Listed], reports_read: Reports) -> list[str]:
    """Images the reports mention that the matrix no longer has (renamed or removed)."""
    known = {i.plan.key for i in images} | {platforms.key(i.plan.name, platforms.INDEX) for i in images}
    mentioned = [*reports_read.builds, *reports_read.tests, *reports_read.pushes]
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


def header(table: Components) -> list[str]:
    return ["Image", *(name for name, _ in version_columns(table)), *STAGES, "Files"]


# --- Markdown ---------------------------------------------------------------------------------------------------


MD_MARK = {"ok": "✅", "fail": "❌", "skip": "⚠️", "none": "➖"}


def markdown(title: str, page_rows: list[Row], notes: list[str], table: Components) -> str:
    columns = header(table)
    lines = [f"# {_md(title)}", "", *(f"- {_md(note)}" for note in notes), "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in page_rows:
        cells = [f"**{_md(row.label)}**", *(_md(value) for value in row.versions),
                 *(_md_cell(cell) for cell in row.stages),
                 " ".join(f"[{label}]({_md_link(link)})" for label, link in row.files) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _md_cell(cell: Cell) -> str:
    parts = [_md(f"{MD_MARK[cell.status]} {cell.headline}"), *(_md(detail) for detail in cell.details)]
    parts += [_md(f"{check.name}: {check.status}" + (f" ({check.detail})" if check.detail else ""))
              for check in cell.checks if check.status != PASS]
    parts += [f"<code>{_md(line)}</code>" for line in cell.log_tail if line.strip()]
    return "<br>".join(parts)


def _md(text: str) -> str:
    """Text safe in a Markdown table cell: HTML-escaped (renderers pass HTML through), pipes and newlines gone."""
    return html.escape(" ".join(str(text).split())).replace("|", "&#124;")


def _md_link(target: str) -> str:
    return target.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


# --- HTML and writing -------------------------------------------------------------------------------------------


def html_page(templates: Path, title: str, page_rows: list[Row], notes: list[str], table: Components) -> str:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), autoescape=True,
                                     undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return environment.get_template(HTML_TEMPLATE).render(
        title=title, header=header(table), rows=page_rows, notes=notes, stages=[s.lower() for s in STAGES],
        check_statuses=(PASS, FAIL, SKIP), fail=FAIL)


def page_notes(matrix_path: Path, reports_read: Reports, page_rows: list[Row], unmatched: list[str]) -> list[str]:
    read = "; ".join(f"{kind}: {', '.join(map(str, paths))}" for kind, paths in reports_read.sources.items()) \
        or "none"
    notes = [f"Matrix: {matrix_path}", f"Reports read: {read}", *stage_totals(page_rows)]
    if unmatched:
        notes.append("Reports also mention images not in the matrix: " + ", ".join(unmatched))
    return notes


def write_pages(out: Path, templates: Path, matrix_path: Path, repository: str, images: list[Listed],
                reports_read: Reports, table: Components) -> None:
    page_rows = rows(images, reports_read, out)
    notes = page_notes(matrix_path, reports_read, page_rows, unmatched_images(images, reports_read))
    title = f"imagegen report: {repository}"
    page = html_page(templates, title, page_rows, notes, table)  # a template error leaves both pages as they were
    atomic.write_text(out / "index.md", markdown(title, page_rows, notes, table))
    atomic.write_text(out / "index.html", page)
