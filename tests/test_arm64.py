"""linux/arm64 images on this x86_64 engine: built and checked under QEMU user emulation, as far as
emulation allows (importing torch crashes there; the versions are judged by the inventory, which imports nothing),
and refused with a clear line when misconfigured."""

from __future__ import annotations

from tests.conftest import imagegen

NATIVE_ONLY = "needs a native linux/arm64 host"


def test_the_cpu_image_builds_for_arm64_and_passes_every_check_emulation_can_run(cpu_arm64_image):
    report, test = cpu_arm64_image["report"], cpu_arm64_image["test"]
    assert (report["status"], report["platform"]) == ("built", "linux/arm64")
    assert report["ref"].endswith("-arm64") and report["log_file"].endswith("cpu-arm64.log")
    assert (test["status"], test["platform"], test["mode"]) == ("passed", "linux/arm64", "emulated")
    checks = {check["name"]: check for check in test["checks"]}
    for name in ("labels.match_matrix", "user.nonroot", "inside.inventory", "inside.elf_machine", "inside.python",
                 "inside.torch", "inside.torch.cuda", "inside.cudnn", "inside.nccl", "inside.torchvision",
                 "inside.transformers", "inside.trainer", "tag.matches_inside", "command.train_help",
                 "version.torch", "version.python", "version.nccl", "version.transformers", "version.torch_cuda"):
        assert checks[name]["status"] == "pass", checks[name]
    # debugpy's aarch64 wheel (JupyterLab's kernel) ships its x86-64 attach helper, named for its machine: counted
    assert "shared libraries in the environment are linux/arm64" in checks["inside.elf_machine"]["detail"]
    for name in ("command.info", "gpu.runtime", "selftest"):
        assert checks[name]["status"] == "skip" and NATIVE_ONLY in checks[name]["detail"]


def test_the_arm64_image_is_one(docker_client, cpu_arm64_image):
    image = docker_client.images.get(cpu_arm64_image["id"])
    assert (image.attrs["Os"], image.attrs["Architecture"]) == ("linux", "arm64")
    machine = docker_client.containers.run(cpu_arm64_image["id"], ["uname", "-m"], remove=True).decode().strip()
    assert machine == "aarch64"


def test_a_local_base_of_another_platform_is_refused_before_anything_builds(local_base_image, tmp_path):
    result = imagegen("build", "--image", "cpu", "--platform", "linux/arm64", "--base-image", local_base_image,
                      "--context-dir", str(tmp_path / "contexts"), "--report", str(tmp_path / "build.json"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"error: --base-image {local_base_image} is a linux/amd64 image, and cpu-arm64 is built for linux/arm64: "
        "pass --base-image linux/arm64=REF with a linux/arm64 image, or --platform linux/amd64 to build only that "
        "platform")
    assert not (tmp_path / "build.json").exists()
