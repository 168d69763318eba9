"""build -> test -> push on the real engine and a real registry, with the cpu image built
FROM a locally made Debian base, torch from a local wheelhouse and the host CA mounted."""

import base64
import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from imagegen.engine import containers
from imagegen.engine.registry.http import Credentials
from imagegen.engine.registry.oci import referrers

from tests.conftest import CPU_BUILD_ARGS, WHEELHOUSE, imagegen, read_report
from tests.docker_env import build_cache_made_inside, unique_name
from tests.helpers import REPO, image_named, real_locked_matrix


@pytest.fixture
def own_repository(docker_client):
    """A repository for the images a test builds from a copy of the matrix: outside this git checkout
    they carry no revision label, so under the real repository they would take the session's tags.
    Their tags are removed afterwards; the layers are the session's and stay."""
    repository = f"imagegen-test/{unique_name('own')}/vlm-grpo"
    yield repository
    for image in docker_client.images.list(name=repository):
        for tag in image.tags:
            docker_client.images.remove(tag)


def test_build_reports_every_layer_size_and_id(cpu_image):
    report = cpu_image["report"]
    assert report["status"] == "built" and report["image_id"].startswith("sha256:")
    assert [layer["layer"] for layer in report["layers"]] == ["base", "framework", "trainer"]
    assert report["size_bytes"] > 1e9
    assert re.search(r":0\.1\.0-torch2\.14\.1-cu130-cudnn9-py3\.11-debian12-[0-9a-f]{12}$", report["ref"])
    labels = containers.image_facts(cpu_image["id"])["labels"]
    revision, created = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%H %cI"], capture_output=True,
                                       text=True, check=True).stdout.split()
    assert labels["org.opencontainers.image.revision"] == revision
    assert labels["org.opencontainers.image.created"] == created  # the source's time: rebuilds stay identical
    assert labels["io.imagegen.builder"].startswith("imagegen 0.1.0 with docker ")


def test_build_writes_a_cyclonedx_sbom_of_what_the_image_holds(cpu_image):
    report = cpu_image["report"]
    path = Path(report["sbom_file"])
    assert path == cpu_image["work"] / "sbom" / "cpu.cdx.json"
    text = path.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    document = json.loads(text)
    components = {c["name"]: c for c in document["components"]}
    assert components["torch"]["version"] == "2.14.1" and components["torch"]["purl"] == "pkg:pypi/torch@2.14.1"
    assert components["torch"]["licenses"]  # from the distribution's own metadata
    assert components["python3"]["purl"].startswith("pkg:deb/debian/python3@3.11")
    assert "vlmgrpo" in components and "dpkg" in components
    assert report["sbom_components"] == {
        "python": sum(c["purl"].startswith("pkg:pypi/") for c in document["components"]),
        "os": sum(c["purl"].startswith("pkg:deb/") for c in document["components"])}
    image = document["metadata"]["component"]
    assert (image["type"], image["bom-ref"]) == ("container", cpu_image["id"])


