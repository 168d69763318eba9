"""`imagegen report`: the page a user reads instead of logs, from the reports build, test and push write."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import markupsafe
import pytest
from click.testing import CliRunner

from imagegen.cli import main
# Aliased: pytest would try to collect a class named Test* as a test class.
from imagegen.stages.results import BuildResult, Check, LayerResult, PushResult, write_json
from imagegen.stages.results import TestResult as ImageTestResult
from tests.helpers import FIXTURE_MATRIX, FIXTURE_TRAINER, fixture_data

FIXTURE_ARGS = ["--matrix", str(FIXTURE_MATRIX), "--trainer", str(FIXTURE_TRAINER)]
HOSTILE = "<script>alert('x')</script>&\"|"
PUSHED_DIGEST = "sha256:" + "9f8e" * 16
SBOM_DIGEST = "sha256:" + "5b0m" * 16
GPU_SKIP_REASON = "no GPU runtime: docker has no nvidia runtime"
# A row per image and platform; an image of several platforms names the platform.
MATRIX_ROWS = [image["name"] if len(image.get("platforms", ["linux/amd64"])) == 1 else f"{image['name']} ({platform})"
               for image in fixture_data()["images"] for platform in image.get("platforms", ["linux/amd64"])]


def results(logs: Path) -> tuple[list, list, list]:
    """A built, tested and pushed image; a failed build; a failed test; the rest of the matrix without results."""
    builds = [
        BuildResult("cu124-torch2.6", "repo:tag", "built", 812.0, 14_230_000_000, "sha256:" + "ab12" * 16,
                    log_file=str(logs / "cu124-torch2.6.log"),
                    sbom_file=str(logs.parent / "sbom" / "cu124-torch2.6.cdx.json"),
                    sbom_components={"python": 158, "os": 211},
                    layers=[LayerResult("base", "repo:base", "built", 120.0, 3, 10)]),
        BuildResult("cu118-torch2.6", "repo:tag", "failed", 233.0, failed_layer="framework",
                    failed_step=f"RUN pip install flash-attn {HOSTILE}",
                    log_tail=["Collecting flash-attn", "nvcc fatal : Unsupported gpu architecture 'compute_90'"],
                    log_file=str(logs / "cu118-torch2.6.log")),
        BuildResult("cpu", "repo:cpu", "built", 301.0, 4_100_000_000, "sha256:" + "cd34" * 16),
    ]
    tests = [
        ImageTestResult("cu124-torch2.6", "repo:tag", "passed", gpu_runtime=False,
                        gpu_reason="docker has no nvidia runtime",
                        checks=[Check("version.torch", "pass", "2.6.0"),
                                Check("gpu.cuda_available", "skip", GPU_SKIP_REASON)]),
        ImageTestResult("cpu", "repo:cpu", "failed",
                        checks=[Check("version.torch", "fail", "expected 2.14.1, found 2.14.0"),
                                Check("train.tiny_grpo", "pass", "")]),
    ]
    pushes = [
        PushResult("cu124-torch2.6", "ghcr.io", "imagegen/vlm-grpo", "pushed", PUSHED_DIGEST,
                   ["0.1.0-torch2.6.0-cu124-cudnn9-py3.11", "cu12.4"], sbom_digest=SBOM_DIGEST,
                   sbom_found_by="the referrers tag sha256-9f8e", compression="none"),
        PushResult("cpu", "ghcr.io", "imagegen/vlm-grpo", "not pushed", reason="tests failed: version.torch"),
    ]
    return builds, tests, pushes


@pytest.fixture
def reports(tmp_path) -> Path:
    directory = tmp_path / "reports"
    builds, tests, pushes = results(directory / "logs")
    write_json(directory / "build.json", "build", builds)
    write_json(directory / "test.json", "test", tests)
    write_json(directory / "push.json", "push", pushes)
    return directory


def run_report(reports: Path, out: Path):
    args = ["--build", reports / "build.json", "--test", reports / "test.json", "--push", reports / "push.json",
            "--out", out]
    return CliRunner().invoke(main, ["report", *FIXTURE_ARGS, *(str(arg) for arg in args)])


@pytest.fixture
def page(reports, tmp_path) -> Path:
    out = tmp_path / "page"
    result = run_report(reports, out)
    assert result.exit_code == 0, result.output
    return out


def test_every_matrix_image_is_a_row_of_both_pages(page):
    markdown, html_text = (page / "index.md").read_text(), (page / "index.html").read_text()
    for name in MATRIX_ROWS:
        assert f"| **{name}** |" in markdown
        assert f">{name}</td>" in html_text
    assert "<script" not in html_text.replace("<style>", "")


def test_component_versions_are_shown(page):
    markdown = (page / "index.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| **cu124-torch2.6**"))
    for version in ("12.4.1", "2.6.0+cu124 (PyPI)", "3.11", "9.1.0.70", "2.21.5", "2.7.4.post1", "0.18.9", "5.24.0",
                    "1.16.0"):
        assert f" {version} |" in row


def test_statuses_reasons_and_digests_are_on_the_page(page):
    for text in ((page / "index.md").read_text(), (page / "index.html").read_text()):
        assert "built" in text and "14.2 GB" in text and "sha256:ab12ab12ab12" in text
        assert "failed" in text and "layer framework" in text and "Unsupported gpu architecture" in text
        assert GPU_SKIP_REASON in text
        assert "expected 2.14.1, found 2.14.0" in text
        assert "pushed" in text and "sha256:9f8e9f8e9f8e" in text and "cu12.4" in text
        assert "uncompressed layers" in text  # which layers the tag holds: the push said it
        assert "tests failed: version.torch" in text
        assert "not run" in text


def test_the_sbom_is_counted_linked_and_its_artifact_named(page):
    html_text, markdown = (page / "index.html").read_text(), (page / "index.md").read_text()
    for text in (html_text, markdown):
        assert "SBOM: 158 Python, 211 OS" in text
        assert "SBOM sha256:5b0m5b0m5b0m refers to it (the referrers tag sha256-9f8e)" in text
    assert 'href="../reports/sbom/cu124-torch2.6.cdx.json">SBOM</a>' in html_text
    assert "[SBOM](../reports/sbom/cu124-torch2.6.cdx.json)" in markdown


def test_a_row_without_results_says_not_run_for_every_stage(page):
    markdown = (page / "index.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| **cu121-torch2.5**"))
    assert row.count("not run") == 3


def test_the_full_digest_and_check_reasons_are_tooltips(page):
    html_text = (page / "index.html").read_text()
    assert f"@{PUSHED_DIGEST}\"" in html_text
    assert f"title=\"skip: {GPU_SKIP_REASON}\"" in html_text


def test_log_links_are_relative_to_the_page(page):
    html_text = (page / "index.html").read_text()
    assert "href=\"../reports/logs/cu124-torch2.6.log\"" in html_text
    assert "[log](../reports/logs/cu118-torch2.6.log)" in (page / "index.md").read_text()


def test_hostile_text_is_escaped(page):
    html_text = (page / "index.html").read_text()
    assert HOSTILE not in html_text
    assert str(markupsafe.escape(HOSTILE)) in html_text
    markdown = (page / "index.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| **cu118-torch2.6**"))
    assert "<script>" not in row and row.count(" | ") == 13  # the pipe in the text made no extra column


def test_missing_reports_leave_every_stage_not_run(tmp_path):
    out = tmp_path / "page"
    result = run_report(tmp_path / "nowhere", out)
    assert result.exit_code == 0, result.output
    markdown = (out / "index.md").read_text()
    assert markdown.count("➖ not run") == 3 * len(MATRIX_ROWS)


def test_a_malformed_report_is_one_line_and_exit_2(reports, tmp_path):
    (reports / "test.json").write_text("{\"kind\": \"test\", \"images\": [")
    out = tmp_path / "page"
    result = run_report(reports, out)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith(f"error: {reports / 'test.json'}: ")
    assert "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.parametrize("payload, says", [
    ('{"kind": "push", "images": []}', "not a test report"),
    ('{"kind": "test", "images": [{"image": "x", "ref": "r", "status": "passed", "colour": 1}]}', "unknown field"),
    ('{"kind": "test", "images": [{"image": "x"}]}', "images[0] is not a test result"),
    ('{"kind": "test", "images": [{"image": "x", "ref": "r", "status": "passed", "duration_s": "slow"}]}',
     "duration_s: expected float"),
    ('{"kind": "test", "images": [{"image": "x", "ref": "r", "status": "passed", "checks": [{"name": 1}]}]}',
     "name: expected str"),
    ('{"kind": "test", "images": [{"image": "x", "ref": "r", "status": "ok"}]}',
     "status: expected 'passed' or 'failed', got \"ok\""),
    ('{"kind": "test", "images": [{"image": "x", "ref": "r", "status": "passed", "checks": [{"name": "n", '
     '"status": "PASS"}]}]}', "checks.0.status: expected 'pass', 'fail' or 'skip'"),
])
def test_a_report_of_the_wrong_shape_is_one_line_and_exit_2(reports, tmp_path, payload, says):
    (reports / "test.json").write_text(payload)
    result = run_report(reports, tmp_path / "page")
    assert result.exit_code == 2 and result.output.count("\n") == 1 and says in result.output


def test_report_pages_are_replaced_whole(page, reports):
    before = (page / "index.html").read_text()
    assert run_report(reports, page).exit_code == 0
    assert (page / "index.html").read_text() == before
    assert sorted(p.name for p in page.iterdir()) == ["index.html", "index.md"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def required_chromium() -> str:
    """chromium's path; a skip where it is missing, a failure where CI requires it (IMAGEGEN_REQUIRE_BROWSER=1)."""
    browser = chromium()
    if browser is None:
        message = "chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("IMAGEGEN_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " and IMAGEGEN_REQUIRE_BROWSER=1")
        pytest.skip(message)
    return browser


