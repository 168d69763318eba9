"""`imagegen test`'s checks, one module each, found by discovery; the comparisons they make between what an
image reports and its tag and labels."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from imagegen.core import platforms
from imagegen.render.expected import of_inventory
from imagegen.stages import checks
from imagegen.stages.checks import (inside_elf_machine, inside_versions, selftest, tag_matches_inside, user_nonroot,
                                    versions)

from tests.helpers import REPO, check_runner, locked_named

INSIDE = {"vlmgrpo": "0.1.0", "torch": "2.6.0+cu124", "torch_cuda": "12.4", "cudnn": "9.1.0",
          "python": "3.11.9", "nccl": "2.21.5"}
INPUTS = "sha256:3f2a9c1d4e5b" + "0" * 52
TAG = "0.1.0-torch2.6.0-cu124-cudnn9-py3.11-3f2a9c1d4e5b"
RUNNER = check_runner()


BUILT = {"torch": "2.6.0", "cudnn": "9.1.0.70", "flash_attn": None}  # the versions an image's expected.json names


@pytest.mark.parametrize("label, key, wanted, built, status, says", [
    # the label against what the image was built to hold: what is installed is version.<key>'s, judged inside
    ("torch", "torch", "2.6.0", BUILT, "pass", "label 2.6.0, as the image was built to hold"),
    ("cudnn", "cudnn", "9.1.0.70", BUILT, "pass", "what is installed is judged inside the image"),
    ("flash-attn", "flash_attn", "none", BUILT, "pass", "label none"),
    ("flash-attn", "flash_attn", "2.8.3", BUILT, "fail", "label 2.8.3, but the image was built to hold none"),
    ("torch", "torch", "2.6.1", BUILT, "fail", "label 2.6.1, but the image was built to hold 2.6.0"),
    ("deepspeed", "deepspeed", "0.19.8", BUILT, "fail", "expected.json names no deepspeed"),
    ("torch", "torch", "2.6.0", None, "fail", "expected.json names no torch: nothing says what it was built to hold"),
])
def test_a_label_is_the_version_the_image_was_built_to_hold(label, key, wanted, built, status, says):
    check = inside_versions.label_check(label, key, wanted, {"versions": {}}, built)
    assert (check.name, check.status) == (f"inside.{label}", status) and says in check.detail


@pytest.mark.parametrize("inside, status", [("0.1.0", "pass"), ("0.2.0", "fail"), (None, "fail")])
def test_the_trainer_label_is_the_installed_trainer(inside, status):
    """expected.json does not name the trainer: its label is compared with the installed version."""
    check = inside_versions.label_check("trainer", "vlmgrpo", "0.1.0", {"versions": {"vlmgrpo": inside}}, None)
    assert (check.name, check.status, check.detail) == ("inside.trainer", status,
                                                         f"inside {inside or 'absent'}, label 0.1.0")


def test_the_versions_are_the_inventorys_verdict_reported_as_it_made_it():
    """version.<key> is judged once, inside the image, by the inventory (also under emulation): the host reports its
    verdicts, names, statuses and details as they came."""
    from imagegen_contract.inventory import version_checks

    expected = {"versions": {"torch": "2.6.0", "cudnn": "9.1.0", "flash_attn": None, "python": "3.11"},
                "distributions": {"torch": "torch", "flash_attn": "flash-attn"}, "families": {"cudnn": "nvidia-cudnn"}}
    inside = {"torch": "2.6.0+cu124", "cudnn": "9.1.0.70", "flash_attn": "2.8.3", "python": "3.11.9"}
    found = {"version_checks": version_checks(expected, inside)}
    context = SimpleNamespace(with_inventory=lambda name, use: use(found))
    assert [(c.name, c.status, c.detail) for c in versions.run(context)] == [
        ("version.torch", "pass", "torch 2.6.0+cu124, expected 2.6.0"),
        ("version.cudnn", "pass", "cudnn 9.1.0.70, expected 9.1.0"),
        ("version.flash_attn", "fail", "flash_attn 2.8.3 installed, expected absent"),
        ("version.python", "pass", "python 3.11.9, expected 3.11")]


def facts(label, tags=(), inputs=INPUTS):
    labels = {"org.opencontainers.image.version": label} if label else {}
    return {"labels": {**labels, "io.imagegen.inputs": inputs}, "tags": [f"repo:{tag}" for tag in tags]}


def test_a_tag_rebuilt_from_the_inside_passes():
    assert tag_matches_inside.tag_matches_inside(facts(TAG, [TAG, "cu12.4"]), INSIDE).status == "pass"
    runtime = "0.1.0-torch2.6.0-cu124-cudnn9-py3.11-runtime-3f2a9c1d4e5b"
    assert tag_matches_inside.tag_matches_inside(facts(runtime), INSIDE).status == "pass"


def test_a_tag_names_each_in_name_component_the_image_holds():
    """expected.json's in_name (vllm) puts -vllm<version> after the Python: absent from the tag of an image that holds
    it, the tag lies."""
    inside = {**INSIDE, "vllm": "0.31.0"}
    with_vllm = "0.1.0-torch2.6.0-cu124-cudnn9-py3.11-vllm0.31.0-3f2a9c1d4e5b"
    assert tag_matches_inside.tag_matches_inside(facts(with_vllm), inside, ["vllm"]).status == "pass"
    check = tag_matches_inside.tag_matches_inside(facts(TAG), inside, ["vllm"])
    assert check.status == "fail" and "holds 0.1.0-torch2.6.0-cu124-cudnn9-py3.11-vllm0.31.0" in check.detail
    assert tag_matches_inside.tag_matches_inside(facts(TAG), INSIDE, ["vllm"]).status == "pass"  # none: not named


def test_a_platform_images_local_tag_carries_its_arch_after_the_version_tag():
    assert tag_matches_inside.tag_matches_inside(facts(TAG, [TAG + "-arm64", "cpu-arm64"]), INSIDE).status == "pass"


@pytest.mark.parametrize("platform", sorted(platforms.ARCH))
def test_a_platform_tag_comes_back_to_its_version_tag(platform):
    assert platforms.without_arch(platforms.arch_tag(TAG, platform)) == TAG
    assert platforms.without_arch(TAG + platforms.suffix(platform)) == TAG
    assert platforms.without_arch("cpu" + platforms.suffix(platform)) == "cpu"
    assert platforms.without_arch(TAG) == TAG


def test_a_tag_that_lies_about_torch_fails():
    check = tag_matches_inside.tag_matches_inside(facts("0.1.0-torch2.7.1-cu124-cudnn9-py3.11-3f2a9c1d4e5b"), INSIDE)
    assert check.status == "fail" and "holds 0.1.0-torch2.6.0-cu124-cudnn9-py3.11" in check.detail


def test_a_second_version_tag_that_lies_fails_too():
    check = tag_matches_inside.tag_matches_inside(facts(TAG, [TAG, "0.1.0-torch2.6.0-cu126-cudnn9-py3.11-3f2a9c1d4e5b"]),
                                      INSIDE)
    assert check.status == "fail" and "cu126" in check.detail


def test_a_tag_whose_digest_is_not_the_images_inputs_fails():
    check = tag_matches_inside.tag_matches_inside(facts(TAG, inputs="sha256:" + "9" * 64), INSIDE)
    assert check.status == "fail" and "does not end in the digest of the inputs" in check.detail


def test_an_image_without_labels_fails_with_the_reason():
    check = tag_matches_inside.tag_matches_inside(facts(None), INSIDE)
    assert check.status == "fail" and "no org.opencontainers.image.version label" in check.detail


@pytest.mark.parametrize("user, status", [("", "fail"), ("root", "fail"), ("0:0", "fail"), ("1000:1000", "pass"),
                                          ("trainer", "pass")])
def test_the_image_user_must_not_be_root(user, status):
    assert user_nonroot.check_user(user).status == status


def test_every_shared_library_must_be_built_for_the_images_platform():
    ok = inside_elf_machine.libraries_are_for("linux/arm64", {"183": ["/opt/venv/a.so", "/opt/venv/b.so"]})
    assert ok.status == "pass" and ok.detail == "all 2 shared libraries in the environment are linux/arm64"
    mixed = inside_elf_machine.libraries_are_for("linux/arm64", {"183": ["/opt/venv/a.so"], "62": ["/opt/venv/x86.so"]})
    assert mixed.status == "fail" and "1 of 2" in mixed.detail and "/opt/venv/x86.so" in mixed.detail
    assert inside_elf_machine.libraries_are_for("linux/amd64", {}).status == "fail"  # none found is no proof


def test_a_library_for_another_machine_in_its_target_folder_is_a_cross_compilation_file_not_a_mix_up():
    """nvidia-cutlass-dsl's x86_64 wheel ships lib/stubs/aarch64-unknown-linux-gnu/*.so (seen in the vLLM image)."""
    stub = "/opt/venv/site-packages/nvidia_cutlass_dsl/cu13/lib/stubs/aarch64-unknown-linux-gnu/libcute_dsl_runtime.so"
    check = inside_elf_machine.libraries_are_for("linux/amd64", {"62": ["/opt/venv/a.so"], "183": [stub]})
    assert check.status == "pass", check.detail
    assert check.detail == ("all 1 shared libraries in the environment are linux/amd64 but 1 named for another "
                            "target, as their wheels ship them")
    # the same file elsewhere, or an x86_64 library in an aarch64 folder, is still a mix-up
    for machines in ({"62": ["/a.so"], "183": ["/opt/venv/torch/lib/libcute_dsl_runtime.so"]},
                     {"183": ["/a.so"], "62": ["/opt/venv/stubs/aarch64-unknown-linux-gnu/x.so"]}):
        platform = "linux/amd64" if "62" in machines and machines["62"] == ["/a.so"] else "linux/arm64"
        assert inside_elf_machine.libraries_are_for(platform, machines).status == "fail", machines


