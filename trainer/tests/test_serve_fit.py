"""The front shrinks an image larger than the model takes to the size the model's own processor gives it
(serving/fit.py): the model gets the same tokens and near the same pixels, the engine no large image."""

import base64
from io import BytesIO

import numpy
import pytest
from PIL import Image

from vlmgrpo.serving.fit import fit_images, processor_target
from vlmgrpo.serving.tokens import model_processor


def url_of(image: Image.Image, image_format: str = "PNG", **save) -> str:
    buffer = BytesIO()
    image.save(buffer, image_format, **save)
    return f"data:image/{image_format.lower()};base64," + base64.b64encode(buffer.getvalue()).decode()


def image_of(url: str) -> Image.Image:
    return Image.open(BytesIO(base64.b64decode(url.partition(",")[2])))


def request(*urls: str) -> dict:
    return {"messages": [{"role": "user", "content": [
        *({"type": "image_url", "image_url": {"url": url}} for url in urls), {"type": "text", "text": "Where?"}]}]}


def urls(body: dict) -> list[str]:
    return [part["image_url"]["url"] for part in body["messages"][0]["content"] if part["type"] == "image_url"]


def picture(size: tuple[int, int]) -> Image.Image:
    """A photograph's kind of content: smooth shading, and a yellow box with edges."""
    width, height = size
    shade = numpy.add.outer(numpy.linspace(0, 200, height), numpy.linspace(0, 55, width)).astype(numpy.uint8)
    pixels = numpy.stack([shade, shade[::-1], numpy.full_like(shade, 90)], axis=-1)
    pixels[height // 4:height // 2, width // 3:width // 2] = (255, 220, 0)
    return Image.fromarray(pixels)


@pytest.fixture(scope="module")
def processor(tiny):
    return model_processor(tiny["model"])


def test_the_model_gets_the_tokens_and_near_the_pixels_it_got_from_the_large_image(processor):
    target = processor_target(processor)
    large = picture((1800, 1200))
    body = request(url_of(large))
    assert fit_images(body, target) == 1
    fitted = image_of(urls(body)[0])
    assert fitted.size[::-1] == target(1200, 1800) and fitted.width * fitted.height < 1800 * 1200 // 100
    before = processor.image_processor([large], return_tensors="pt")
    after = processor.image_processor([fitted.convert("RGB")], return_tensors="pt")
    assert before["image_grid_thw"].tolist() == after["image_grid_thw"].tolist()
    # the processor normalizes to about [-2, 2]: the two resizings (PIL's bicubic here, the processor's own there)
    # differ by a fraction of a level on average
    assert float((before["pixel_values"] - after["pixel_values"]).abs().mean()) < 0.05


def test_images_the_model_takes_as_they_are_pass_untouched(processor):
    small, enlarged = url_of(picture((84, 84))), url_of(picture((20, 20)))  # the processor enlarges the second
    body = request(small, enlarged)
    assert fit_images(body, processor_target(processor)) == 0
    assert urls(body) == [small, enlarged]


def test_an_image_turned_by_its_exif_is_fitted_upright(processor):
    target = processor_target(processor)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 900 wide and 300 high, shown turned a quarter: 300 wide and 900 high
    body = request(url_of(picture((900, 300)), "JPEG", exif=exif.tobytes()))
    assert fit_images(body, target) == 1
    fitted = image_of(urls(body)[0])
    assert (fitted.height, fitted.width) == target(900, 300) and fitted.height > fitted.width


@pytest.mark.parametrize("mode, kept", [("P", "RGB"), ("P transparent", "RGBA"), ("1", "RGB"), ("I;16", "RGB"),
                                        ("LA", "LA"), ("CMYK", "RGB")])
def test_every_mode_is_fitted_transparency_kept(processor, mode, kept):
    """The engine's processor puts a transparent image on white: the fitted one is still transparent."""
    image = picture((600, 600)).convert(mode.split()[0])
    if mode == "P transparent":
        image.info["transparency"] = 0
    body = request(url_of(image, "JPEG" if mode == "CMYK" else "PNG"))
    assert fit_images(body, processor_target(processor)) == 1
    assert image_of(urls(body)[0]).mode == kept


def test_without_a_processor_that_says_its_size_nothing_is_fitted(tiny_text):
    assert processor_target(model_processor(tiny_text["model"])) is None
    assert processor_target(None) is None
