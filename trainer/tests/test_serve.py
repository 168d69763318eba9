"""`vlmgrpo serve`: a real server on loopback answering the official `openai` client (transformers serve on the CPU,
on its private socket; the vLLM branch needs a GPU). The engine's command and the flags refused before it starts:
test_serve_engine.py; the checks in front of the engine, without one: test_serve_requests.py."""

import base64
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from conftest import ENV
from test_serve_requests import HUGE, asking, chat, deep, png_url
from vlmgrpo.errors import ConfigError
from vlmgrpo.processes import free_port, wait_for_health

API_KEY = "test-key-of-this-module"


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    """One real server for the module: (its process, port, the file its stderr goes to)."""
    port = free_port()
    stderr = tmp_path_factory.mktemp("serve") / "stderr.log"
    with open(stderr, "w") as stream:
        process = subprocess.Popen([sys.executable, "-m", "vlmgrpo", "serve", "--model", tiny["model"],
                                    "--served-model-name", "rec-tiny", "--port", str(port), "--api-key", API_KEY,
                                    "--allowed-media-domains", "127.0.0.1", "--allowed-media-domains", "localhost",
                                    "--read-timeout", "3"], env=ENV, stdout=subprocess.DEVNULL, stderr=stream)
    assert wait_for_health(f"http://127.0.0.1:{port}/health", 180, lambda: process.poll() is None), \
        stderr.read_text()[-3000:] if process.poll() is not None else "serve was not ready in 180 s"
    yield process, port, stderr
    if process.poll() is None:
        process.kill()  # the engine gets SIGTERM from the kernel when its parent dies (PR_SET_PDEATHSIG)
        process.wait(timeout=30)


def _engine_of(process) -> psutil.Process:
    return [child for child in psutil.Process(process.pid).children() if "serve" in child.cmdline()][0]


# Run as another uid: every TCP port the engine listens on, then its socket. Prints what answered.
_KNOCK = """
import json, socket, sys
ports, path = json.loads(sys.argv[1]), sys.argv[2]
for port in ports:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        print("port", port, "answered")
    except OSError as error:
        print("port", port, "refused:", error.strerror)
probe = socket.socket(socket.AF_UNIX)
try:
    probe.connect(path)
    print("socket answered")
except OSError as error:
    print("socket refused:", error.strerror)
"""


@pytest.mark.slow
def test_the_engine_is_reached_only_through_the_front(server):
    """Issue 53: transformers serve listened on 127.0.0.1 with no key; as uid 65534 a POST to its port naming a
    root-only image file was answered 200 (a file oracle). Now it listens on no TCP port, and its socket's
    directory is this uid's alone: another local user (or a pod's sidecar, which shares the network namespace but not
    the filesystem) reaches nothing."""
    process, port, stderr = server
    engine = _engine_of(process)
    listening = [c.laddr.port for c in engine.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening == []
    path = [line for line in stderr.read_text().splitlines() if "serving " in line][0].split("on_socket ")[1].split()[0]
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    knock = subprocess.run(["/usr/bin/python3", "-c", _KNOCK, json.dumps([port]), path], user=65534, group=65534,
                           capture_output=True, text=True, timeout=60, cwd="/")
    assert knock.stdout.splitlines() == [f"port {port} answered", "socket refused: Permission denied"], knock.stderr
    own = socket.socket(socket.AF_UNIX)  # this uid, the front's, still gets in
    own.connect(path)
    own.close()


def _client(port):
    import openai

    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0)


@pytest.mark.slow
def test_the_official_client_gets_answers_and_errors_from_a_real_server(server, tiny):
    import openai

    process, port, _ = server
    client = _client(port)
    image = png_url((84, 84))
    question = chat("rec-tiny", image, "Please provide the bounding box of the yellow rectangle.")["messages"]
    answer = client.chat.completions.create(model="rec-tiny", messages=question, max_tokens=8)
    assert answer.model == "rec-tiny" and answer.choices[0].message.role == "assistant"
    assert isinstance(answer.choices[0].message.content, str) and answer.usage.completion_tokens > 0
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=question, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="does not decode"):
        client.chat.completions.create(model="rec-tiny", messages=chat("rec-tiny", "data:image/png;base64,aGVsbG8=")
                                       ["messages"], max_tokens=4)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=b"{oops", method="POST",
                                     headers={"content-type": "application/json",
                                              "authorization": f"Bearer {API_KEY}"})
    with pytest.raises(urllib.error.HTTPError) as malformed:
        urllib.request.urlopen(request, timeout=30)
    assert malformed.value.code == 400 and "not valid JSON" in malformed.value.read().decode()
    # 50 at once, after the bad ones, one of them asking for 10^9 tokens (which held the engine for good): that one
    # is refused at once, and the 49 others are answered within their timeout.
    def ask(i):
        try:
            return client.chat.completions.create(model="rec-tiny", messages=question, timeout=120,
                                                  max_tokens=10 ** 9 if i == 17 else 4)
        except openai.BadRequestError as error:
            return error
    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(ask, range(50)))
    assert isinstance(answers[17], openai.BadRequestError) and "'max_tokens' must be" in str(answers[17])
    rest = answers[:17] + answers[18:]
    assert len(rest) == 49 and all(a.choices[0].message.content is not None for a in rest)
    assert process.poll() is None


