"""Section 17: `vlmgrpo serve` answering normal clients while abusive ones try each door of issue 45.

The tiny model served by `vlmgrpo serve` (transformers serve on the CPU). NORMAL requests at once (a question and an
84 x 84 image, greedy, TOKENS tokens each: the same work), first alone, then with one client of each abusive kind
looping beside them, from before the first normal request until the last is answered: an input_image part of a server
file, of a loopback URL and of a 144-megapixel image, a client's chat template (chat_template_kwargs), an input_text
part of 80k tokens, JSON nested 100k deep, seed 2**70, an animated GIF (100 frames of 2048 x 2048), 8 PNGs of
4096 x 4096 in one request (issue 53: the engine decoded every frame; the front decoded on its event loop), and a
client that sends long requests (3,000 tokens, streamed and not, in turn) and hangs up after a second. Beside them a
prober asks /health every 0.1 s (a liveness probe; goal: each answered within 0.5 s).

transformers serve generates one request at a time, so which of the NORMAL waits longest is chance: each answer is
compared with the answer of the same rank in the run alone (the k-th fastest with the k-th fastest). Goal (issue 45,
issue 53): every normal request answered, none slower than 3 x its time alone, beside every kind but the long
requests (each holds a one-at-a-time engine until it ends or its hang-up cancels it; their round is reported beside).
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import VLMGRPO, goal, run, table

NORMAL, TOKENS = 50, 16
ROUNDS = int(os.environ.get("BENCH_SERVE_ROUNDS", "3"))  # first answers vary between rounds: RESULTS.md, section 17
GOAL_RATIO = 3.0
HEALTH_GOAL_S, HEALTH_EVERY_S = 0.5, 0.1
MODEL = "rec-tiny"
HANG_UP_S, LONG_TOKENS = 1.0, 3000
HANGING_UP = "long requests, hung up after 1 s"
QUESTION = "Please provide the bounding box of the yellow rectangle."


def png_url(size: tuple[int, int], mode: str = "RGB") -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new(mode, size).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def normal_body(image: str) -> bytes:
    content = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": QUESTION}]
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": TOKENS,
                       "temperature": 0}).encode()


def _asking(part: dict, **fields) -> bytes:
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": [part, {"type": "text",
                                                                                       "text": QUESTION}]}],
                       "max_tokens": TOKENS, **fields}).encode()


def animated_gif(size: tuple[int, int], frames: int) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    images = [Image.new("L", size, shade % 256) for shade in range(frames)]
    images[0].save(buffer, "GIF", save_all=True, append_images=images[1:])
    return "data:image/gif;base64," + base64.b64encode(buffer.getvalue()).decode()


GIF_KIND = "an animated GIF: 100 frames of 2048 x 2048"


def abusive_bodies(secret: Path, loopback: str, huge_image: str, gif: str) -> dict[str, bytes]:
    """One request of each kind the issue lists (the client that hangs up aside), by what the table calls it; `gif`
    is GIF_KIND's data URL (animated_gif((2048, 2048), 100): 8 s to encode, so the caller makes it)."""
    question = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": TOKENS}
    template = "{% for i in range(10000000) %}x{% endfor %}"  # what a client's template may make the engine do
    return {
        "input_image: a server file": _asking({"type": "input_image", "image_url": str(secret)}),
        "input_image: a loopback URL": _asking({"type": "input_image", "image_url": loopback}),
        "input_image: 144 megapixels": _asking({"type": "input_image", "image_url": huge_image}),
        "chat_template_kwargs: a template, max_pixels": json.dumps(
            {**question, "chat_template_kwargs": {"chat_template": template, "max_pixels": 10 ** 7}}).encode(),
        "input_text: 80k tokens": _asking({"type": "input_text", "text": "yellow " * 80_000}),
        "JSON nested 100k deep": (b'{"model": "' + MODEL.encode() + b'", "messages": ' + b"[" * 100_000
                                  + b"]" * 100_000 + b"}"),
        "seed 2**70": json.dumps({**question, "seed": 2 ** 70}).encode(),
        GIF_KIND: _asking({"type": "image_url", "image_url": {"url": gif}}),
    }


LARGE = "8 PNGs of 4096 x 4096 (a valid request)"


