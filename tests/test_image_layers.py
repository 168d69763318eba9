"""How the cpu image, as `imagegen build` makes it, is cut into layers: what a pull waits on and what a change
sends again, read from the engine's history of the image."""

from __future__ import annotations

import docker


def layer_sizes(image_id: str) -> list[tuple[int, str]]:
    """(bytes, the step that made it) of each layer, base first; the steps that make no layer (ENV, CMD) left out."""
    history = docker.from_env().api.history(image_id)
    return [(entry["Size"], entry["CreatedBy"]) for entry in reversed(history) if entry["Size"]]


def test_no_layer_of_the_cpu_image_holds_half_of_it(cpu_image):
    sizes = layer_sizes(cpu_image["id"])
    total = sum(size for size, _ in sizes)
    largest, step = max(sizes)
    assert largest <= total / 2, f"{largest / total:.2f} of the image in one layer, made by {step[:200]}"


def test_a_change_to_one_stack_package_sends_at_most_a_tenth_of_the_image_again(cpu_image):
    """The layers below the stack's install step are cached and the same blobs (tests/test_lock.py holds the step
    order); its layer and those above are new."""
    sizes = layer_sizes(cpu_image["id"])
    first = next(index for index, (_, step) in enumerate(sizes) if "requirements/stack.txt" in step)
    again = sum(size for size, _ in sizes[first:])
    assert again <= 0.1 * sum(size for size, _ in sizes), [(size, step[-80:]) for size, step in sizes[first:]]


def test_no_file_of_the_image_is_writable_by_anyone(cpu_image):
    """The image's user (and anyone else in the container) writes only where it is given: /tmp and mounts."""
    found = docker.from_env().containers.run(cpu_image["id"], ["find", "/", "-xdev", "-type", "f", "-perm", "-o+w",
                                                              "-not", "-path", "/tmp/*"], entrypoint=[], remove=True,
                                             network_mode="none", user="0:0")  # root: every folder can be read
    assert found.decode().split() == []


def test_what_a_run_imports_has_its_bytecode_in_the_image(cpu_image):
    """The image's user cannot write bytecode into /opt/venv: the build wrote it for what a run imports
    (vlmgrpo.commands.bytecode), so a start reads it instead of compiling torch's, transformers' and TRL's sources."""
    probe = ("import importlib, importlib.util, os\n"
             "for name in ('torch', 'transformers.trainer', 'trl.trainer.grpo_trainer', 'vlmgrpo.training.runner',\n"
             "             'transformers.models.qwen2_5_vl.modeling_qwen2_5_vl'):\n"
             "    source = importlib.util.find_spec(name).origin\n"
             "    print(name, os.path.exists(importlib.util.cache_from_source(source)))\n")
    found = docker.from_env().containers.run(cpu_image["id"], ["python", "-c", probe], entrypoint=[], remove=True,
                                             network_mode="none", environment={"PYTHONDONTWRITEBYTECODE": "1"})
    assert [line.split()[1] for line in found.decode().splitlines()] == ["True"] * 5, found.decode()
