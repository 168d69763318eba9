"""The llm method's judge (rewards/judge.py) against a fake OpenAI-compatible server on 127.0.0.1: one deadline for
each whole call, verdicts that are finite numbers from 0 to 1 or a counted warning, a judge that never gives one
stopping the run, and credentials only from the key's variable."""

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import in_process
from vlmgrpo.errors import ConfigError
from vlmgrpo.rewards.accuracy import make_jsonl_accuracy
from vlmgrpo.rewards.judge import FIRST_CALLS, Judge, read_verdict, without_userinfo

DRIP_S = 0.5  # a byte every half second: each read is quick, the call never ends
DRIP_FOR_S = 8  # then the fake gives up, so that a judge without a deadline fails the test instead of hanging it


class FakeJudge(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.answer({"object": "list", "data": [{"id": "judge", "object": "model", "created": 0,
                                                 "owned_by": "test"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer({"id": "x", "object": "chat.completion", "created": 0, "model": "judge",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": self.server.said}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    def answer(self, body: dict):
        self.server.calls += 1
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data) if not self.server.drip else 1_000_000))
        self.end_headers()
        if not self.server.drip:
            self.wfile.write(data)
            return
        started = time.monotonic()
        while time.monotonic() - started < DRIP_FOR_S and not self.server.stopping.is_set():
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return  # the client hung up: what a deadline does
            time.sleep(DRIP_S)


@pytest.fixture
def fake():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeJudge)  # loopback only
    server.daemon_threads = True
    server.said, server.drip, server.calls, server.stopping = "1.0", False, 0, threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stopping.set()
    server.shutdown()
    server.server_close()


def judge_of(server, **settings) -> Judge:
    return Judge(f"http://127.0.0.1:{server.server_address[1]}/v1", "judge", **settings)


ROWS = (["<answer>4</answer>", "<answer>5</answer>"], ["<answer>4</answer>", "<answer>4</answer>"])


def test_a_judge_that_drips_a_byte_every_half_second_is_cut_at_judge_timeout(fake, caplog):
    """Each read comes within the client's read timeout, so only a deadline on the whole call (retries included)
    ends it: the row is scored by VLM-R1's fallback, exact match, with the reason."""
    import openai  # noqa: F401 - its first import (a second here) is not the call's

    fake.drip = True
    judge = judge_of(fake, timeout_s=1.5, max_retries=2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="vlmgrpo"):
        scores = judge.scores(*ROWS)
    assert time.monotonic() - started < 1.5 + 1.0
    assert scores == [1.0, 0.0]
    assert ("judge judge: 2 of 2 answers scored by exact match instead (the call failed: TimeoutError: no answer "
            "within judge_timeout 1.5 s; 2 so far)") in caplog.text
    started = time.monotonic()
    with pytest.raises(ConfigError, match="did not answer GET /models \\(TimeoutError: no answer within"):
        judge.check("config.yaml:3")  # the check before any weights load has the same deadline
    assert time.monotonic() - started < 1.5 + 1.0


@pytest.mark.parametrize("said, score, problem", [
    ("1.0", 1.0, ""), ("0.25", 0.25, ""), ("0", 0.0, ""),
    ("nan", 0.0, "not finite"), ("inf", 0.0, "not finite"), ("-inf", 0.0, "not finite"),
    ("1e30", 0.0, "out of range"), ("-50", 0.0, "out of range"), ("1.01", 0.0, "out of range"),
    ("yes", 1.0, "not a number"),  # VLM-R1's fallback: the answer equals the label
])
def test_a_verdict_is_a_finite_number_from_0_to_1(said, score, problem):
    assert read_verdict(said, "4", "4")[:2] == (score, problem)


def test_a_nan_verdict_scores_0_counted_in_the_log_and_the_metric(fake, caplog):
    fake.said = "nan"
    logged = []
    reward = make_jsonl_accuracy(judge_of(fake))
    with caplog.at_level(logging.WARNING, logger="vlmgrpo"):
        scores = reward(prompts=[None] * 3, completions=[*ROWS[0], "<answer>x</answer>"], answer=["4", "4", "x"],
                        accu_reward_method=["llm", "llm", "mcq"], log_metric=lambda *pair: logged.append(pair))
    assert scores[:2] == [0.0, 0.0]
    assert "judge judge: 2 of 2 verdicts scored 0 (the judge said 'nan', not a finite number; 2 so far)" in caplog.text
    assert logged == [("judge_invalid", 2)]


def test_a_judge_with_no_valid_verdict_in_its_first_calls_stops_the_run_in_one_line(fake):
    fake.said = "1e30"
    judge = judge_of(fake, where="run.yaml:7")
    judge.scores(["<answer>4</answer>"] * 4, ["4"] * 4)  # fewer than FIRST_CALLS: warned, counted, going on
    with pytest.raises(ConfigError) as raised:
        judge.scores(["<answer>4</answer>"] * (FIRST_CALLS - 4), ["4"] * (FIRST_CALLS - 4))
    assert str(raised.value) == (
        f"run.yaml:7: key 'judge_url': the judge judge at {judge.url} returned no valid verdict in the first "
        f"{FIRST_CALLS} calls ({FIRST_CALLS} out of range); a verdict is a number from 0 to 1 (VLM-R1's prompt asks "
        "for 1.0 or 0.0): check judge_model and that the endpoint answers within judge_timeout")
    fake.said = "1.0"
    good = judge_of(fake)
    good.scores(["<answer>4</answer>"], ["4"])
    fake.said = "nan"
    good.scores(["<answer>4</answer>"] * FIRST_CALLS, ["4"] * FIRST_CALLS)  # one valid verdict: warnings only


def test_credentials_in_the_judge_url_are_refused_never_printed_nor_saved(tmp_path, fake):
    port = fake.server_address[1]
    config = tmp_path / "run.yaml"
    config.write_text(f"judge_url: http://user:s3cret@127.0.0.1:{port}/v1\njudge_model: judge\n")
    result = in_process("train", "--config", config, "--print-config")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"error: {config}: key 'judge_url': credentials in the URL are not taken (http://***@127.0.0.1:{port}/v1); "
        "put the key in $OPENAI_API_KEY (judge_api_key_env names the variable) and give judge_url without "
        "user:password@")
    assert "s3cret" not in result.stdout + result.stderr and fake.calls == 0  # nothing was sent
    with pytest.raises(ConfigError, match="credentials in the URL are not taken"):
        Judge(f"http://user:s3cret@127.0.0.1:{port}/v1", "judge")


def test_the_saved_config_holds_no_userinfo_of_any_url():
    from vlmgrpo.config.dump import dump_config
    from vlmgrpo.config.load import load_config
    from vlmgrpo.commands.grpo import GRPO

    config = load_config(None, {"judge_url": "http://127.0.0.1:9/v1"}, GRPO)
    config.reward.judge_url = "http://user:s3cret@127.0.0.1:9/v1"  # past the check: the second guard holds
    dumped = dump_config(config)
    assert "judge_url: http://***@127.0.0.1:9/v1" in dumped and "s3cret" not in dumped
    assert without_userinfo("https://k@h/v1") == "https://***@h/v1" and without_userinfo("http://h/v1") == "http://h/v1"
