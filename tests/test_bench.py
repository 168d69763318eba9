"""The benchmark command works end to end on its quick sections (no image is built)."""

import json
import subprocess
import sys
from collections import Counter

import pytest

from tests.helpers import REPO


@pytest.mark.slow
def test_bench_writes_results_for_the_sections_that_build_no_image(tmp_path):
    results = tmp_path / "RESULTS.md"
    # 4.6 minutes on a quiet machine here; beside the Docker tests' builds in CI it passed 10 minutes once
    done = subprocess.run([sys.executable, "-m", "bench", "--only", "trainer", "render", "examples", "--steps", "2",
                           "--results", str(results)], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    text = results.read_text()
    for expected in ("## 3. Trainer overhead", "| vlmgrpo train |", "| GRPOTrainer directly |",
                     "## 4. Render", "| cpu |", "## 7. The tiny examples on a CPU", "| sft sft_tiny.yaml |", "| eval after (SFT then GRPO) |", "| one query (openai client) |",
                     "cores", "transformers", "docker engine"):
        assert expected in text, expected
    assert "## 1. Build cache" not in text and "## 2. Image size" not in text
    assert list(tmp_path.iterdir()) == [results]  # written atomically: no temporary file left behind


@pytest.mark.slow
def test_the_installer_comparison_builds_the_revisions_it_names():
    """Section 5 compares builds at two earlier commits with today's: each must be what its row says."""
    from bench.lock_install import BEFORE_LOCKS, LOCK_WITH_PIP

    def show(revision: str, path: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:{path}"], capture_output=True, text=True,
                              check=True).stdout

    assert "pip_install(" in show(BEFORE_LOCKS, "templates/framework.Dockerfile.j2")
    assert "locks" not in show(BEFORE_LOCKS, "").split()  # `git show REV:` lists the tree
    assert "locks/" in show(LOCK_WITH_PIP, "").split()
    assert "pip install --no-deps --require-hashes" in show(LOCK_WITH_PIP, "templates/_macros.j2")
    assert "uv pip install" not in show(LOCK_WITH_PIP, "templates/_macros.j2")
    assert "uv pip install" in (REPO / "templates" / "_macros.j2").read_text()


def test_unpack_seconds_sums_each_layers_span_from_the_engines_debug_log(tmp_path):
    """Section 14's engine figure: per layer, from dockerd's "Applying tar" to its "Applied tar" line (the lines as
    Docker 20.10 writes them with --debug), only after the given byte, a line of another layer ignored."""
    from bench.pulls import unpack_seconds

    def applying(stamp: str, layer: str) -> str:
        return (f'time="2026-12-04T00:06:{stamp}Z" level=debug msg="Applying tar in /root/overlay2/{layer}/diff" '
                f'storage-driver=overlay2\n')

    def applied(stamp: str, layer: str) -> str:
        return (f'time="2026-12-04T00:06:{stamp}Z" level=debug msg="Applied tar sha256:{"f" * 64} to {layer}, '
                f'size: 198899994"\n')

    first, second, other = "a" * 64, "b" * 64, "c" * 64
    earlier = applying("01.000000000", first) + applied("09.000000000", first)
    log = tmp_path / "dockerd.log"
    log.write_text(earlier + applying("32.850749928", first) + 'time="x" level=debug msg="Downloaded"\n'
                   + applied("42.382513407", first) + applying("42.386244319", second)
                   + applied("43.000000000", second) + applied("44.000000000", other))
    assert unpack_seconds(log, len(earlier)) == pytest.approx((42.382513407 - 32.850749928) + (43.0 - 42.386244319))
    assert unpack_seconds(log, log.stat().st_size) is None


def test_the_engines_section_reports_each_engine_against_gzip_on_its_own_and_on_docker_20_10():
    from bench import engines

    def tries(pull, step, version="26.1.5", go="go1.24.4"):
        return [{"pull_s": pull, "start_s": 0.5, "step_s": step, "version": version, "go": go}] * 2

    pulls = {("20.10", "gzip"): tries(80.0, 20.0, "20.10.24", "go1.19.8"), ("20.10", "none"): tries(60.0, 20.0),
             ("26", "gzip"): tries(50.0, 15.0), ("26", "zstd"): tries(40.0, 15.0), ("26", "none"): tries(30.0, 15.0)}
    layers = [("sha256:x", 10**9)]
    found = {"pulls": pulls, "pushed": {c: {"layers": layers} for c in ("gzip", "zstd", "none")}}
    by_row = {(row[1].split(" (")[0], row[2]): row for row in engines.rows("line", found)}
    assert by_row[("26", "none")][-2:] == ("0.60", "0.38")  # 30 s against 26's gzip 50 s and 20.10's gzip 80 s
    assert by_row[("26", "none")][7] == "**45.0**"
    assert by_row[("20.10", "gzip")][1] == "20.10 (20.10.24, go1.19.8)"
    line = engines.verdict("line", found)
    assert "none on 26" in line and "0.38 of the gzip pull on 20.10 (goal <= 0.6: met)" in line
    assert "pull + first step 45.0 s (goal <= 60 s: met)" in line
    assert json.loads(engines.said("line", found))["line"]["pulls"]["26 none"][0]["pull_s"] == 30.0


def test_the_serve_abuse_section_compares_each_answer_with_its_rank_alone_and_its_probes_are_the_issue_s(tmp_path):
    """Section 17's pure parts: the k-th fastest answer beside the abusers over the k-th fastest alone (which
    request waits longest is chance on an engine that answers one at a time), the verdict against 3 x, the abusers'
    table; and each abusive body is one the server's checks refuse with a 400 naming what it abuses."""
    from bench import serve_abuse
    from vlmgrpo.serving.requests import Limits, RequestProblem, check_chat_request

    alone = [(200, 1.0), (200, 2.0), (200, 3.0)]
    beside = [(200, 9.5), (200, 1.5), (200, 2.5)]  # the slowest alone (3.0) against the slowest beside (9.5)
    assert serve_abuse.rank_ratios([s for _, s in alone], [s for _, s in beside]) == [1.5, 1.25, 9.5 / 3]
    assert serve_abuse.worst_rank(alone, beside) == (3, 3.0, 9.5, 9.5 / 3)
    assert ("answer 3, 3.17 x (3.00 s -> 9.50 s; goal <= 3 x: **missed**); answers over 3 x their rank alone: 1 of 3; "
            "the last answer 3.17 x the last alone" in serve_abuse.verdict(alone, beside, "every kind"))
    same = serve_abuse.verdict(alone, alone, "the kinds but the long requests")
    assert same.startswith("Beside the kinds but the long requests: every normal request answered: yes")
    assert "answered: yes; the one slowest against its rank alone, answer 1, 1.00 x" in same
    assert "goal <= 3 x: met)" in same
    assert "answered: no" in serve_abuse.verdict(alone, [(503, 1.0), *alone[1:]], "every kind")
    rows = serve_abuse.rows({"alone": alone, "beside": beside}, 0.5)
    assert rows[0][2] == "0.50 s" and rows[1][1:] == ("3 of 3", "2.00 s", "3.00 s", "1.00", "-")
    assert rows[2][-2:] == ("3.17", "3.17 (answer 3: 3.00 s -> 9.50 s)")
    table = serve_abuse.abuse_rows({"seed 2**70": (Counter({400: 7}), 0.25), "hang": (Counter({"hung up": 3}), 0.0)})
    assert table == [("seed 2**70", 7, "400 x 7", "0.25 s"), ("hang", 3, "hung up x 3", "-")]
    found = {"single": 0.5, "alone": alone, "beside": beside, "seen": {"seed 2**70": (Counter({400: 7}), 0.25)}}
    assert json.loads(serve_abuse.said(found))["seen"]["seed 2**70"] == {"statuses": {"400": 7}, "slowest_s": 0.25}
    # rounds merged rank by rank: the median of the k-th fastest; a rank answered only where every round answered it
    merged = serve_abuse.per_rank([[(200, 3.0), (200, 1.0)], [(200, 0.5), (503, 4.0)], [(200, 2.0), (200, 9.0)]])
    assert merged == [(200, 1.0), (503, 4.0)]
    assert serve_abuse.merge_seen({"seed": (Counter({400: 2}), 0.5)}, {"seed": (Counter({400: 3}), 0.25)}) == {
        "seed": (Counter({400: 5}), 0.5)}

    secret = tmp_path / "secret.png"
    # the GIF's size aside (the bench's takes 8 s to encode), the same refusal: two frames are an animation
    bodies = serve_abuse.abusive_bodies(secret, "http://127.0.0.1:9/x.png", serve_abuse.png_url((12_000, 12_000), "1"),
                                        serve_abuse.animated_gif((64, 64), 2))
    says = {"input_image: a server file": "'input_image' is not accepted", "input_image: a loopback URL":
            "'input_image' is not accepted", "input_image: 144 megapixels": "'input_image' is not accepted",
            "chat_template_kwargs: a template, max_pixels": "'chat_template_kwargs' is not accepted",
            "input_text: 80k tokens": "'input_text' is not accepted", "JSON nested 100k deep": "nested too deeply",
            "seed 2**70": "'seed' must be a whole number",
            serve_abuse.GIF_KIND: "the image is animated"}
    assert set(bodies) == set(says)
    # the large valid one passes the checks, each image decoded: the load is the point (issue 53)
    assert check_chat_request(serve_abuse.large_images_body(), serve_abuse.MODEL, Limits())
    for kind, body in bodies.items():
        with pytest.raises(RequestProblem, match=says[kind]) as refused:
            check_chat_request(body, serve_abuse.MODEL, Limits())
        assert refused.value.status == 400, kind
    assert check_chat_request(serve_abuse.normal_body(serve_abuse.png_url((84, 84))), serve_abuse.MODEL, Limits())


def test_the_reproducibility_section_sorts_a_layer_s_paths_by_how_two_builds_differ():
    import io
    import tarfile

    from bench.reproducible import differences, listing

    def layer(files: dict[str, tuple[bytes, int]], compress: bool) -> io.BytesIO:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w:gz" if compress else "w") as tar:
            for name, (body, mtime) in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(body), mtime
                tar.addfile(info, io.BytesIO(body))
        raw.seek(0)
        return raw

    first = listing(layer({"a": (b"same", 1), "b": (b"one", 1), "c": (b"same", 1), "d": (b"x", 1)}, compress=True))
    second = listing(layer({"a": (b"same", 1), "b": (b"two", 1), "c": (b"same", 2), "e": (b"x", 1)}, compress=False))
    assert differences(first, second) == {"bytes": ["b"], "metadata": ["c"], "one only": ["d", "e"]}
    assert differences(first, first) == {"bytes": [], "metadata": [], "one only": []}
