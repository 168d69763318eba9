"""What the front counts and checks a prompt's text with: the model's processor (or tokenizer), the tokens it makes
of a prompt's text and images, and its special tokens."""

from __future__ import annotations

import logging
from typing import Callable, Optional

log = logging.getLogger("vlmgrpo")


def model_processor(model: str):
    """The model's processor (or tokenizer), which the front counts and checks prompts with; None when it does not
    load here (the engine still checks)."""
    try:
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(model)
    except Exception as exc:  # a model whose processor does not load here: the engine still checks
        log.warning("no processor of %s loaded here (%s): prompt lengths and special tokens are left to the engine",
                    model, exc)
        return None


def special_tokens(processor) -> tuple[str, ...]:
    """The model's special tokens as text (its chat template's turn markers, its image placeholders): the engine
    reads them in a client's text as the tokens themselves."""
    if processor is None:
        return ()
    tokenizer = getattr(processor, "tokenizer", processor)
    found = set(getattr(tokenizer, "all_special_tokens", []) or [])
    found |= {token.content for token in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values()
              if getattr(token, "special", False)}
    return tuple(sorted(token for token in found if isinstance(token, str) and token))


def prompt_tokens(processor) -> Optional[Callable[[str, list], int]]:
    """How many tokens the model makes of a prompt's text and of its images, given as (height, width) (what the
    front checks a prompt's length with, before the engine works on a prompt longer than the model's context).
    Images count where the model's processor says how many tokens an image of a size makes (as vLLM asks it), else
    the engine checks them; None without a processor (model_processor)."""
    if processor is None:
        return None
    tokenizer = getattr(processor, "tokenizer", processor)
    per_image = _image_tokens(processor)

    def count(text: str, image_sizes: list) -> int:
        # verbose=False: a text over the model's length is what is being measured, not a warning to print
        tokens = len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
        return tokens + (sum(per_image(image_sizes)) if per_image and image_sizes else 0)

    return count


def _image_tokens(processor) -> Optional[Callable[[list], list]]:
    """The tokens each image of these sizes makes, by the processor's own settings; None where it does not say."""
    def per_image(sizes: list) -> list:
        return processor._get_num_multimodal_tokens(image_sizes=sizes).num_image_tokens

    try:
        if isinstance(per_image([(28, 28)])[0], int):
            return per_image
    except Exception as exc:  # a text-only tokenizer, or a processor without the method: not counted here
        log.info("the processor of this model does not say how many tokens an image makes (%s): the engine checks "
                 "prompts with images", exc.__class__.__name__)
    return None