@pytest.mark.slow
def test_vlmgrpo_serve_of_a_model_is_the_llm_method_s_judge(server, monkeypatch, caplog):
    """The llm accuracy method against this real server as its judge: checked (the model listed, the key read from
    the variable the config names), then asked with VLM-R1's prompt. The tiny model answers no number, so each row is
    scored by VLM-R1's fallback, exact match, with a warning that says so: a real answer, not a failed call."""
    import logging

    from vlmgrpo.rewards.judge import NOT_A_NUMBER, Judge, _run

    _, port, _ = server
    judge = Judge(f"http://127.0.0.1:{port}/v1", "rec-tiny", "VLMGRPO_TEST_JUDGE_KEY", timeout_s=120)
    with pytest.raises(ConfigError, match="did not answer GET /models \\(AuthenticationError"):
        judge.check("config")  # no key in the variable yet: 401
    monkeypatch.setenv("VLMGRPO_TEST_JUDGE_KEY", API_KEY)
    judge.check("config")
    with pytest.raises(ConfigError, match="serves rec-tiny, not 'gpt-4o'"):
        Judge(judge.url, "gpt-4o", judge.api_key_env).check("config")

    async def ask():
        async with judge.client() as client:
            return await judge.verdict(client, "4", "4")

    _, why, _ = _run(ask())
    assert why in ("", NOT_A_NUMBER), why  # the model answered: a number, or text that is none
    with caplog.at_level(logging.WARNING, logger="vlmgrpo"):
        scores = judge.scores(["<think>..</think><answer>4</answer>", "<answer>5</answer>"],
                              ["4", "<answer>4</answer>"])
    if why:
        assert scores == [1.0, 0.0]
        assert "judge rec-tiny: 2 of 2 answers scored by exact match instead (the judge said" in caplog.text


@pytest.mark.slow
def test_grpo_steps_on_rows_judged_by_llm_ask_this_server(server, tiny, tmp_path):
    """Two GRPO steps whose rows are scored by the llm method, the judge being this real server: the preflight
    reaches it, every completion is judged through it (no call fails: a failed one would be named in a warning), and
    the reward is logged."""
    from conftest import read_jsonl, vlmgrpo

    _, port, _ = server
    rows = tmp_path / "judged.jsonl"
    rows.write_text("".join(json.dumps({**row, "accu_reward_method": "llm"}) + "\n"
                            for row in read_jsonl(tiny["data"])[:2]))
    output = tmp_path / "out"
    result = vlmgrpo("train", "--model", tiny["model"], "--data", rows, "--image-root", tiny["image_root"],
                     "--output", output, "--num-generations", "2", "--batch-size", "2", "--max-completion-length", "8",
                     "--max-steps", "2", "--save-steps", "100", "--set", "reward_funcs=[jsonl_accuracy]",
                     "--set", f"judge_url=http://127.0.0.1:{port}/v1", "--set", "judge_model=rec-tiny",
                     "--set", "judge_api_key_env=VLMGRPO_TEST_JUDGE_KEY",
                     env={**ENV, "VLMGRPO_TEST_JUDGE_KEY": API_KEY}, check=True)
    assert "step 2/2" in result.stdout
    assert "Error" not in "".join(line for line in result.stderr.splitlines() if "judge rec-tiny" in line)
    metrics = read_jsonl(output / "metrics.jsonl")
    assert all(0.0 <= m["rewards"]["jsonl_accuracy"] <= 1.0 for m in metrics)


