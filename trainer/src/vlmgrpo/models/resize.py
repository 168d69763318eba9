"""The size a Qwen-VL image processor feeds the model an image at: what the rewards scale predicted boxes by
(loading.answer_space_and_resize) and what `serve` shrinks a larger image to before its engine sees it
(serving/fit.py). Light on purpose: transformers is imported only when a processor asks."""

from __future__ import annotations

from typing import Optional


def resize_function(processor) -> Optional[callable]:
    """(width, height) of an original image -> (width, height) the Qwen-VL image processor feeds the model."""
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None or not hasattr(image_processor, "merge_size"):
        return None
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    factor = image_processor.patch_size * image_processor.merge_size
    size = image_processor.size
    min_pixels = size.get("shortest_edge", size.get("min_pixels")) if hasattr(size, "get") else size.shortest_edge
    max_pixels = size.get("longest_edge", size.get("max_pixels")) if hasattr(size, "get") else size.longest_edge

    def resize(width: int, height: int) -> tuple[int, int]:
        new_height, new_width = smart_resize(height, width, factor=factor, min_pixels=min_pixels,
                                             max_pixels=max_pixels)
        return new_width, new_height

    return resize
