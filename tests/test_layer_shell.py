"""The layer shell (templates/layer-shell.sh), the SHELL of every RUN step of imagegen's layers, run in the base image
as a step runs it: the command's exit status is the step's; what the command wrote, and the folders above it, get the
one fixed time; uv's cache record goes with its RECORD line; the command sees SOURCE_DATE_EPOCH and a fixed hash seed.
Bench section 19 shows what it is for: two builds of the cpu image, one digest."""

from __future__ import annotations

import subprocess
import time

from imagegen.render.contexts import LAYER_FILE_TIME, LAYER_SHELL, environment, write_files
from tests.helpers import REPO

DIST_INFO = "/opt/venv/lib/python3.11/site-packages/x-1.dist-info"


def test_a_step_s_files_and_their_folders_get_the_fixed_time_and_its_status_stays(local_base_image, tmp_path):
    shell = tmp_path / "layer-shell"
    shell.write_text(environment(REPO / "templates").get_template(LAYER_SHELL).render(file_time=LAYER_FILE_TIME))
    shell.chmod(0o755)
    step = (f"mkdir -p {DIST_INFO} && echo {{}} > {DIST_INFO}/uv_cache.json && printf "
            f"'x-1.dist-info/METADATA,sha256=a,1\\nx-1.dist-info/uv_cache.json,sha256=b,2\\n' > {DIST_INFO}/RECORD "
            "&& echo \"$SOURCE_DATE_EPOCH $PYTHONHASHSEED\" && exit 3")
    script = (f"sleep 1; bash -o pipefail /layer-shell \"$STEP\"; echo status=$?; "
              f"stat -c '%Y %n' /opt /opt/venv {DIST_INFO}/RECORD /etc; cat {DIST_INFO}/RECORD; ls {DIST_INFO}")
    done = subprocess.run(["docker", "run", "--rm", "-e", f"STEP={step}", "-v", f"{shell}:/layer-shell:ro",
                           local_base_image, "bash", "-c", script], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert lines[0] == f"{LAYER_FILE_TIME} 0" and lines[1] == "status=3", done.stdout + done.stderr
    times = dict(reversed(line.split(" ", 1)) for line in lines[2:6])
    assert {times[path] for path in ("/opt", "/opt/venv", f"{DIST_INFO}/RECORD")} == {str(LAYER_FILE_TIME)}
    assert times["/etc"] != str(LAYER_FILE_TIME)  # what the step did not write keeps its time
    assert lines[6:] == ["x-1.dist-info/METADATA,sha256=a,1", "RECORD"]


def test_a_context_s_files_keep_the_time_they_are_written(tmp_path):
    """BuildKit sends again only the files of a context whose size or time changed: a Dockerfile given a fixed time
    went unsent when its parent's tag changed at the same length, and the layer was built FROM the old parent."""
    started = time.time() - 1
    write_files(tmp_path, {"Dockerfile": b"FROM a\n", "sub/file": b"x"})
    assert all(path.stat().st_mtime >= started for path in (tmp_path / "Dockerfile", tmp_path / "sub" / "file"))
