"""The Kubernetes manifests of examples/launch/kubernetes loaded into the Kubeflow SDKs' own models, pinned:
kubeflow-trainer-api 2.3.0 (Trainer v2: TrainJob, ClusterTrainingRuntime) and kubeflow-training 1.9.4 (the training
operator v1: PyTorchJob), installed from the index into a folder of their own, not into the test environment.

A model ignores a key it does not know, so each manifest goes through the model and back: a key the round trip drops
is a misspelled or misplaced field, and a value of the wrong type fails the model itself. What runs them (the pods'
variables, the launch) is trainer/tests/test_operator_env.py's; no Kubernetes API server runs here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from uv import find_uv_bin

from tests.helpers import REPO

PINNED = ["kubeflow-trainer-api==2.3.0", "kubeflow-training==1.9.4"]
MANIFESTS = REPO / "examples" / "launch" / "kubernetes"

CHECK = r'''
import json, sys, yaml
from kubeflow_trainer_api import models as trainer_v2
from kubeflow.training.api_client import ApiClient

def same(a, b):
    if isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return str(a) == str(b)

def dropped(original, kept, path=""):
    if isinstance(original, dict):
        if not isinstance(kept, dict):
            return [f"{path}: {original!r} became {kept!r}"]
        return [problem for key, value in original.items() for problem in (
            [f"{path}.{key}: not a field of the model"] if key not in kept else dropped(value, kept[key], f"{path}.{key}"))]
    if isinstance(original, list):
        if not isinstance(kept, list) or len(kept) != len(original):
            return [f"{path}: {original!r} became {kept!r}"]
        return [problem for i, (a, b) in enumerate(zip(original, kept)) for problem in dropped(a, b, f"{path}[{i}]")]
    return [] if same(original, kept) else [f"{path}: {original!r} became {kept!r}"]

client = ApiClient()
models = {"TrainJob": trainer_v2.TrainerV1alpha1TrainJob,
          "ClusterTrainingRuntime": trainer_v2.TrainerV1alpha1ClusterTrainingRuntime}
report = []
for document in yaml.safe_load_all(sys.stdin.read()):
    if document["kind"] == "PyTorchJob":
        kept = client.sanitize_for_serialization(client._ApiClient__deserialize(document, "KubeflowOrgV1PyTorchJob"))
    else:
        kept = models[document["kind"]].from_dict(document).to_dict()
    report.append({"kind": document["kind"], "apiVersion": document["apiVersion"], "dropped": dropped(document, kept)})
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def sdk(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("kubeflow-sdk")
    result = subprocess.run([find_uv_bin(), "pip", "install", "--python", sys.executable, "--target", str(site),
                             *PINNED], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return site


def check(sdk: Path, text: str):
    result = subprocess.run([sys.executable, "-c", CHECK], input=text, capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(sdk), "PATH": "/usr/bin:/bin"})
    if result.returncode:
        return result.stderr
    return json.loads(result.stdout)


@pytest.mark.network
@pytest.mark.parametrize("name, kinds", [
    ("trainjob.yaml", [("TrainJob", "trainer.kubeflow.org/v1alpha1")]),
    ("clustertrainingruntime.yaml", [("ClusterTrainingRuntime", "trainer.kubeflow.org/v1alpha1")]),
    ("pytorchjob.yaml", [("PyTorchJob", "kubeflow.org/v1")]),
])
def test_each_manifest_is_what_the_kubeflow_sdk_models_read(sdk, name, kinds):
    report = check(sdk, (MANIFESTS / name).read_text())
    assert [(entry["kind"], entry["apiVersion"]) for entry in report] == kinds
    assert [entry["dropped"] for entry in report] == [[]] * len(kinds)


@pytest.mark.network
def test_a_misspelled_field_and_a_wrong_type_are_caught(sdk):
    runtime = yaml.safe_load((MANIFESTS / "clustertrainingruntime.yaml").read_text())
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["restartPolicyy"] = pod.pop("restartPolicy")
    (entry,) = check(sdk, yaml.safe_dump(runtime))
    assert entry["dropped"] == [".spec.template.spec.replicatedJobs[0].template.spec.template.spec.restartPolicyy: "
                                "not a field of the model"]
    job = yaml.safe_load((MANIFESTS / "trainjob.yaml").read_text())
    job["spec"]["trainer"]["numNodes"] = "two"
    failed = check(sdk, yaml.safe_dump(job))
    assert "1 validation error for TrainerV1alpha1Trainer" in failed and "numNodes" in failed


def test_the_manifests_give_shared_memory_probes_and_a_restart_policy():
    """What every pod needs, read without the SDK (the fast selection runs this)."""
    runtime = yaml.safe_load((MANIFESTS / "clustertrainingruntime.yaml").read_text())
    job_set = runtime["spec"]["template"]["spec"]
    pytorchjob = yaml.safe_load((MANIFESTS / "pytorchjob.yaml").read_text())
    pods = [job_set["replicatedJobs"][0]["template"]["spec"]["template"]["spec"],
            *[spec["template"]["spec"] for spec in pytorchjob["spec"]["pytorchReplicaSpecs"].values()]]
    for pod in pods:
        (container,) = pod["containers"]
        shm = {volume["name"]: volume for volume in pod["volumes"]}["dshm"]
        assert shm["emptyDir"]["medium"] == "Memory"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert container["startupProbe"]["exec"] and container["livenessProbe"]["exec"]
        assert pod["terminationGracePeriodSeconds"] >= 600  # a step and a checkpoint after SIGTERM
        assert not {"--nnodes", "--node-rank", "--master-addr"} & set(container["args"])  # from the variables
    assert job_set["failurePolicy"]["maxRestarts"] > 0 and pods[0]["restartPolicy"] == "Never"
    assert {spec["restartPolicy"] for spec in pytorchjob["spec"]["pytorchReplicaSpecs"].values()} == {"OnFailure"}
    job = yaml.safe_load((MANIFESTS / "trainjob.yaml").read_text())
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