def large_images_body() -> bytes:
    """A request the front takes (8 images at its pixel limit), each image decoded by the front, then the engine."""
    return json.dumps({"model": MODEL, "max_tokens": TOKENS, "messages": [{
        "role": "user", "content": [*[{"type": "image_url", "image_url": {"url": png_url((4096, 4096))}}] * 8,
                                    {"type": "text", "text": QUESTION}]}]}).encode()


def post(port: int, body: bytes, timeout: float = 600) -> tuple[int, float]:
    """(status, seconds) of one chat request; status 0 when the connection failed."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        return answer.status, time.monotonic() - started
    except OSError:
        return 0, time.monotonic() - started
    finally:
        connection.close()


def hang_up(port: int, stream: bool) -> None:
    """A long request sent whole, then the connection closed before the answer."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
                       "max_tokens": LONG_TOKENS, "stream": stream}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as gone:
        gone.sendall(head + body)
        time.sleep(HANG_UP_S)


def abusing(port: int, kinds: dict[str, bytes | None], count: int, body: bytes) -> tuple[list, dict]:
    """A round of count normal requests with a client of each kind looping beside them (None: the one that hangs
    up), from 2 s before the first normal request until the last is answered. Each abuser is a process of its own,
    as another client is: as threads here, their Python work held the GIL the normal clients' timing needs."""
    context = multiprocessing.get_context("fork")
    stop, said = context.Event(), context.Queue()
    abusers = [context.Process(target=abuse, args=(port, kind, raw, stop, said)) for kind, raw in kinds.items()]
    abusers.append(context.Process(target=probe_health, args=(port, stop, said)))
    for process in abusers:
        process.start()
    time.sleep(2)  # each abuser has sent its first
    results = normal_round(port, body, count)
    stop.set()
    seen = dict(said.get(timeout=600) for _ in abusers)
    for process in abusers:
        process.join(timeout=60)
    return results, {kind: seen[kind] for kind in (*kinds, HEALTH)}


HEALTH = "GET /health every 0.1 s (a probe)"


def probe_health(port: int, stop, said) -> None:
    """Ask /health again and again until stop: (HEALTH, (its statuses counted, the slowest answer))."""
    statuses, slowest = Counter(), 0.0
    while not stop.is_set():
        started = time.monotonic()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request("GET", "/health")
            statuses[connection.getresponse().status] += 1
        except OSError:
            statuses[0] += 1
        finally:
            connection.close()
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(HEALTH_EVERY_S)
    said.put((HEALTH, (statuses, slowest)))


def abuse(port: int, kind: str, body: bytes | None, stop, said) -> None:
    """Send the kind's request again and again until stop; then (kind, (what came back counted, the slowest))."""
    statuses, slowest, turn = Counter(), 0.0, 0
    while not stop.is_set():
        if body is None:
            hang_up(port, stream=turn % 2 == 1)
            statuses["hung up"] += 1
        else:
            status, seconds = post(port, body, timeout=120)
            statuses[status] += 1
            slowest = max(slowest, seconds)
        turn += 1
    said.put((kind, (statuses, slowest)))