def test_a_second_build_comes_entirely_from_cache(cpu_image, tmp_path):
    result = imagegen("build", *CPU_BUILD_ARGS, "--context-dir", str(tmp_path / "contexts"),
                      "--report", str(tmp_path / "build.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = read_report(tmp_path / "build.json")
    assert report["image_id"] == cpu_image["id"]
    for layer in report["layers"]:
        assert layer["total_steps"] > 0 and layer["cached_steps"] == layer["total_steps"], layer


def test_no_ca_bundle_installer_settings_or_wheel_is_in_any_layer(cpu_image, ca_bundle, local_base_image):
    base_layers = len(containers.layer_file_paths(local_base_image))
    ours = [path for layer in containers.layer_file_paths(cpu_image["id"])[base_layers:] for path in layer.paths]
    assert any(path.startswith("/opt/venv/lib/python3.11/site-packages/torch/") for path in ours)
    wheels = {wheel.name for wheel in WHEELHOUSE.glob("*.whl")}
    leaked = [path for path in ours if path.rsplit("/", 1)[-1] in wheels or "ca-bundle" in path
              or path.startswith(("/wheelhouse/", "/run/secrets/", "/root/.cache/pip/", "/root/.cache/uv/",
                                  "/var/cache/apt/archives/", "/var/lib/apt/lists/"))
              or path in ("/etc/pip.conf", "/etc/uv/uv.toml")]
    assert leaked == []
    history = " ".join(layer["created_by"] for layer in containers.image_facts(cpu_image["id"])["layers"])
    assert "BEGIN CERTIFICATE" not in history and str(ca_bundle) not in history


def test_the_image_passes_its_checks_with_the_gpu_ones_skipped(cpu_image, tmp_path):
    result = imagegen("test", "--image", "cpu", "--platform", "linux/amd64", "--skip-train", "--report", str(tmp_path / "test.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = read_report(tmp_path / "test.json")
    checks = {check["name"]: check for check in report["checks"]}
    assert report["image_id"] == cpu_image["id"] and report["gpu_runtime"] is False
    assert checks["gpu.runtime"]["status"] == "skip" and "no GPU runtime" in checks["gpu.runtime"]["detail"]
    assert checks["selftest.gpu.bf16_matmul"]["status"] == "skip"
    for name in ("tag.matches_inside", "labels.match_matrix", "inside.torch", "inside.cudnn", "user.nonroot",
                 "version.torch", "version.nccl", "version.python", "command.train_help", "inside.jupyterlab",
                 "selftest.lab.server", "selftest.lab.kernel"):
        assert checks[name]["status"] == "pass", checks[name]
    # each version judged once, by the image's inventory, and reported by the host: the selftest is asked for none
    assert checks["selftest.version"]["status"] == "skip" and "--skip-versions" in checks["selftest.version"]["detail"]
    assert not [name for name in checks if name.startswith("selftest.version.") and checks[name]["status"] != "skip"]


def test_require_gpu_turns_the_skips_into_failures(cpu_image, tmp_path):
    result = imagegen("test", cpu_image["ref"], "--require-gpu", "--skip-train",
                      "--report", str(tmp_path / "test.json"))
    assert result.returncode == 1
    (report,) = read_report(tmp_path / "test.json")
    failed = {check["name"] for check in report["checks"] if check["status"] == "fail"}
    assert {"gpu.runtime", "selftest.gpu.cuda_available"} <= failed


def broken_matrix(tmp_path, repository: str, after_cpu: tuple[str, ...] = ()):
    """The locked images plus copies of cpu whose locks hold a wrong hash for one package of the stack
    (what the installer meets when a file, or the lock, was tampered with): "broken" first, the ones named in
    after_cpu after the cpu image."""
    def add_broken(data):
        data["repository"] = repository
        cpu = image_named(data, "cpu")
        for name in ("broken", *after_cpu):
            data["images"].insert(0 if name == "broken" else len(data["images"]), {**cpu, "name": name})

    path = real_locked_matrix(tmp_path, add_broken)
    lock = json.loads((tmp_path / "locks" / "cpu.json").read_text())
    # peft: a component, so always in the stack's step (tzdata, chosen before, moved to the extras' step)
    peft = next(package for package in lock["platforms"]["linux/amd64"]["packages"] if package["name"] == "peft")
    peft["hashes"] = ["sha256:" + "0" * 64]
    for name in ("broken", *after_cpu):
        (tmp_path / "locks" / f"{name}.json").write_text(json.dumps({**lock, "image": name}))
    return path


def test_keep_going_builds_the_rest_after_a_broken_image(cpu_image, own_repository, tmp_path):
    matrix = broken_matrix(tmp_path, own_repository)
    result = imagegen("build", "--matrix", str(matrix), "--trainer", str(REPO / "trainer"),
                      "--image", "broken", *CPU_BUILD_ARGS, "--keep-going",
                      "--context-dir", str(tmp_path / "contexts"), "--report", str(tmp_path / "build.json"))
    assert result.returncode == 1
    broken, cpu = read_report(tmp_path / "build.json")
    assert (broken["status"], broken["failed_layer"]) == ("failed", "framework")
    assert "uv pip install" in broken["failed_step"] and "requirements/stack.txt" in broken["failed_step"]
    assert any("Hash mismatch for `peft==" in line for line in broken["log_tail"]), broken["log_tail"]
    assert "broken failed in layer framework" in result.stderr
    assert cpu["status"] == "built"


def test_without_keep_going_every_image_after_a_failure_is_skipped_unbuilt(cpu_image, own_repository, tmp_path):
    matrix = broken_matrix(tmp_path, own_repository, after_cpu=("broken-too",))
    result = imagegen("build", "--matrix", str(matrix), "--trainer", str(REPO / "trainer"), "--image", "broken",
                      *CPU_BUILD_ARGS, "--image", "broken-too",
                      "--context-dir", str(tmp_path / "contexts"), "--report", str(tmp_path / "build.json"))
    assert result.returncode == 1
    broken, cpu, broken_too = read_report(tmp_path / "build.json")
    assert broken["status"] == "failed"
    assert [(r["image"], r["status"], r["layers"]) for r in (cpu, broken_too)] == [
        ("cpu", "skipped", []), ("broken-too", "skipped", [])]
    assert "[cpu " not in result.stderr and "[broken-too " not in result.stderr  # no layer of theirs was built


def test_an_image_over_its_max_size_fails_with_its_ten_largest_files(cpu_image, own_repository, tmp_path):
    def over_budget(data):
        data["repository"] = own_repository
        image_named(data, "cpu").update(max_size="1GB")

    matrix = real_locked_matrix(tmp_path, over_budget)
    result = imagegen("build", "--matrix", str(matrix), "--trainer", str(REPO / "trainer"), *CPU_BUILD_ARGS,
                      "--context-dir", str(tmp_path / "contexts"), "--report", str(tmp_path / "build.json"))
    assert result.returncode == 1
    (report,) = read_report(tmp_path / "build.json")
    assert (report["status"], report["max_size"]) == ("failed", 10**9)
    assert report["failed_step"].startswith("the image is 6.") and "over its max_size 1 GB" in report["failed_step"]
    sizes = [entry["bytes"] for entry in report["largest_paths"]]
    assert len(sizes) == 10 and sizes == sorted(sizes, reverse=True) and sizes[-1] > 10**8
    assert all(entry["path"].startswith("/opt/venv/lib/python3.11/site-packages/") for entry in report["largest_paths"])
    assert "cpu failed: the image is 6." in result.stderr and "its 10 largest files:" in result.stderr
    assert report["largest_paths"][0]["path"] in result.stderr


def test_push_to_a_private_registry_publishes_both_platforms_under_one_tag_with_their_sboms(
        cpu_image, cpu_arm64_image, cpu_published, auth_registry):
    """The cpu image for linux/amd64 and linux/arm64: each platform's image with its SBOM, then one index
    under the version tag and the alias, from which `docker pull` takes the platform it asks for."""
    tmp_path, push, anonymous, result = (cpu_published[key] for key in ("work", "push", "anonymous", "result"))
    assert anonymous.returncode == 1
    refused = read_report(tmp_path / "anonymous.json")[0]
    assert refused["status"] == "failed" and f"log in with `docker login {auth_registry.host}`" in refused["reason"]
    assert result.returncode == 0, result.stderr[-3000:]
    amd64, arm64, index = read_report(tmp_path / "push.json")
    version_tag = cpu_image["ref"].rsplit(":", 1)[1]
    assert [(r["platform"], r["status"], r["pushed_tags"]) for r in (amd64, arm64, index)] == [
        ("linux/amd64", "pushed", [f"{version_tag}-amd64"]), ("linux/arm64", "pushed", [f"{version_tag}-arm64"]),
        ("index", "pushed", [version_tag, "cpu"])]
    assert [r["compression"] for r in (amd64, arm64)] == ["none", "none"]
    for platform_push, key in ((amd64, "cpu"), (arm64, "cpu-arm64")):
        assert_sbom_refers_to(platform_push, auth_registry)
        assert (tmp_path / "sbom" / f"{key}.cdx.json").is_file()  # the document that was attached

    listed = index_of(auth_registry, version_tag)
    assert {(m["platform"]["os"], m["platform"]["architecture"]): m["digest"] for m in listed["manifests"]} == {
        ("linux", "amd64"): amd64["digest"], ("linux", "arm64"): arm64["digest"]}
    # What `docker pull --platform P` takes: the index's manifest for P, whose config is the image: its digest is the
    # image id the engine gives the built image (read from the registry; pulling 6 GB back twice took minutes).
    for (os_name, architecture), digest in {(m["platform"]["os"], m["platform"]["architecture"]): m["digest"]
                                            for m in listed["manifests"]}.items():
        wanted = cpu_image["id"] if architecture == "amd64" else cpu_arm64_image["id"]
        assert manifest_of(auth_registry, digest)["config"]["digest"] == wanted, (os_name, architecture)

    again = imagegen(*push, "--registry-user", auth_registry.username, "--registry-password-stdin",
                     "--report", str(tmp_path / "push2.json"), stdin=auth_registry.password)
    assert again.returncode == 0, again.stderr[-3000:]
    second = read_report(tmp_path / "push2.json")
    assert [r["already_published"] for r in second] == [[f"{version_tag}-amd64"], [f"{version_tag}-arm64"],
                                                         [version_tag]]
    assert all(r["sbom_digest"] is None for r in second)  # attached once, when the version was published
    assert "(already published)" in again.stderr


def assert_sbom_refers_to(pushed: dict, auth_registry) -> None:
    """distribution 2.8 has no referrers API: the SBOM is listed under the OCI fallback tag sha256-<hex>."""
    login = Credentials(auth_registry.username, auth_registry.password)
    assert pushed["sbom_found_by"] == f"the referrers tag {pushed['digest'].replace(':', '-')}"
    found = {a["artifactType"]: a["digest"] for a in referrers(auth_registry.host, "vlm-grpo", pushed["digest"], login)}
    assert found == {"application/vnd.cyclonedx+json": pushed["sbom_digest"],
                     "application/vnd.in-toto+json": pushed["provenance_digest"]}


def index_of(auth_registry, tag: str) -> dict:
    """The manifest list a tag holds, read with the registry's API as docker pull reads it."""
    return manifest_of(auth_registry, tag, "application/vnd.docker.distribution.manifest.list.v2+json, "
                                           "application/vnd.oci.image.index.v1+json")


def manifest_of(auth_registry, reference: str, accept: str = "application/vnd.docker.distribution.manifest.v2+json, "
                                                             "application/vnd.oci.image.manifest.v1+json") -> dict:
    """A manifest (or index) by tag or digest, read with the registry's API as docker pull reads it."""
    request = urllib.request.Request(
        f"http://{auth_registry.host}/v2/vlm-grpo/manifests/{reference}",
        headers={"Accept": accept,
                 "Authorization": "Basic " + base64.b64encode(
                     f"{auth_registry.username}:{auth_registry.password}".encode()).decode()})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_a_rebuild_of_the_same_inputs_on_a_clean_engine_is_already_published(cpu_image, cpu_published, auth_registry,
                                                                               docker_client, own_repository, tmp_path):
    """Every step runs again (--no-cache): a new image id, the same inputs and so the same version tag; the
    registry already holds that tag (the session's cpu image, pushed above: pushing 6 GB once more for this test
    took minutes), so the push says so and exits 0. The rebuild goes under a repository of its own here, so the
    session's cpu image keeps its tags; both push to <registry>/vlm-grpo."""
    assert cpu_published["result"].returncode == 0, cpu_published["result"].stderr[-2000:]
    (first,) = [r for r in read_report(cpu_published["work"] / "push.json") if r["platform"] == "linux/amd64"]
    matrix = real_locked_matrix(tmp_path, lambda d: d.update(repository=own_repository))
    with build_cache_made_inside(docker_client):
        rebuilt = imagegen("build", "--matrix", str(matrix), *CPU_BUILD_ARGS, "--no-cache", "--test", "--skip-train",
                           "--push", "--registry", auth_registry.host, "--registry-user", auth_registry.username,
                           "--registry-password-stdin", "--context-dir", str(tmp_path / "contexts"),
                           "--report", str(tmp_path / "build.json"), stdin=auth_registry.password + "\n")
        (build,) = read_report(tmp_path / "build.json")
        try:
            assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
            (pushed,) = read_report(tmp_path / "push.json")
            assert build["ref"].rsplit(":", 1)[1] == cpu_image["ref"].rsplit(":", 1)[1]
            assert build["image_id"] != cpu_image["id"]
            # The cpu image is built for two platforms: this one goes under its version tag with its arch.
            assert pushed["status"] == "pushed"
            assert pushed["already_published"] == [build["ref"].rsplit(":", 1)[1] + "-amd64"]
            assert pushed["digest"] == first["digest"]
            assert "(already published)" in rebuilt.stderr
        finally:  # the rebuild's images are this test's own: gigabytes, each layer built anew
            made = {layer["image_id"] for layer in build["layers"]} - {layer["image_id"] for layer in
                                                                       cpu_image["report"]["layers"]}
            for image_id in sorted(made - {None}):
                docker_client.images.remove(image_id, force=True)


def test_push_refuses_a_version_tag_that_holds_someone_elses_image(cpu_image, registry, docker_client,
                                                                   local_base_image, tmp_path):
    """The cpu image is built for two platforms, so its linux/amd64 image goes under <version>-amd64."""
    namespace = f"{registry}/{unique_name('someone')}"
    platform_tag = cpu_image["ref"].rsplit(":", 1)[1] + "-amd64"
    other = docker_client.images.get(local_base_image)
    other.tag(f"{namespace}/vlm-grpo", platform_tag)
    try:
        for line in docker_client.images.push(f"{namespace}/vlm-grpo", platform_tag, stream=True, decode=True):
            assert "error" not in line, line
    finally:
        docker_client.images.remove(f"{namespace}/vlm-grpo:{platform_tag}")
    result = imagegen("push", "--image", "cpu", "--platform", "linux/amd64", "--registry", namespace, "--skip-tests",
                      "--report", str(tmp_path / "push.json"))
    assert result.returncode == 1
    (report,) = read_report(tmp_path / "push.json")
    assert report["status"] == "refused" and report["pushed_tags"] == []
    assert "immutable" in report["reason"] and "--force" in report["reason"]


def test_push_refuses_an_untested_image(cpu_image, registry, tmp_path):
    empty = tmp_path / "test.json"
    empty.write_text(json.dumps({"kind": "test", "images": []}))
    result = imagegen("push", "--image", "cpu", "--platform", "linux/amd64", "--registry", registry, "--test-report", str(empty),
                      "--report", str(tmp_path / "push.json"))
    assert result.returncode == 1
    (report,) = read_report(tmp_path / "push.json")
    assert report["status"] == "not pushed" and "no test result" in report["reason"]


def test_build_without_a_selection_is_one_clear_error():
    result = imagegen("build")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr == "error: choose what to build: --cuda X.Y, --torch X.Y, --python X.Y, --image NAME or --all\n"


def test_a_missing_ca_bundle_is_one_clear_error(tmp_path):
    result = imagegen("build", "--image", "cpu", "--ca-bundle", str(tmp_path / "nope.pem"))
    assert result.returncode == 1 and result.stderr.startswith("error: --ca-bundle") and "Traceback" not in result.stderr
