"""lab.*: in an image with JupyterLab (`IMAGE lab`), the server and its kernel work, before a user opens a browser.

lab.server  JupyterLab starts on loopback with a token, serves /lab with it and refuses the API without it
lab.kernel  the notebook kernel (ipykernel's python3) starts and imports torch and vlmgrpo

They run where expected.json names a JupyterLab version (the images that have the jupyterlab component), and skip
elsewhere with that reason: a JupyterLab installed by hand is not the image's to check.
Needs no GPU.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from imagegen_contract.inventory import installed_version
from vlmgrpo.image.lab import TOKEN_VARIABLE, plan_lab
from vlmgrpo.processes import free_port, stop_process, wait_for_health
from vlmgrpo.image.checks import FAIL, PASS, Context, expected_version, result

NAMES = ("lab.server", "lab.kernel")
PHASE = "components"
NEEDS = ("jupyterlab",)
START_TIMEOUT_S = 90
KERNEL_TIMEOUT_S = 120


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def server_check(work: str) -> dict[str, str]:
    """The server as `vlmgrpo lab` starts it (lab.plan_lab), on loopback with a token of its own."""
    name, token, port = NAMES[0], secrets.token_urlsafe(16), free_port()
    plan = plan_lab(port, "127.0.0.1", work, {**os.environ, TOKEN_VARIABLE: token})
    started = time.monotonic()
    server = subprocess.Popen(plan.argv, env=plan.environment, cwd=work, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_for_health(f"{base}/api/status?token={token}", START_TIMEOUT_S, lambda: server.poll() is None):
            server.kill()
            return result(name, FAIL, f"no answer within {START_TIMEOUT_S} s: {server.communicate()[1][-800:]}")
        seconds = time.monotonic() - started
        lab, refused = status_of(f"{base}/lab?token={token}"), status_of(f"{base}/api/status")
    finally:
        stop_process(server)
    if lab != 200 or refused != 403:
        return result(name, FAIL, f"/lab with the token answered {lab} (200 wanted), the API without it {refused} "
                      "(403 wanted)")
    return result(name, PASS, f"answered in {seconds:.1f} s; /lab 200 with the token, the API 403 without it")


def kernel_check() -> dict[str, str]:
    from jupyter_client.manager import start_new_kernel

    started = time.monotonic()
    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=KERNEL_TIMEOUT_S)
    lines: list[str] = []
    try:
        reply = client.execute_interactive(
            "import torch, vlmgrpo; print(torch.__version__, vlmgrpo.__version__)", timeout=KERNEL_TIMEOUT_S,
            output_hook=lambda message: lines.append(message["content"].get("text", "")))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    printed = "".join(lines).strip()
    if reply["content"]["status"] != "ok":
        return result(NAMES[1], FAIL, f"{reply['content'].get('ename')}: {reply['content'].get('evalue')}")
    return result(NAMES[1], PASS, f"imports torch and vlmgrpo ({printed}) in {time.monotonic() - started:.1f} s")


def run(context: Context) -> list[dict[str, str]]:
    expected, installed = expected_version(context.expected, "jupyterlab"), installed_version("jupyterlab")
    if not installed:  # the runner found the image names JupyterLab (NEEDS), yet it is not there
        return [result(check, FAIL, f"expected JupyterLab {expected}; not installed") for check in NAMES]
    with tempfile.TemporaryDirectory(prefix="vlmgrpo-lab-check-") as work:
        return [server_check(work), kernel_check()]
