"""What `imagegen facts check` counts, and its one edge to the package index.

A fact is checked (the index said the same, or not: a disagreement), or not checked (its index did not answer);
a fact no index here can confirm names its source in the matrix, and one without a source says so. An index
that does not answer costs one attempt per origin; each wheel's metadata is read once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.requirements import Requirement

from imagegen.core.errors import Problem
from imagegen.locking import index
from imagegen.matrix.model import Matrix


@dataclass
class Report:
    disagreements: list[Problem] = field(default_factory=list)
    not_checked: dict[str, str] = field(default_factory=dict)  # what -> why, and where the matrix has it from
    unsourced: list[str] = field(default_factory=list)  # of those, the ones the matrix gives no source for
    newer: list[Problem] = field(default_factory=list)  # true facts with a newer release out: warned, not failed
    checked: int = 0

    @property
    def complete(self) -> bool:
        """Every fact was checked and agrees: what `facts check --strict` requires."""
        return not self.disagreements and not self.not_checked


class Checker:
    def __init__(self, matrix: Matrix):
        self.matrix = matrix
        self.report = Report()
        self.down: dict[str, str] = {}  # origin -> why, so an unreachable index costs one attempt
        self._metadata: dict[str, list[Requirement] | None] = {}  # by wheel URL
        self._projects: dict[tuple[str, str], list[index.IndexFile]] = {}  # by index and project

    def differs(self, path: tuple, matrix_says, index_says, evidence: str) -> None:
        self.report.checked += 1
        if matrix_says != index_says:
            self.report.disagreements.append(self.matrix.problem(
                path, f"the index says {show(index_says)} ({evidence}), the matrix says {show(matrix_says)}",
                "facts"))

    def fits(self, path: tuple, pinned: str, requirement: str, fits: bool, evidence: str) -> None:
        """An image's pin against what another of its packages requires of it, as the index says."""
        self.report.checked += 1
        if not fits:
            self.report.disagreements.append(self.matrix.problem(
                path, f"the index says {evidence} requires {requirement}, the image pins {pinned}", "facts"))

    def disagrees(self, path: tuple, message: str) -> None:
        """A fact checked and found wrong, in the check's own words (a base tag the registry does not have)."""
        self.report.checked += 1
        self.report.disagreements.append(self.matrix.problem(path, message, "facts"))

    def newer_exists(self, path: tuple, message: str) -> None:
        """A fact that is right and has a newer release beside it (a CUDA update): said, not a disagreement."""
        self.report.newer.append(self.matrix.problem(path, message, "newer-release"))

    def unchecked(self, what: str, why: str, source: str | None = None, at: tuple | None = None) -> None:
        """A fact the index did not confirm: where the matrix has it from, or that it does not say."""
        if at is None:
            self.report.not_checked[what] = why
        elif source:
            self.report.not_checked[what] = f"{why}; the matrix's source: {source}"
        else:
            place = self.matrix.located.problem(at, "", "facts")
            self.report.not_checked[what] = (f"{why}; and the matrix gives no source: add `source:` at "
                                             f"{place.file}:{place.line}: {place.key}")
            self.report.unsourced.append(what)

    def files(self, index_url: str, project: str, version: str | None, what: str, source: str | None = None,
              at: tuple | None = None) -> list[index.IndexFile] | None:
        """The files of a project's release (of every release, for version None), None where its index is down."""
        origin = index_url.split("/whl/")[0] if "/whl/" in index_url else index_url
        if origin in self.down:
            self.unchecked(what, self.down[origin], source, at)
            return None
        try:
            if (index_url, project) not in self._projects:
                self._projects[index_url, project] = index.project_files(index_url, project)
        except index.PackageIndexError as error:
            if "HTTP 404" not in str(error):
                self.down[origin] = str(error)
            self.unchecked(what, str(error), source, at)
            return None
        files = self._projects[index_url, project]
        return files if version is None else index.of_version(files, version)

    def metadata(self, file: index.IndexFile, what: str) -> list[Requirement] | None:
        if file.url not in self._metadata:
            try:
                self._metadata[file.url] = index.requirements(index.wheel_metadata(file))
            except index.PackageIndexError as error:
                self.report.not_checked[what] = str(error)
                self._metadata[file.url] = None
        return self._metadata[file.url]


def show(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(show(item) for item in value) + "]"
    return "nothing" if value is None else str(value)
