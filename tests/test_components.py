"""A component is one row of matrix.yaml's table: a made-up one, added to a copy of the matrix with its facts and
a lock that pins it, shows up in the labels (the description too), expected.json, the listing and the checks."""

import json

from imagegen.locking.inputs import lock_inputs
from imagegen.reports import listing
from imagegen.stages.checks import inside_versions, versions
from imagegen.workspace import Workspace

from tests.helpers import FIXTURE_TRAINER, edited, image_named, locked_matrix, problems_of

# Its requirements cut to torch's: the walk of the lock's graph checks them; the real resolver and metadata are
# tests/test_recipes.py's.
LIGER = {"name": "liger-kernel", "version": "0.8.5", "index": "https://pypi.org/simple", "required_by": [],
         "hashes": ["sha256:" + "4" * 64], "requires": ["torch>=2.1.2"]}


def add_liger(data):
    data["components"]["liger_kernel"] = {"title": "Liger", "distribution": "liger-kernel"}
    data["packages"]["liger-kernel"] = {"0.8.5": {"python": ">=3.10", "torch": ">=2.1.2"}}
    image_named(data, "cpu")["liger_kernel"] = "0.8.5"


def relock_with_liger(workspace: Workspace) -> None:
    """What `imagegen lock --image cpu` writes, less the resolver: the lock pins the new package, made from the
    new inputs (tests/test_recipes.py runs the real resolver)."""
    plan = workspace.load()
    path = workspace.lock_path("cpu")
    lock = json.loads(path.read_text())
    for planned in (p for p in plan.images if p.name == "cpu"):
        section = lock["platforms"][planned.platform]
        section["inputs"] = lock_inputs(planned)
        section["packages"].append(LIGER)
        torch = next(p for p in section["packages"] if p["name"] == "torch")
        torch["required_by"] = sorted([*torch["required_by"], LIGER["name"]])
    path.write_text(json.dumps(lock))


def test_a_made_up_component_is_its_row_its_facts_and_a_relock(tmp_path):
    workspace = Workspace(locked_matrix(tmp_path, add_liger), trainer=FIXTURE_TRAINER)
    before = workspace.load()
    assert "requirements: +liger-kernel==0.8.5" in before.lock_problems["cpu"]  # the re-lock the recipe asks for
    relock_with_liger(workspace)
    plan = workspace.load()
    image = plan.locked["cpu"]
    assert image.labels["io.imagegen.liger_kernel"] == "0.8.5"
    assert image.labels["org.opencontainers.image.description"].endswith(", liger_kernel 0.8.5")
    expected = json.loads(image.contexts[1].files["expected.json"])
    assert (expected["versions"]["liger_kernel"], expected["distributions"]["liger_kernel"],
            expected["labels"]["liger_kernel"]) == ("0.8.5", "liger-kernel", "liger_kernel")
    assert "liger-kernel==0.8.5" in lock_inputs(image.plan)["requirements"]
    table = listing.table(listing.listed(plan, [image.plan])).splitlines()
    column = table[0].index("Liger")  # columns are aligned: the value starts under its heading
    assert table[1][column:].split()[0] == "0.8.5"
    # An image that never names it has no label for it: its labels, expected.json and tag are as before the row.
    before_other, other = before.locked["cu124-torch2.6"], plan.locked["cu124-torch2.6"]
    assert "io.imagegen.liger_kernel" not in other.labels and other.labels == before_other.labels
    assert other.version_tag == before_other.version_tag
    assert other.contexts[1].files["expected.json"] == before_other.contexts[1].files["expected.json"]


def test_the_checks_read_a_made_up_component_as_any_other(tmp_path):
    workspace = Workspace(locked_matrix(tmp_path, add_liger), trainer=FIXTURE_TRAINER)
    relock_with_liger(workspace)
    image = workspace.load().locked["cpu"]

    class Context:
        pass

    context = Context()
    context.image = image
    keys = inside_versions.keys_of_labels(context, None)
    labels = {key.removeprefix("io.imagegen."): value for key, value in image.labels.items()}
    inside = {**image.versions, "liger_kernel": "0.8.4", "vlmgrpo": "0.1.0"}
    # judged as the image's inventory judges it: what imagegen wrote in expected.json against what it read inside
    from imagegen_contract.inventory import version_checks

    expected = image.expected().model_dump()
    inventory = {"versions": inside, "expected": expected, "version_checks": version_checks(expected, inside)}
    checks = {c.name: c for c in inside_versions.versions_match_labels(inventory, labels, keys, image.expected())}
    assert checks["inside.liger_kernel"].status == checks["inside.torch"].status == "pass"  # labels as built
    context.with_inventory = lambda name, use: use(inventory)
    checks = {c.name: c for c in versions.run(context)}
    assert checks["version.liger_kernel"].status == "fail"
    assert checks["version.liger_kernel"].detail == "liger_kernel 0.8.4, expected 0.8.5"
    assert checks["version.torch"].status == "pass"


def test_a_component_in_name_names_the_images_that_have_it_and_only_those():
    """vLLM's row says in_name: an image with it ends -vllm<X.Y> (the tag pattern the trainer's messages give)."""
    def with_named_liger(name):
        def edit(data):
            add_liger(data)
            data["components"]["liger_kernel"]["in_name"] = True
            image_named(data, "cpu")["name"] = name
            data["latest"] = name if data.get("latest") == "cpu" else data.get("latest")
        return edit

    assert [p for p in problems_of(edited(with_named_liger("cpu-liger_kernel0.8"))) if p.rule == "component-in-name"] \
        == []
    (problem,) = [p for p in problems_of(edited(with_named_liger("cpu"))) if p.rule == "component-in-name"]
    assert problem.message.endswith("; name it ...-liger_kernel0.8")

    def misnamed(data):
        with_named_liger("cpu-liger_kernel0.8")(data)
        image_named(data, "cu124-torch2.6")["name"] = "cu124-torch2.6-liger_kernel0.8"  # without it
    (problem,) = [p for p in problems_of(edited(misnamed)) if p.rule == "component-in-name"]
    assert problem.key.endswith(".name") and "liger_kernel none" in problem.message


def test_a_component_takes_the_extra_its_row_names_for_the_torch_builds_cuda_major(tmp_path):
    """flash-attn-4[cu13]: a row's cuda_extras picks its distribution's extra by the CUDA major torch is built for;
    an image on another CUDA major (or with no CUDA) pins the plain distribution."""
    def add_kernels(data):
        data["components"]["liger_kernel"] = {"title": "Liger", "distribution": "liger-kernel",
                                              "cuda_extras": {"13": "cu13"}}
        data["packages"]["liger-kernel"] = {"0.8.5": {"python": ">=3.10", "torch": ">=2.1.2"}}
        for image in data["images"]:
            image["liger_kernel"] = "0.8.5"

    plan = Workspace(locked_matrix(tmp_path, add_kernels), trainer=FIXTURE_TRAINER).load()
    pins = {p.name: [r for r in lock_inputs(p)["requirements"] if r.startswith("liger")] for p in plan.images}
    by_major = {p.name: (p.version("torch_cuda") or "").split(".")[0] for p in plan.images}
    assert set(by_major.values()) >= {"12", "13"}, by_major  # the fixture has both
    for name, major in by_major.items():
        assert pins[name] == ["liger-kernel[cu13]==0.8.5" if major == "13" else "liger-kernel==0.8.5"], name