def per_rank(rounds: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """Rounds of (status, seconds) as one: for each rank (k-th fastest), the median of the rounds' k-th times, and
    200 only where every round's k-th request was answered."""
    ranked = [sorted(results, key=lambda result: result[1]) for results in rounds]
    merged = []
    for answers in zip(*ranked):
        times = sorted(seconds for _, seconds in answers)
        failed = [status for status, _ in answers if status != 200]
        merged.append((failed[0] if failed else 200, times[len(times) // 2]))
    return merged


def merge_seen(seen: dict, more: dict) -> dict:
    """Each abusive kind's answers counted over rounds, and its slowest."""
    return {kind: (seen.get(kind, (Counter(), 0.0))[0] + statuses, max(seen.get(kind, (Counter(), 0.0))[1], slowest))
            for kind, (statuses, slowest) in more.items()}


def normal_round(port: int, body: bytes, count: int) -> list[tuple[int, float]]:
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda _: post(port, body), range(count)))


def rank_ratios(alone: list[float], beside: list[float]) -> list[float]:
    """Each time beside the abusers over the time of the same rank alone, fastest first."""
    return [b / a for a, b in zip(sorted(alone), sorted(beside))]


def worst_rank(alone: list[tuple[int, float]], beside: list[tuple[int, float]]) -> tuple[int, float, float, float]:
    """(rank from 1 = fastest, its time alone, beside, the ratio) where beside is slowest against alone."""
    ratios = rank_ratios([s for _, s in alone], [s for _, s in beside])
    rank = max(range(len(ratios)), key=ratios.__getitem__)
    return rank + 1, sorted(s for _, s in alone)[rank], sorted(s for _, s in beside)[rank], ratios[rank]


def rows(rounds: dict[str, list[tuple[int, float]]], single: float) -> list[tuple]:
    """rounds: the normal requests' (status, seconds) by what ran beside them, the first alone."""
    alone = next(iter(rounds.values()))

    def row(name, results):
        times = sorted(seconds for _, seconds in results)
        answered = sum(status == 200 for status, _ in results)
        rank, was, now, ratio = worst_rank(alone, results)
        return (name, f"{answered} of {len(results)}", f"{times[len(times) // 2]:.2f} s", f"{times[-1]:.2f} s",
                f"{times[-1] / max(s for _, s in alone):.2f}", "-" if results is alone else
                f"{ratio:.2f} (answer {rank}: {was:.2f} s -> {now:.2f} s)")

    return [("one request, nothing else", "1 of 1", f"{single:.2f} s", f"{single:.2f} s", "-", "-"),
            *(row(name, results) for name, results in rounds.items())]


def abuse_rows(seen: dict) -> list[tuple]:
    def said(statuses: Counter) -> str:
        return ", ".join(f"{status} x {n}" for status, n in sorted(statuses.items(), key=str))

    return [(kind, sum(statuses.values()), said(statuses), f"{slowest:.2f} s" if slowest else "-")
            for kind, (statuses, slowest) in seen.items()]


def verdict(alone: list[tuple[int, float]], beside: list[tuple[int, float]], which: str) -> str:
    answered = all(status == 200 for status, _ in beside)
    rank, was, now, worst = worst_rank(alone, beside)
    ratios = rank_ratios([s for _, s in alone], [s for _, s in beside])
    return (f"Beside {which}: every normal request answered: {'yes' if answered else 'no'}; the one slowest "
            f"against its rank alone, answer {rank}, {worst:.2f} x ({was:.2f} s -> {now:.2f} s; goal <= "
            f"{GOAL_RATIO:g} x: {goal(answered and worst <= GOAL_RATIO)}); answers over {GOAL_RATIO:g} x their rank "
            f"alone: {sum(ratio > GOAL_RATIO for ratio in ratios)} of {len(ratios)}; the last answer "
            f"{max(s for _, s in beside) / max(s for _, s in alone):.2f} x the last alone.")


def long_requests_note() -> str:
    """Why the round with the long requests is not held to the goal."""
    return ("The long requests are a different case: they are valid, and transformers serve generates a vision "
            "model's requests one at a time (its continuous batching takes text models only), so each holds the "
            f"engine, and every request behind it, until it ends or its hang-up cancels it: up to {HANG_UP_S:g} s "
            "here. The large valid request no longer holds it: the front shrinks its images to the size the model "
            "takes (serving/fit.py) before the engine sees them.")


def health_verdict(seen: dict) -> str:
    statuses, slowest = seen[HEALTH]
    answered = statuses.get(200, 0) == sum(statuses.values())
    return (f"/health, asked every {HEALTH_EVERY_S:g} s beside all of them: {sum(statuses.values())} probes, "
            f"{statuses.get(200, 0)} answered 200, the slowest in {slowest:.2f} s (goal < {HEALTH_GOAL_S:g} s each: "
            f"{goal(answered and slowest < HEALTH_GOAL_S)}).")


def said(found: dict) -> str:
    """The figures as JSON (status counts under string keys), kept beside the run's logs."""
    seen = {kind: {"statuses": {str(status): n for status, n in statuses.items()}, "slowest_s": slowest}
            for kind, (statuses, slowest) in found["seen"].items()}
    return json.dumps({**found, "seen": seen})


def serving(model: Path, work: Path) -> tuple[subprocess.Popen, int]:
    from vlmgrpo.processes import free_port, wait_for_health

    port = free_port()
    with open(work / "serve.log", "w") as log:
        server = subprocess.Popen([*VLMGRPO, "serve", "--model", str(model), "--served-model-name", MODEL,
                                   "--port", str(port), "--allowed-media-domains", "127.0.0.1"], stdout=log,
                                  stderr=subprocess.STDOUT)
    if not wait_for_health(f"http://127.0.0.1:{port}/health", 600, lambda: server.poll() is None):
        server.kill()
        raise RuntimeError(f"vlmgrpo serve did not get ready ({server.poll()}); log {work / 'serve.log'}")
    return server, port


def measure(model: Path, work: Path, count: int = NORMAL, rounds: int = ROUNDS) -> dict:
    secret = work / "secret.png"
    secret.write_bytes(base64.b64decode(png_url((32, 32)).split(",", 1)[1]))
    bodies = abusive_bodies(secret, "http://127.0.0.1:9/x.png", png_url((12_000, 12_000), "1"),
                            animated_gif((2048, 2048), 100))
    body, large = normal_body(png_url((84, 84))), large_images_body()
    server, port = serving(model, work)
    try:
        post(port, body)  # the first request warms the engine up: not measured
        single = post(port, body)[1]
        alone, but_long, beside, seen = [], [], [], {}
        for _ in range(rounds):  # interleaved, so that a slow minute of the machine falls on all three alike
            alone.append(normal_round(port, body, count))
            but_long.append(abusing(port, {**bodies, LARGE: large}, count, body)[0])
            results, more = abusing(port, {**bodies, LARGE: large, HANGING_UP: None}, count, body)
            beside.append(results)
            seen = merge_seen(seen, more)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    return {"single": single, "alone": per_rank(alone), "but_long": per_rank(but_long), "beside": per_rank(beside),
            "seen": seen, "rounds": rounds}


def section(work: Path, count: int = NORMAL) -> str:
    run([*VLMGRPO, "make-tiny", "--out", str(work / "tiny"), "--rows", "8"])
    found = measure(work / "tiny" / "model", work, count)
    (work / "serve_abuse.json").write_text(said(found))
    kinds = len(found["seen"]) - 1  # the abusive kinds, the health probe aside; two send valid requests
    but_long = f"the {kinds - 1} kinds but the long requests"
    return ("## 17. Serving beside abusive clients (`vlmgrpo serve`, issue 45)\n\n"
            f"The tiny model served by `vlmgrpo serve` (transformers serve, CPU). {count} normal requests at once "
            f"(an 84 x 84 image and a question, greedy, {TOKENS} tokens each), alone and then with one client of "
            f"each abusive kind below sending its request again and again beside them: the {kinds - 2} the server "
            f"refuses and the large valid one, then all {kinds}, the long requests hung up after {HANG_UP_S:g} s "
            "too, and a probe of /health. "
            "The engine answers one request at a time: each answer is compared with the answer of the same rank "
            "alone (the k-th fastest with the k-th fastest). "
            f"{found['rounds']} rounds of the three, interleaved; each rank's time is the median of its rounds' "
            "(answered: every round's request of that rank).\n\n"
            + table(("normal requests", "answered", "median", "slowest", "slowest / slowest alone",
                     "worst answer / same rank alone"),
                    rows({f"{count} at once": found["alone"], f"{count} at once, {but_long} beside":
                          found["but_long"], f"{count} at once, all {kinds} beside": found["beside"]}, found["single"]))
            + "\n\n" + verdict(found["alone"], found["but_long"], but_long) + "\n\n"
            + verdict(found["alone"], found["beside"], f"all {kinds}, the long requests too") + " "
            + long_requests_note()
            + "\n\n" + health_verdict(found["seen"])
            + "\n\nThe abusive clients, while the normal "
            f"requests of the rounds beside all {kinds} ran:\n\n"
            + table(("abusive client", "requests", "answers (status x count)", "slowest answer"),
                    abuse_rows(found["seen"])))


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    print(section(target, int(sys.argv[2]) if len(sys.argv) > 2 else NORMAL))
