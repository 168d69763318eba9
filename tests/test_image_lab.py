"""`docker run -p 8888:8888 IMAGE lab` as a user runs it: JupyterLab as the image's user with a generated token
printed once, refusing requests without it, TensorBoard behind it on the same token; headless Chromium (Debian's,
driven by Playwright) opens the example notebook with the token, runs all its cells and reads their output: rows with
their boxes, scores, two GRPO steps, the plot."""

import os
import re
import time
import urllib.request

import pytest

from tests.docker_env import docker_cli as docker, unique_name
from tests.test_report_page import required_chromium
from vlmgrpo.image.checks.lab import status_of
from vlmgrpo.image.lab import EXAMPLE
from vlmgrpo.processes import wait_for_health

# Runs the cpu image the other session built: .ci/test runs it last in the session beside the main engine's
# build tests (tests/conftest.py).
pytestmark = pytest.mark.beside

RUN_TIMEOUT_MS = 600_000  # make-tiny, scoring and two GRPO steps in the cpu image: about a minute here


def wait_for_token(name: str) -> str:
    """The token `lab` prints once (docker logs), then JupyterLab answering with it."""
    for _ in range(240):
        logs = docker("logs", name, check=False)
        found = re.search(r"lab\?token=(\S+) \(token generated", logs.stderr)
        if found:
            return found.group(1)
        assert docker("inspect", "-f", "{{.State.Running}}", name).stdout.strip() == "true", logs.stderr[-3000:]
        time.sleep(0.5)
    pytest.fail("no token printed: " + docker("logs", name, check=False).stderr[-3000:])


def run_all_cells(page, screenshot) -> list[str]:
    """Run > Run All Cells once the kernel is idle (the status bar says so), then the last cell's output."""
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.get_by_text(re.compile(r"\| Idle")).first.wait_for(timeout=120_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    try:
        page.locator(".jp-OutputArea-output", has_text="made a tiny model").wait_for(timeout=120_000)
        page.locator(".jp-OutputArea-output", has_text="plotted 2 steps").wait_for(timeout=RUN_TIMEOUT_MS)
    finally:
        page.screenshot(path=str(screenshot), full_page=True)  # what the browser showed, kept with the test's files
    return page.locator(".jp-OutputArea-output").all_inner_texts()


def test_the_lab_runs_the_example_notebook_in_a_browser_with_its_token(image_under_test, tmp_path):
    browser_path = required_chromium()
    from playwright.sync_api import sync_playwright

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chmod(workspace, 0o777)  # the image's user (uid 1000) writes the notebook's runs here
    name = unique_name("imagegen-lab")
    docker("run", "-d", "--name", name, "-p", "127.0.0.1::8888", "-v", f"{workspace}:/workspace",
           image_under_test["id"], "lab")
    try:
        port = docker("port", name, "8888").stdout.split(":")[-1].strip()
        base = f"http://127.0.0.1:{port}"
        token = wait_for_token(name)
        if not wait_for_health(f"{base}/api/status?token={token}", 120, lambda: True):
            pytest.fail("JupyterLab never answered: " + docker("logs", name, check=False).stderr[-3000:])
        assert status_of(f"{base}/api/status") == 403 and status_of(f"{base}/api/contents?token=wrong") == 403
        assert (workspace / EXAMPLE).is_file()
        with urllib.request.urlopen(f"{base}/tensorboard/?token={token}", timeout=120) as page:  # started on demand
            assert page.status == 200 and b"TensorBoard" in page.read()
        with urllib.request.urlopen(f"{base}/tensorboard/", timeout=30) as page:  # sent to the login page
            assert "/login" in page.url and b"TensorBoard" not in page.read()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{base}/lab/tree/{EXAMPLE}")
                assert "/login" in page.url  # no token, no lab
                page.goto(f"{base}/lab/tree/{EXAMPLE}?token={token}")
                outputs = run_all_cells(page, tmp_path / "lab.png")
                pictures = page.locator(".jp-OutputArea-output img").count()
            finally:
                browser.close()
        text = "\n".join(outputs)
        assert "made a tiny model and 8 rows" in text and '"iou": 1.0' in text and '"iou": 0.0' in text
        assert "step 2/2" in text and "Error" not in text, text[-3000:]
        assert pictures >= 4  # three rows with their boxes and the rewards plot
        assert (workspace / "vlmgrpo-tiny" / "run" / "metrics.jsonl").is_file()
        assert docker("exec", name, "id", "-u").stdout.strip() == "1000"  # the image's user, not root
    finally:
        docker("rm", "-f", name, check=False)