def test_a_library_whose_own_name_says_its_machine_is_picked_by_that_name_not_a_mix_up():
    """debugpy's aarch64 wheel ships its x86-64 attach helper (seen in the cpu image's arm64 build with JupyterLab)."""
    helper = ("/opt/venv/lib/python3.11/site-packages/debugpy/_vendored/pydevd/pydevd_attach_to_process/"
              "attach_linux_amd64.so")
    assert inside_elf_machine.libraries_are_for("linux/arm64", {"183": ["/a.so"], "62": [helper]}).status == "pass"
    # a name that only contains the machine's letters, or names the image's own machine, is no such file
    for path in ("/opt/venv/lib/libamd64tools.so", "/opt/venv/lib/attach_linux_arm64.so"):
        assert inside_elf_machine.libraries_are_for("linux/arm64", {"183": ["/a.so"], "62": [path]}).status == "fail"


def test_an_alias_that_holds_torch_in_its_name_is_not_read_as_a_version_tag():
    """Image names such as cu124-torch2.6 or debian12-torch2.13-vllm0.31 are aliases, not version tags."""
    check = tag_matches_inside.tag_matches_inside(facts(TAG, [TAG, "cu124-torch2.6", "debian12-torch2.13"]), INSIDE)
    assert check.status == "pass", check.detail


