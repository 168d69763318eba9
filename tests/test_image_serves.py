"""A trained model out of the image, as a user runs it: `docker run IMAGE eval` writes REC accuracy, and
`docker run -p ... IMAGE serve` answers the official `openai` client until `docker stop`."""

import base64
import json
import subprocess
from io import BytesIO

import pytest

from PIL import Image

from tests.docker_env import docker_cli as docker, unique_name
from vlmgrpo.processes import wait_for_health
from tests.helpers import REPO

# Runs the cpu image the other session built: .ci/test runs it last in the session beside the main engine's
# build tests (tests/conftest.py).
pytestmark = pytest.mark.beside

USER = "4321:4321"  # an arbitrary uid, as on a cluster



@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    subprocess.run([str(REPO / ".venv" / "bin" / "vlmgrpo"), "make-tiny", "--out", str(root / "tiny")], check=True,
                   capture_output=True)
    (root / "out").mkdir()
    subprocess.run(["chmod", "-R", "a+rwX", str(root)], check=True)
    return root


def test_eval_in_the_image_writes_rec_accuracy(image_under_test, tiny_dir):
    docker("run", "--rm", "--user", USER, "-v", f"{tiny_dir}:/work", image_under_test["id"], "eval",
           "--model", "/work/tiny/model", "--data", "/work/tiny/data/rec.jsonl", "--image-root",
           "/work/tiny/data/images", "--output", "/work/out/eval", "--max-samples", "2", "--max-new-tokens", "4")
    summary = json.loads((tiny_dir / "out" / "eval" / "eval.json").read_text())
    assert summary["total"] == 2 and summary["per_file"]
    assert len((tiny_dir / "out" / "eval" / "predictions.jsonl").read_text().splitlines()) == 2


def png_url(size) -> str:
    buffer = BytesIO()
    Image.new("RGB", size, "yellow").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_serve_in_the_image_answers_the_official_client_until_docker_stop(image_under_test, tiny_dir):
    import openai

    name = unique_name("imagegen-serve")
    docker("run", "-d", "--name", name, "--user", USER, "-p", "127.0.0.1::8000", "-v", f"{tiny_dir}:/work:ro",
           "-e", "VLMGRPO_API_KEY=key-of-this-test", image_under_test["id"], "serve", "--model", "/work/tiny/model",
           "--served-model-name", "rec-tiny")  # no --host: the image listens on every address
    try:
        port = docker("port", name, "8000").stdout.split(":")[-1].strip()
        assert wait_for_health(f"http://127.0.0.1:{port}/health", 300, lambda: True), \
            docker("logs", name, check=False).stderr[-3000:]
        with pytest.raises(openai.AuthenticationError):  # the key the container was given is required
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0).models.list()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="key-of-this-test", max_retries=0)
        answer = client.chat.completions.create(model="rec-tiny", max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": png_url((84, 84))}},
            {"type": "text", "text": "Please provide the bounding box of the yellow rectangle."}]}])
        assert answer.model == "rec-tiny" and isinstance(answer.choices[0].message.content, str)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="other", max_tokens=4,
                                           messages=[{"role": "user", "content": "hi"}])
        docker("stop", name)
        assert docker("wait", name).stdout.strip() == "143"
        logs = docker("logs", name).stderr  # nothing was in flight at the signal, and the log says so
        assert "shutdown: 0 in flight, 0 answered, 0 refused" in logs and "stopped by SIGTERM" in logs, logs[-3000:]
    finally:
        docker("rm", "-f", name, check=False)
