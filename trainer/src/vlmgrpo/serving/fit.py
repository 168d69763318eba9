"""Images made the size the model takes before the engine sees them.

The engine works on one request at a time (transformers serve batches text models only), and a valid request of 8
PNGs of 4096 x 4096 held it 8.6 s (bench/RESULTS.md, section 17): decoding 128 megapixels, then the model's
processor shrinking each to the few thousand pixels the model takes. Every request behind it waited. The front
decodes every image anyway to check it, in its check threads: there, an image larger than the model takes is shrunk
to the very size the model's processor would give it (its own rule, read from the processor), so the processor has
nothing left to shrink and the engine decodes a few kilobytes. An image the model takes as it is goes on untouched.
"""

from __future__ import annotations

import base64
import io
import logging
from typing import Callable, Optional

from vlmgrpo.models.resize import resize_function
from vlmgrpo.serving.requests import image_parts

log = logging.getLogger("vlmgrpo")

# (height, width) of an image -> (height, width) the model's processor resizes it to
Target = Callable[[int, int], tuple[int, int]]


def processor_target(processor) -> Optional[Target]:
    """The size the model's processor gives an image, where it resizes by a pixel budget (the Qwen-VL family:
    models/resize.py, as the rewards scale boxes); None where it does not say (the engine then resizes, as before)."""
    resize = resize_function(processor)
    if resize is None:
        log.info("the processor of this model does not say what size it resizes images to: the engine resizes them")
        return None

    def target(height: int, width: int) -> tuple[int, int]:
        fitted_width, fitted_height = resize(width, height)
        return fitted_height, fitted_width

    try:
        target(28, 28)
    except Exception as exc:  # a processor without the budget's sizes: leave the resizing to the engine
        log.info("the processor's sizes do not make a target (%s): the engine resizes images", exc.__class__.__name__)
        return None
    return target


def fit_images(body: dict, target: Target) -> int:
    """Each inline image of a checked request larger than the model takes, shrunk in place to the size its processor
    would give it (as a PNG, lossless); the count shrunk. Images the model takes as they are, or that the processor
    would enlarge, are left as they came, undecoded."""
    from PIL import ExifTags, Image, ImageOps

    shrunk = 0
    for _, part, url in image_parts(body):
        header, _, payload = url.partition(",")
        if not header.startswith("data:"):
            continue
        with Image.open(io.BytesIO(base64.b64decode(payload))) as image:
            # the engine turns an image as its EXIF says before it resizes (transformers' load_image), and the PNG
            # made here keeps no EXIF: the size to fit is the upright one, and the image is turned first
            turned = image.getexif().get(ExifTags.Base.Orientation, 1) in (5, 6, 7, 8)
            height, width = (image.width, image.height) if turned else (image.height, image.width)
            fitted_height, fitted_width = target(height, width)
            if fitted_height * fitted_width >= height * width:
                continue
            image.draft(None, (fitted_height, fitted_width) if turned else (fitted_width, fitted_height))  # a JPEG
            # decodes at 1/2 to 1/8 of its size where that is still at least the size to fit
            upright = ImageOps.exif_transpose(image)
            if upright.mode not in ("RGB", "RGBA", "L", "LA"):  # palettes and bit depths do not resample
                upright = upright.convert("RGBA" if upright.has_transparency_data else "RGB")
            small = upright.resize((fitted_width, fitted_height), Image.Resampling.BICUBIC)
        buffer = io.BytesIO()
        small.save(buffer, "PNG", compress_level=1)
        part["image_url"] = {**part["image_url"], "url": "data:image/png;base64,"
                             + base64.b64encode(buffer.getvalue()).decode()}
        shrunk += 1
    return shrunk