@pytest.mark.slow
def test_a_prompt_over_the_context_a_half_sent_body_and_a_client_that_hangs_up(server, tiny):
    """Each refused or dropped by the front, and the server answers the next request."""
    import socket

    from vlmgrpo.serving.serve import model_context

    process, port, stderr = server
    key = {"content-type": "application/json", "authorization": f"Bearer {API_KEY}"}
    long = chat("rec-tiny", text="yellow " * model_context(tiny["model"]))
    started = time.monotonic()
    code, answer = _post(port, json.dumps(long).encode(), key)
    assert (code, answer["error"]["code"]) == (400, "context_length_exceeded"), answer
    assert time.monotonic() - started < 30  # the engine never saw it
    # Greedy, the tiny model never says its end token: 2000 tokens took 7 s here (sampled, it stopped after 393 in 2 s,
    # sometimes before the client below hung up)
    body = json.dumps({**chat("rec-tiny"), "max_tokens": 2000, "temperature": 0}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {API_KEY}\r\ncontent-length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as half:  # half the body, then nothing
        half.sendall(head + body[:len(body) // 2])
        assert b" 408 " in half.recv(4096).split(b"\r\n")[0]  # --read-timeout 3
    with socket.create_connection(("127.0.0.1", port), timeout=30) as half:  # half the headers, then nothing
        half.sendall(head[:40])
        started = time.monotonic()
        assert half.recv(4096) == b"" and time.monotonic() - started < 10  # closed by the server
    with socket.create_connection(("127.0.0.1", port), timeout=30) as gone:  # all of it, then hangs up
        gone.sendall(head + body)
        time.sleep(2)
    deadline = time.monotonic() + 30
    while "cancelled" not in stderr.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "the client hung up: its request to the engine was cancelled" in stderr.read_text()
    code, answer = _post(port, json.dumps({**chat("rec-tiny"), "max_tokens": 4}).encode(), key)
    assert code == 200 and process.poll() is None


@pytest.mark.slow
def test_an_engine_that_dies_is_started_again_and_503_meanwhile(server):
    process, port, stderr = server
    engine = _engine_of(process)
    engine.kill()
    engine.wait(timeout=30)
    key = {"content-type": "application/json", "authorization": f"Bearer {API_KEY}"}
    body = json.dumps({**chat("rec-tiny"), "max_tokens": 4}).encode()
    code, answer = _post(port, body, key)
    assert (code, answer["error"]["code"]) == (503, "engine_unavailable"), answer
    with pytest.raises(urllib.error.HTTPError) as unhealthy:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10)
    assert unhealthy.value.code == 503
    assert wait_for_health(f"http://127.0.0.1:{port}/health", 180, lambda: process.poll() is None)
    assert _post(port, body, key)[0] == 200
    assert "the serving engine exited (-9); starting it again (restart 1" in stderr.read_text()


class _Listener(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):
        _Listener.seen.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(base64.b64decode(png_url().split(",", 1)[1]))

    def log_message(self, *args):
        pass


def _post(port, body: bytes, headers: dict):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, method="POST",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.slow
def test_nobody_in_without_the_key_and_nothing_fetched_from_loopback_or_a_path(server, tmp_path):
    """The real server on loopback: no key, a wrong key, a text/plain body (what a web page may send without a
    preflight), a server-side path and a loopback URL (allowed by name, refused by address): each refused in
    OpenAI's error shape, and the local listener sees no request."""
    process, port, _ = server
    listener = http.server.HTTPServer(("127.0.0.1", 0), _Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    _Listener.seen = []
    body = json.dumps(chat("rec-tiny", f"http://127.0.0.1:{listener.server_port}/admin")).encode()
    key = {"authorization": f"Bearer {API_KEY}"}
    try:
        for headers, status, says in (
                ({"content-type": "application/json"}, 401, "a valid API key is required"),
                ({"content-type": "application/json", "authorization": "Bearer nope"}, 401, "a valid API key"),
                ({"content-type": "text/plain", **key}, 415, "must be sent as application/json"),
                ({"content-type": "application/json", **key}, 400, "a loopback, private or reserved address")):
            code, answer = _post(port, body, headers)
            assert (code, set(answer["error"])) == (status, {"message", "type", "param", "code"})
            assert says in answer["error"]["message"]
        path = json.dumps(chat("rec-tiny", str(tmp_path / "secret.png"))).encode()
        code, answer = _post(port, path, {"content-type": "application/json", **key})
        assert code == 400 and "opens no file of its own" in answer["error"]["message"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as health:  # no key needed
            assert health.status == 200
    finally:
        listener.shutdown()
    assert _Listener.seen == [] and process.poll() is None


@pytest.mark.slow
def test_the_side_doors_of_the_engine_are_shut(server, tmp_path):
    """What transformers serve loaded, fetched or rendered as sent (issue 45): an input_image of a server-side file,
    of a loopback URL or of 25 megapixels, a video_url, a client's chat_template_kwargs, an input_text part far
    over the context, JSON nested 100k deep, a seed over 64 bits, a field the server does not know, and a stop
    string, which transformers serve fails on for this model. Each is a 400 in OpenAI's shape naming it, the
    engine is sent none of them, and what the allow-list keeps is served."""
    process, port, _ = server
    secret = tmp_path / "secret.png"
    secret.write_bytes(base64.b64decode(png_url().split(",", 1)[1]))
    listener = http.server.HTTPServer(("127.0.0.1", 0), _Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    _Listener.seen = []
    key = {"content-type": "application/json", "authorization": f"Bearer {API_KEY}"}
    probes = [(json.dumps(asking({"type": "input_image", "image_url": image}, "rec-tiny")).encode(), "input_image")
              for image in (f"file://{secret}", str(secret), f"http://127.0.0.1:{listener.server_port}/x.png", HUGE)]
    probes += [(json.dumps(body).encode(), says) for body, says in (
        (asking({"type": "video_url", "video_url": {"url": f"file://{secret}"}}, "rec-tiny"), "video_url"),
        ({**chat("rec-tiny"), "chat_template_kwargs": {"max_pixels": 10 ** 7}}, "chat_template_kwargs"),
        (asking({"type": "input_text", "text": "yellow " * 80_000}, "rec-tiny"), "input_text"),
        ({**chat("rec-tiny"), "seed": 2 ** 70}, "'seed' must be a whole number from 0 to"),
        ({**chat("rec-tiny"), "guided_json": {}}, "'guided_json' is not accepted here"),
        ({**chat("rec-tiny"), "stop": "x"}, "'stop' is not served by this server's engine"))]
    probes.append((deep(100_000).replace(b'"model": "m"', b'"model": "rec-tiny"'), "nested too deeply"))
    try:
        for body, says in probes:
            code, answer = _post(port, body, key)
            assert (code, set(answer["error"])) == (400, {"message", "type", "param", "code"}), answer
            assert says in answer["error"]["message"], answer
    finally:
        listener.shutdown()
    assert _Listener.seen == []
    kept = {**chat("rec-tiny"), "max_tokens": 4, "seed": 2 ** 63 - 1, "frequency_penalty": 2, "presence_penalty": 2,
            "top_p": 0.9, "logprobs": True, "top_logprobs": 20, "user": "u-1"}
    code, answer = _post(port, json.dumps(kept).encode(), key)
    assert code == 200 and answer["model"] == "rec-tiny" and process.poll() is None, answer


@pytest.mark.slow
def test_sigterm_answers_the_requests_in_flight_then_stops_the_engine(server):
    """Streamed, so the test knows the request is in flight (its first chunk came) when the signal is sent."""
    process, port, stderr_file = server
    stream = _client(port).chat.completions.create(model="rec-tiny", max_tokens=300, stream=True,
                                                   messages=chat("rec-tiny")["messages"])
    chunks = [next(stream)]
    engine = _engine_of(process)
    process.send_signal(signal.SIGTERM)
    chunks += list(stream)  # the rest of the answer still arrives
    assert len(chunks) > 2 and chunks[-1].choices and chunks[-1].choices[0].finish_reason is not None
    assert {chunk.model for chunk in chunks} == {"rec-tiny"}  # the served name, never the engine's model path
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    stderr = stderr_file.read_text()
    assert "shutdown: 1 in flight, 1 answered, 0 refused" in stderr and "Traceback" not in stderr
    engine_socket = [line for line in stderr.splitlines() if "serving " in line][0].split("on_socket ")[1].split()[0]
    engine.wait(timeout=30)  # raises psutil.TimeoutExpired if the engine was left behind
    assert not os.path.exists(os.path.dirname(engine_socket))  # and its socket's directory is gone


@pytest.mark.slow
def test_a_killed_server_takes_its_engine_with_it(tiny):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "vlmgrpo", "serve", "--model", tiny["model"], "--port", str(port),
                                "--host", "127.0.0.1"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    assert wait_for_health(f"http://127.0.0.1:{port}/health", 180, lambda: process.poll() is None)
    engine = _engine_of(process)
    process.kill()  # SIGKILL: no handler of ours runs
    process.wait(timeout=30)
    engine.wait(timeout=60)  # raises psutil.TimeoutExpired if the engine outlives its server
    assert not engine.is_running()


