"""The test suite's own clean-up on the shared engine: what it made goes, what was there stays."""

import uuid

from tests.docker_env import build_cache_made_inside, build_cache_records, local_tags_made_under


def build_marked(build_client, context, base, tag, marker, no_cache=False):
    """Random bytes: a rebuild that wrote the same bytes would share its layer with the first build."""
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base}\nRUN echo {marker} > /marker && head -c 100000 /dev/urandom > /pad\n")
    outcome = build_client.build(context, [tag], lambda _: None, no_cache=no_cache)
    assert outcome.ok, outcome.log_tail
    return outcome.image_id


def records_of(docker_client, marker):
    return {record["ID"] for record in build_cache_records(docker_client) if marker in record["Description"]}


def test_records_made_inside_the_block_go_once_their_image_has(build_client, local_base_image, docker_client,
                                                              throwaway_tag, tmp_path):
    marker = f"cache-probe-{uuid.uuid4().hex[:10]}"
    build_marked(build_client, tmp_path / "before", local_base_image, throwaway_tag("before"), marker)
    earlier = records_of(docker_client, marker)
    assert earlier
    with build_cache_made_inside(docker_client):
        rebuilt = build_marked(build_client, tmp_path / "inside", local_base_image, throwaway_tag("inside"), marker,
                               no_cache=True)
        made = records_of(docker_client, marker) - earlier
        assert made
        docker_client.images.remove(rebuilt, force=True)
    assert records_of(docker_client, marker) == earlier  # the rebuild's records gone, the first build's kept


def test_records_an_image_still_holds_stay(build_client, local_base_image, docker_client, throwaway_tag, tmp_path):
    marker = f"cache-probe-{uuid.uuid4().hex[:10]}"
    with build_cache_made_inside(docker_client):
        build_marked(build_client, tmp_path / "kept", local_base_image, throwaway_tag("kept"), marker)
    assert records_of(docker_client, marker)


def test_tags_made_under_a_registry_host_go_and_earlier_ones_stay(local_base_image, docker_client):
    host = f"127.0.0.1:{uuid.uuid4().int % 10000 + 50000}"
    base = docker_client.images.get(local_base_image)
    earlier, inside = f"{host}/earlier-{uuid.uuid4().hex[:8]}:1", f"{host}/inside-{uuid.uuid4().hex[:8]}:1"
    base.tag(earlier)
    try:
        with local_tags_made_under(host):
            base.tag(inside)
        tags = {tag for image in docker_client.images.list() for tag in image.tags}
        assert earlier in tags and inside not in tags
    finally:
        docker_client.images.remove(earlier)
