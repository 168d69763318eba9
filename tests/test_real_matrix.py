"""The real matrix.yaml, as it is: it validates, and every image is locked or declared to lock elsewhere.

The other tests use their own matrix (tests/fixture); these are the only ones that read matrix.yaml itself,
so that adding an image there is checked here and changes nothing else.
"""

import yaml

from imagegen.workspace import Workspace

from tests.helpers import MATRIX_PATH, REPO
from tests.test_cli import imagegen


def test_validate_passes_on_the_real_matrix_as_it_is():
    result = imagegen("validate")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "images valid" in result.stdout


def test_every_image_is_locked_or_declared_to_lock_where_the_pytorch_index_answers():
    plan = Workspace().load()
    for planned in plan.images:
        assert planned.key in plan.locked or (planned.torch.lock_source == "pytorch-index"
                                              and planned.key in plan.lock_warnings), planned.key
    declared = {image["name"] for image in yaml.safe_load(MATRIX_PATH.read_text())["images"]
                if image.get("lock") == "pytorch-index"}
    assert all(planned.torch.index_url for planned in plan.images if planned.name in declared)


def test_every_lock_file_belongs_to_an_image_of_the_matrix():
    names = {image["name"] for image in yaml.safe_load(MATRIX_PATH.read_text())["images"]}
    assert {path.stem for path in (REPO / "locks").glob("*.json")} <= names


def test_facts_no_index_confirms_name_their_source_and_volta_keeps_a_cuda_12_image():
    """CUDA 13.2's base tags and driver come from NVIDIA's release notes, which no index here answers; CUDA 13 drops
    sm70, so a locked CUDA 12 image still builds for Volta."""
    matrix = yaml.safe_load(MATRIX_PATH.read_text())
    assert matrix["cuda"]["13.2"]["source"].startswith("https://docs.nvidia.com/cuda/")
    assert all("7.0" not in archs for minor, cuda in matrix["cuda"].items() if minor.startswith("13.")
               for archs in (cuda["archs"].values() if isinstance(cuda["archs"], dict) else [cuda["archs"]]))
    plan = Workspace().load()
    volta = [planned.name for planned in plan.images if "7.0" in planned.gpu.archs and planned.key in plan.locked]
    assert "cu128-torch2.8" in volta


def test_no_cuda_base_carries_a_cudnn_that_torchs_wheel_duplicates():
    """torch loads the cuDNN of its nvidia-cudnn wheel; a base's own (-cudnn-devel- tags) would be a second copy."""
    plan = Workspace().load()
    cuda_images = [image for image in plan.images if image.gpu.cuda_minor]
    assert cuda_images
    for image in cuda_images:
        assert "cudnn" not in image.base.image.split(":", 1)[1], image.base.image
        assert image.base.cudnn is None
    for locked in plan.locked.values():
        if locked.plan.gpu.cuda_minor:
            assert locked.labels["io.imagegen.base.cudnn"] == "none", locked.key


def test_the_version_tag_of_an_image_with_vllm_names_it_and_no_other_does():
    """vLLM is marked in_name: an image's tag says it carries vLLM (and which), so a tag pattern finds them."""
    plan = Workspace().load()
    tags = {image.name: image.version_tag for image in plan.locked.values()}
    with_vllm = {name for name, tag in tags.items() if "-vllm" in tag}
    assert with_vllm == {name for name in tags if name.endswith("-vllm0.31")} and with_vllm
    for name in with_vllm:
        assert "-py3.1" in tags[name] and "-vllm0.31.0-" in tags[name], tags[name]