def test_the_html_page_renders_in_a_real_browser(page, tmp_path):
    browser = required_chromium()
    from PIL import Image  # the trainer depends on Pillow; only this test needs it

    screenshot = tmp_path / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--screenshot={screenshot}", "--window-size=1600,1000",
                        (page / "index.html").as_uri()],
                       capture_output=True, timeout=120, check=True)
    with Image.open(screenshot) as picture:
        colours = picture.convert("RGB").getcolors(maxcolors=1_000_000)
    # A blank or unstyled page has a handful of colours; the coloured table has hundreds (antialiased text).
    assert len(colours) > 200


def test_from_reads_the_reports_of_every_job(tmp_path):
    """CI runs one job per image, each writing reports/IMAGE/*.json; the page gathers them all."""
    downloaded = tmp_path / "reports"
    builds, tests, pushes = results(downloaded / "cu124-torch2.6" / "logs")
    write_json(downloaded / "cu124-torch2.6" / "build.json", "build", builds[:1])
    write_json(downloaded / "cu124-torch2.6" / "push.json", "push", pushes[:1])
    write_json(downloaded / "cpu" / "build.json", "build", builds[2:])
    write_json(downloaded / "cpu" / "test.json", "test", tests[1:])
    out = tmp_path / "page"
    result = CliRunner().invoke(main, ["report", *FIXTURE_ARGS, "--from", str(downloaded), "--out", str(out)])
    assert result.exit_code == 0, result.output
    markdown = (out / "index.md").read_text()
    assert "sha256:9f8e9f8e9f8e" in markdown and "4.1 GB" in markdown and "expected 2.14.1" in markdown
    assert "href=\"../reports/cu124-torch2.6/logs/cu124-torch2.6.log\"" in (out / "index.html").read_text()


def test_an_image_locked_elsewhere_says_so_in_its_build_cell(page):
    markdown = (page / "index.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| **cu121-torch2.5**"))
    assert "➖ not run<br>needs the PyTorch index" in row
    html_text = (page / "index.html").read_text()
    assert 'title="needs the PyTorch index">cu121-torch2.5</td>' in html_text
