"""What this machine can build is said before any build: an image whose base is neither in the engine nor answered
for by its registry, or whose lock holds an unhashed artifact, is refused in one line that names the selected images
that do build here (`imagegen build --cuda 12.4` where Docker Hub does not answer)."""

import pytest

from imagegen.core.errors import UserError
from imagegen.engine.registry.http import RegistryError, RegistryUnreachable
from imagegen.render.contexts import RenderOptions
from imagegen.stages import buildable

from tests.helpers import locked_named

HUB_DOWN = "its base {} is not in the engine and its registry does not answer from here"


def probe(local: dict, answers: dict):
    """engine_or_registry over a made-up engine (ref -> present) and registry (ref -> exception or None)."""
    def remote(ref):
        if answers.get(ref):
            raise answers[ref]
    return buildable.engine_or_registry(lambda ref: local.get(ref, False), remote)


def test_a_base_neither_local_nor_answered_for_is_refused_with_the_images_that_build():
    cpu, cuda = locked_named("cpu"), locked_named("cu130-torch2.11")
    options = RenderOptions()
    cuda_base = buildable.base_ref(cuda, options)
    problem = probe({buildable.base_ref(cpu, options): True},
                    {cuda_base: RegistryUnreachable("cannot reach registry at https://registry-1.docker.io/v2/")})
    found = buildable.reasons([cpu, cuda], options, False, problem)
    assert found == {cuda.key: [HUB_DOWN.format(cuda_base)]}
    line = buildable.refusal([cpu, cuda], found)
    assert line.startswith(f"1 of the selected images cannot be built on this machine: {cuda.key}: its base ")
    assert line.endswith("Of the selected images, cpu builds here: select it with --image cpu")
    assert "\n" not in line


def test_a_refusal_or_an_engine_that_does_not_answer_is_left_to_the_engine():
    """A private registry refuses an anonymous probe, the engine may have its credentials or a mirror: not refused."""
    ref = "nvidia/cuda:13.0.3-devel-ubuntu24.04"
    assert probe({}, {ref: RegistryError("answered HEAD ... with HTTP 401")})(ref) is None
    assert buildable.engine_or_registry(lambda ref: None, lambda ref: 1 / 0)(ref) is None  # no engine: not asked
    assert probe({ref: True}, {ref: RegistryUnreachable("cannot reach")})(ref) is None


def test_an_unhashed_artifact_is_a_reason_unless_allowed():
    image = locked_named("cu128-torch2.8")  # the fixture's flash-attn wheel, locked where GitHub did not answer
    assert image.lock.unhashed
    found = buildable.reasons([image], RenderOptions(), False, lambda ref: None)
    (why,) = found[image.key]
    assert why.startswith(f"its lock installs {image.lock.unhashed} without a sha256")
    assert "--allow-unhashed" in why and "imagegen lock --image NAME" in why
    assert buildable.reasons([image], RenderOptions(), True, lambda ref: None) == {}


def test_a_base_image_given_stands_in_for_the_locks():
    cpu = locked_named("cpu")
    options = RenderOptions(base_images=(("", "local/debian:bookworm"),))
    asked = []
    buildable.reasons([cpu], options, False, lambda ref: asked.append(ref))
    assert asked == ["local/debian:bookworm"]
    assert buildable.base_ref(cpu, RenderOptions()) == cpu.lock.base.pinned_ref


def test_none_that_builds_says_how_a_plain_os_base_can():
    cuda = locked_named("cu130-torch2.11")
    with pytest.raises(UserError) as raised:
        buildable.refuse_unbuildable([cuda], RenderOptions(), False, lambda ref: "its base is not here")
    assert "None of the selected images builds here" in str(raised.value)
    assert "--base-image" in str(raised.value) and "local/debian:bookworm" in str(raised.value)