def test_every_check_is_a_module_found_by_discovery_in_order():
    names = [name for module in checks.discovered(RUNNER) for name in module.NAMES]
    assert names[:3] == ["labels.match_matrix", "user.nonroot", "command.info"] and names[-1] == "selftest"
    for module in checks.discovered(RUNNER):
        assert callable(module.run) and module.PHASE in checks.PHASES and isinstance(module.NAMES, tuple)
        assert isinstance(module.NEEDS, tuple) and all(isinstance(need, str) for need in module.NEEDS)


def host_context(emulated=False, gpu=False, require_gpu=False, built=None):
    """built: the versions the image's expected.json names, as its inventory read them; None: no expected.json."""
    from imagegen.stages.checks.context import Context

    facts = {"platform": "linux/arm64" if emulated else "linux/amd64", "labels": {}}
    found = {"versions": {}, "expected": None if built is None else {"versions": built}}
    return Context("repo:tag", None, facts, None, emulated, gpu, "the engine has no GPU runtime", require_gpu, False, "",
                   RUNNER, _inventory=found)


def test_a_check_runs_only_where_what_it_needs_is_there():
    """One contract with the image's own checks: NEEDS says what a check applies to, the runner skips it elsewhere."""
    def needing(*needs):
        return SimpleNamespace(NAMES=("needs",), NEEDS=needs)

    assert checks.unmet_need(needing("native"), host_context()) is None
    status, why = checks.unmet_need(needing("native"), host_context(emulated=True))
    assert status == "skip" and "QEMU user emulation" in why
    assert checks.unmet_need(needing("matrix"), host_context())[0] == "skip"  # an image given by reference only
    assert checks.unmet_need(needing("gpu"), host_context()) == ("skip", "the engine has no GPU runtime")
    assert checks.unmet_need(needing("gpu"), host_context(require_gpu=True))[0] == "fail"
    assert checks.unmet_need(needing("gpu"), host_context(gpu=True)) is None
    # a component is what the image's expected.json names, by the rule the image's own checks judge by
    with_vllm = host_context(built={"vllm": "0.31.0", "deepspeed": None})
    assert checks.unmet_need(needing("vllm", "gpu"), with_vllm)[0] == "skip"  # applies, but no GPU
    assert checks.unmet_need(needing("vllm"), with_vllm) is None
    assert checks.unmet_need(needing("deepspeed", "gpu"), host_context(built={"deepspeed": None}, require_gpu=True)) \
        == ("skip", "no deepspeed in this image (expected.json: deepspeed none)")  # not applicable beats no GPU
    assert checks.unmet_need(needing("liger_kernel"), with_vllm) == (
        "skip", "no liger_kernel in this image (expected.json does not name it)")
    assert checks.unmet_need(needing("vllm"), host_context())[1].startswith("the image holds no expected file")
    assert checks.unmet_need(needing("expected"), host_context())[0] == "skip"
    assert checks.unmet_need(needing("expected"), with_vllm) is None
    unread = host_context()
    unread._inventory, unread._inventory_error = None, "the image has no python"  # could not run: not asked again
    assert checks.unmet_need(needing("inventory"), unread) == ("skip", "no inventory (inside.inventory says why)")
    assert checks.unmet_need(needing("vllm"), unread) == ("skip", "no inventory (inside.inventory says why)")


