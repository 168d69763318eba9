"""The package index edge: which files a release has and what its wheels' metadata says.

Reads the simple repository API as JSON (PEP 691) or HTML (PEP 503: the PyTorch index), and a
wheel's METADATA from the index (PEP 658) instead of downloading the wheel.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from html.parser import HTMLParser

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name,
                             parse_sdist_filename, parse_wheel_filename)
from packaging.version import InvalidVersion, Version

from imagegen.core.errors import UserError
from imagegen.matrix.schema import CXX_STANDARD

HTTP_TIMEOUT_S = 60
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


class PackageIndexError(UserError):
    """The index did not answer, or not with the file asked for; the message says which."""


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    requires_python: str | None
    has_metadata: bool  # the index serves FILE.metadata (PEP 658)

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    def version(self) -> Version | None:
        try:
            if self.is_wheel:
                return parse_wheel_filename(self.filename)[1]
            return parse_sdist_filename(self.filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            return None

    def tags(self) -> frozenset:
        return parse_wheel_filename(self.filename)[3] if self.is_wheel else frozenset()


def project_files(index_url: str, project: str) -> list[IndexFile]:
    """Every file of a project on a simple index; PackageIndexError when the index does not answer."""
    url = f"{index_url.rstrip('/')}/{canonicalize_name(project)}/"
    body, content_type = _get(url, accept=f"{SIMPLE_JSON}, text/html;q=0.1")
    if content_type.startswith(SIMPLE_JSON) or content_type.startswith("application/json"):
        return [_json_file(entry, url) for entry in json.loads(body)["files"]]
    parser = _Anchors(url)
    parser.feed(body.decode("utf-8", errors="replace"))
    return parser.files


def release_files(index_url: str, project: str, version: str) -> list[IndexFile]:
    return of_version(project_files(index_url, project), version)


def of_version(files: list[IndexFile], version: str) -> list[IndexFile]:
    wanted = Version(version)
    return [f for f in files if f.version() == wanted]


def wheel_metadata(file: IndexFile) -> dict[str, list[str]]:
    """A wheel's core metadata fields (Requires-Dist, Requires-Python, ...), each as a list of values.

    From FILE.metadata where the index serves it (PEP 658), else from the wheel's METADATA member,
    read with HTTP range requests: a few kilobytes of a wheel that may weigh gigabytes."""
    url = file.url.split("#")[0]
    try:
        body, _ = _get(url + ".metadata")
    except PackageIndexError:
        body = _metadata_from_zip(url)
    return _fields(body)


SDIST_LIMIT_BYTES = 256 * 2**20  # an sdist read whole for its PKG-INFO; DeepSpeed's is 2 MB


def sdist_metadata(file: IndexFile) -> dict[str, list[str]]:
    """An sdist's core metadata, from its top-level PKG-INFO (Metadata 2.2+ states Requires-Dist there): an index
    serves no metadata of its own for an sdist (DeepSpeed publishes nothing else)."""
    body, _ = _get(file.url.split("#")[0])
    if len(body) > SDIST_LIMIT_BYTES:
        raise PackageIndexError(f"{file.filename}: over {SDIST_LIMIT_BYTES >> 20} MiB, not read for its PKG-INFO")
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as sdist:
            member = next(m for m in sdist.getmembers() if m.isfile() and m.name.count("/") == 1
                          and m.name.endswith("/PKG-INFO"))
            text = sdist.extractfile(member).read()
    except (tarfile.TarError, StopIteration, OSError) as error:
        raise PackageIndexError(f"{file.filename}: no readable PKG-INFO ({error or 'not in the sdist'})") from None
    return _fields(text)


def _fields(body: bytes) -> dict[str, list[str]]:
    message = HeaderParser().parsestr(body.decode("utf-8", errors="replace"))
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return fields


def requirements(metadata: dict[str, list[str]]) -> list[Requirement]:
    found = []
    for text in metadata.get("Requires-Dist", []):
        try:
            found.append(Requirement(text))
        except InvalidRequirement:
            continue
    return found


# What a torch release's headers say of the C++ standard they need: `#error C++20 or later compatible compiler is
# required to use ATen.` (torch 2.14.1's ATen/ATen.h); a release whose header has no such line needs C++17
# (matrix.schema.CXX_STANDARD, the default of the facts).
CXX_STANDARD_HEADER = "torch/include/ATen/ATen.h"
CXX_STANDARD_LINE = re.compile(rb"#\s*error\s+C\+\+(\d+) or later")


def torch_cxx_standard(file: IndexFile) -> int:
    """The C++ standard a torch wheel's headers require, read from its ATen/ATen.h with HTTP range requests (a few
    kilobytes of a wheel of gigabytes)."""
    header = _member_from_zip(file.url.split("#")[0], lambda name: name == CXX_STANDARD_HEADER, CXX_STANDARD_HEADER)
    found = CXX_STANDARD_LINE.search(header)
    return int(found.group(1)) if found else CXX_STANDARD


# What a torch build was compiled for: the string torch.cuda.get_arch_list() splits (`_cuda_getArchFlags`), compiled
# into libtorch_python.so as one NUL-terminated string such as "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120" (about 10 MB
# of the wheel, read by one range request; in 2.8.0 and 2.9.1 it follows another string with no NUL between). A CPU
# build has none.
ARCH_LIBRARY = "torch/lib/libtorch_python.so"
ARCH_FLAGS = re.compile(rb"((?:sm|compute)_\d+[af]?(?: (?:sm|compute)_\d+[af]?)*)\x00")


def torch_arch_flags(file: IndexFile) -> list[str]:
    """The arch flags a torch wheel was compiled with, [] for a CPU build."""
    library = _member_from_zip(file.url.split("#")[0], lambda name: name == ARCH_LIBRARY, ARCH_LIBRARY)
    found = {flags.decode() for flags in ARCH_FLAGS.findall(library)}
    if len(found) > 1:
        raise PackageIndexError(f"{file.filename}: {ARCH_LIBRARY} holds {len(found)} arch lists: "
                                f"{'; '.join(sorted(found))}")
    return next(iter(found)).split() if found else []


def _metadata_from_zip(url: str) -> bytes:
    return _member_from_zip(url, lambda name: name.endswith(".dist-info/METADATA") and name.count("/") == 1,
                            "METADATA")


def _member_from_zip(url: str, wanted, what: str) -> bytes:
    """The first member of a remote zip (a wheel) that `wanted` accepts, read by range requests."""
    try:
        with zipfile.ZipFile(_RangeReader(url)) as wheel:
            return wheel.read(next(n for n in wheel.namelist() if wanted(n)))
    except (zipfile.BadZipFile, StopIteration) as error:
        raise PackageIndexError(f"{url}: no readable {what} ({error or 'not in the wheel'})") from None


class _RangeReader(io.RawIOBase):
    """A seekable, read-only file over HTTP range requests, enough for zipfile to read one member."""

    def __init__(self, url: str):
        self.url = url
        self.position = 0
        request = urllib.request.Request(url, method="HEAD")
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                self.size = int(response.headers["Content-Length"])
        except (urllib.error.URLError, OSError, KeyError, ValueError) as error:
            raise PackageIndexError(f"cannot reach {url}: {getattr(error, 'reason', error)}") from None

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer) -> int:
        end = min(self.size, self.position + len(buffer)) - 1
        if end < self.position:
            return 0
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.position}-{end}"})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                data = response.read()
        except (urllib.error.URLError, OSError) as error:
            raise PackageIndexError(f"cannot reach {self.url}: {getattr(error, 'reason', error)}") from None
        data = data[: len(buffer)]
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def _json_file(entry: dict, base: str) -> IndexFile:
    metadata = entry.get("core-metadata", entry.get("dist-info-metadata", False))
    return IndexFile(entry["filename"], urllib.parse.urljoin(base, entry["url"]),
                     entry.get("hashes", {}).get("sha256"), entry.get("requires-python"), bool(metadata))


class _Anchors(HTMLParser):
    """The files of a PEP 503 page: one <a> each, the hash in the URL's fragment."""

    def __init__(self, base: str):
        super().__init__()
        self.base = base
        self.files: list[IndexFile] = []
        self._attributes: dict[str, str | None] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._attributes = dict(attrs)

    def handle_data(self, data):
        if self._attributes is not None and data.strip():
            href = self._attributes.get("href") or ""
            url = urllib.parse.urljoin(self.base, href)
            fragment = urllib.parse.urlsplit(url).fragment
            sha256 = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
            metadata = self._attributes.get("data-core-metadata") or self._attributes.get("data-dist-info-metadata")
            self.files.append(IndexFile(data.strip(), url, sha256, self._attributes.get("data-requires-python"),
                                        bool(metadata)))
            self._attributes = None


def _get(url: str, accept: str | None = None) -> tuple[bytes, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        raise PackageIndexError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        raise PackageIndexError(f"cannot reach {_origin(url)}: {getattr(error, 'reason', error)}") from None


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
