"""A layer several images share is built once per run, on the real engine."""

import hashlib
import uuid

import docker.errors

from imagegen.stages.build import Builder, PipSettings
from imagegen.engine.progress import PlainView
from imagegen.render.contexts import LayerContext

from tests.helpers import locked_named


def layer(image, name, parent, body):
    """Unique to this run: its ref is a real layer ref, imagegen-layer/NAME:DIGEST, that no other run has."""
    dockerfile = f"FROM {parent}\nRUN echo {body} > /{name}.txt\n".encode()
    return LayerContext(image, name, {"Dockerfile": dockerfile}, hashlib.sha256(dockerfile).hexdigest(), parent)


def test_a_shared_base_layer_is_built_once_and_reused(build_client, local_base_image, docker_client, tmp_path):
    run = uuid.uuid4().hex[:10]
    shared = layer("first", "base", local_base_image, f"shared-base-{run}")
    first = locked_named("cu124-torch2.6")
    second = locked_named("cu128-torch2.8")
    builder = Builder(build_client, PipSettings(), tmp_path / "logs", view=PlainView(lambda line: None),
                      staging=tmp_path / "staging")
    tops = [layer("first", "trainer", shared.ref, f"first-top-{run}"),
            layer("second", "trainer", shared.ref, f"second-top-{run}")]
    try:
        one = builder.build(first, [shared, tops[0]], first.labels)
        two = builder.build(second, [shared, tops[1]], second.labels)
        assert [(l.layer, l.status) for l in one.layers] == [("base", "built"), ("trainer", "built")]
        assert [(l.layer, l.status) for l in two.layers] == [("base", "reused"), ("trainer", "built")]
        assert two.layers[0].image_id == one.layers[0].image_id
        assert docker_client.images.get(two.image_id).labels["io.imagegen.image"] == "cu128-torch2.8"
    finally:
        for ref in (shared.ref, *(top.ref for top in tops), first.ref(), second.ref(),
                    *(first.ref(t) for t in first.alias_tags), *(second.ref(t) for t in second.alias_tags)):
            try:
                docker_client.images.remove(ref, force=True)
            except docker.errors.ImageNotFound:
                pass