def test_a_check_whose_need_is_unmet_is_reported_skipped_without_running(monkeypatch):
    never = SimpleNamespace(NAMES=("never.a", "never.b"), PHASE="image", NEEDS=("native",),
                            run=lambda context: pytest.fail("ran under emulation"))
    monkeypatch.setattr(checks, "discovered", lambda runner: [never])
    found = checks.run_checks(host_context(emulated=True))
    assert [(c.name, c.status) for c in found] == [("never.a", "skip"), ("never.b", "skip")]


def test_a_check_dropped_into_the_package_is_run(tmp_path, monkeypatch):
    """Adding a check is one file: a module with NAMES, PHASE, NEEDS and run(context), nothing registered anywhere.
    (The package's __path__ is extended by a directory holding it, as a new file in the package would be.)"""
    (tmp_path / "zz_added_for_a_test.py").write_text(
        'from imagegen.stages.results import Check\n\nNAMES, PHASE, NEEDS = ("added.by_test",), "selftest", ()\n\n\n'
        'def run(context):\n    return [Check(NAMES[0], "pass", context.ref)]\n')
    monkeypatch.setattr(checks, "__path__", [*checks.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "imagegen.stages.checks.zz_added_for_a_test", raising=False)
    try:
        (added,) = [module for module in checks.discovered(RUNNER) if module.NAMES == ("added.by_test",)]
        assert [c.name for c in added.run(SimpleNamespace(ref="r"))] == ["added.by_test"]
        assert checks.discovered(RUNNER)[-1] is added  # in the selftest's phase, after it by name
    finally:
        sys.modules.pop("imagegen.stages.checks.zz_added_for_a_test", None)


def test_versions_are_compared_by_the_component_tables_labels():
    """The made-up label liger-kernel is checked because the table names it; a label no row has is not."""
    inventory = {"versions": {"torch": "2.6.0+cu124", "liger_kernel": "0.6.4", "vlmgrpo": "0.1.0"},
                 "expected": {"versions": {"torch": "2.6.0", "liger_kernel": "0.6.4"}}}
    labels = {"torch": "2.6.0", "liger-kernel": "0.6.3", "image": "x"}
    keys = {"torch": "torch", "liger-kernel": "liger_kernel", "trainer": "vlmgrpo"}
    expected = of_inventory(inventory)
    found = {c.name: c.status for c in inside_versions.versions_match_labels(inventory, labels, keys, expected)}
    assert found == {"inside.torch": "pass", "inside.liger-kernel": "fail"}


def test_an_image_without_a_matrix_entry_is_read_by_the_labels_its_expected_file_names():
    context = SimpleNamespace(image=None)
    expected = {"versions": {}, "labels": {"flash_attn": "flash-attn", "torch_cuda": "torch.cuda"}}
    assert inside_versions.keys_of_labels(context, of_inventory({"expected": expected})) == {
        "flash-attn": "flash_attn", "torch.cuda": "torch_cuda", "trainer": "vlmgrpo"}
    image = locked_named("cpu")
    keys = inside_versions.keys_of_labels(SimpleNamespace(image=image), None)
    assert keys["torch.cuda"] == "torch_cuda" and keys["trainer"] == "vlmgrpo"


def test_a_selftest_report_becomes_one_check_each():
    report = json.dumps({"checks": [{"name": "version.torch", "status": "pass", "detail": "2.6.0"}]})
    assert [(c.name, c.status) for c in selftest.checks_of(report, 0, "")] == [("selftest.version.torch", "pass")]
    assert [(c.name, c.status) for c in selftest.checks_of(report, 1, "")][-1] == ("selftest", "fail")
    assert selftest.checks_of("Traceback ...", 1, "boom")[0].detail == "exit 1, no report: boom"


def test_an_image_built_on_a_stand_in_base_says_so_and_still_matches_its_matrix_entry():
    """--base-image builds the lock's inputs on another base (a mirror, a local Debian): the OCI base label names it,
    io.imagegen.base.locked the lock's base, and labels.match_matrix accepts that pair and nothing else."""
    from imagegen.render.tags import built_on
    from imagegen.stages.checks import labels_match_matrix

    image = locked_named("cpu")
    locked_base = image.labels["org.opencontainers.image.base.name"]
    assert built_on(image.labels, None) == image.labels == built_on(image.labels, locked_base)
    stand_in = built_on(image.labels, "local/debian:bookworm")
    assert stand_in["org.opencontainers.image.base.name"] == "local/debian:bookworm"
    assert stand_in["io.imagegen.base.locked"] == locked_base

    def verdict(labels):
        (check,) = labels_match_matrix.run(SimpleNamespace(image=image, facts={"labels": labels}))
        return check.status

    assert verdict(image.labels) == verdict(stand_in) == "pass"
    assert verdict({**image.labels, "org.opencontainers.image.base.name": "local/debian:bookworm"}) == "fail"
    assert verdict({**stand_in, "io.imagegen.base.locked": "debian:trixie-slim"}) == "fail"


class HostAsImage(checks.Context):
    """The image's commands run on this machine instead (the trainer and its inventory program from this checkout,
    as the image holds them), so every check module runs its own code without an engine."""

    def run(self, args, timeout_s=300, gpu=False, shm_size=None):
        from imagegen.engine.containers import ContainerRun

        done = subprocess.run([sys.executable, "-m", "vlmgrpo", *args], capture_output=True, text=True,
                              timeout=timeout_s)
        return ContainerRun(done.returncode, done.stdout, done.stderr, 0.0)

    def inventory(self):
        """Read against the image's expected.json, as the image's own inventory reads it."""
        with tempfile.NamedTemporaryFile("w", suffix=".json") as expected:
            expected.write(self.image.expected().text())
            expected.flush()
            done = subprocess.run([sys.executable, "-c", self.inventory_program, expected.name], capture_output=True,
                                  text=True, timeout=300)
        return json.loads(done.stdout)


@pytest.mark.slow  # the trainer's info, train --help and selftest in child processes: about 30 s
def test_every_check_module_reports_only_the_names_it_declares():
    """A report's names are the modules' NAMES (a family's name then a dot: inside.<label>, selftest.<name>), so the
    names a module declares for its skips and failures are the ones it reports when it runs."""
    image = locked_named("cpu")
    program = (REPO / "contract/src/imagegen_contract/inventory.py").read_text()
    facts = {"platform": image.platform, "labels": image.labels, "tags": [f"repo:{image.plan.name}"], "user": "1000",
             "id": "sha256:0"}
    context = HostAsImage("repo:tag", image, facts, None, False, False, "the engine has no GPU runtime", False, True,
                          program, RUNNER)
    for module in checks.discovered(RUNNER):
        found = module.run(context)
        assert found and checks.reported_outside(RUNNER, module, found) == [], module.__name__


def test_no_host_check_module_decides_for_itself_whether_it_applies():
    """A skip is the runner's (NEEDS), never a module's own: no check module here can say "skip"."""
    for module in checks.discovered(RUNNER):
        assert "SKIP" not in vars(module) and '"skip"' not in Path(module.__file__).read_text(), module.__name__


def test_a_name_a_module_does_not_declare_is_found():
    module = SimpleNamespace(NAMES=("inside", "user.nonroot"))
    found = [checks.Check(name, "pass", "") for name in ("inside.torch", "user.nonroot", "user.nonroot.x", "insider")]
    assert checks.reported_outside(RUNNER, module, found) == ["insider"]


def test_every_side_reports_results_of_one_shape():
    """The host's Check, the image's own results (JSON from `vlmgrpo selftest`) and the inventory's version verdicts
    carry the same three fields, so the host reports each as it came: one shape across the process boundary (imagegen
    does not import the trainer's distribution, so the shape, not a class, is what they share)."""
    from dataclasses import fields

    from vlmgrpo.image.checks import result
    from imagegen_contract.inventory import version_check

    shape = [f.name for f in fields(checks.Check)]
    assert shape == list(result("a", "pass", "")) == list(version_check("torch", "2.6.0", "2.6.0")) == \
        ["name", "status", "detail"]
