"""Tiny random models made locally, with their data: a vision-language model (Qwen2.5-VL, Qwen2-VL or InternVL) with
its processor and a REC dataset (and the same rows as SFT answers), or a text-only causal LM (Qwen2 or Llama) with
chat rows in the three SFT formats.

Used by the tests, `vlmgrpo selftest` and the examples: nothing is downloaded.
"""

from __future__ import annotations

import json
import random
from importlib import resources
from pathlib import Path

from vlmgrpo.config.template import REC_QUESTION_TEMPLATE, fill_template
from vlmgrpo.models.tiny_tasks import write_task_rows

# Qwen2-VL's special tokens; ids follow the training order, so the model config reads them from the tokenizer.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# InternVL's image tokens, which its processor reads from the tokenizer's attributes of these names.
INTERNVL_TOKENS = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                   "video_token": "<video>"}
INTERNVL_IMAGE_SIZE = 56  # tiles of 56x56 pixels: 16 patches of 14, 4 tokens after the 0.5 pixel shuffle
COLORS = {"red": (220, 30, 30), "green": (30, 180, 30), "blue": (30, 60, 220), "yellow": (230, 210, 20)}
QUESTION = "Please provide the bounding box coordinate of the region this sentence describes: the {color} rectangle."


def chat_template(family: str = "qwen2_5_vl") -> str:
    """Qwen's ChatML template; InternVL's is the same with its own image and video placeholders."""
    template = resources.files("vlmgrpo").joinpath("templates/qwen2_vl_chat_template.jinja").read_text()
    if family == "internvl":
        template = template.replace("<|vision_start|><|image_pad|><|vision_end|>", "<IMG_CONTEXT>")
        template = template.replace("<|vision_start|><|video_pad|><|vision_end|>", "<video>")
    return template


def _corpus(rng: random.Random, lines: int = 2000) -> list[str]:
    """Text resembling prompts and answers, so the BPE learns useful merges for them."""
    words = ["<think>", "</think>", "<answer>", "</answer>", "bbox_2d", "the", "rectangle", "region", "box"]
    words += list(COLORS) + QUESTION.split()
    corpus = []
    for _ in range(lines):
        box = [rng.randint(0, 112) for _ in range(4)]
        corpus.append(" ".join(rng.choices(words, k=8)) + f' {{"bbox_2d": {box}}}')
    return corpus


def make_tokenizer(out_dir: Path, vocab_size: int = 600, seed: int = 0, named_tokens: dict[str, str] | None = None):
    """A byte-level BPE with Qwen's special tokens; named_tokens also become attributes (InternVL's image tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    named_tokens = named_tokens or {}
    specials = SPECIAL_TOKENS + list(named_tokens.values())
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(random.Random(seed)), trainer=trainer)
    wrapped = Qwen2TokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=specials[1:],
        model_max_length=4096,
        **({"extra_special_tokens": named_tokens} if named_tokens else {}),
    )
    wrapped.padding_side = "left"
    wrapped.save_pretrained(out_dir)
    return wrapped


VISION_FAMILIES = ("qwen2_5_vl", "qwen2_vl", "internvl")
TEXT_FAMILIES = ("qwen2", "llama")
FAMILIES = VISION_FAMILIES + TEXT_FAMILIES


def make_model_config(tokenizer, family: str = "qwen2_5_vl", head_dim: int = 16):
    """The tiny config of a vision-language family: 4 text attention heads and 2 vision heads of head_dim each (16:
    the smallest model; flash-attention 4's kernels take 64 to 256, so a GPU run of them asks for 128)."""
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    if family == "internvl":
        return internvl_config(tokenizer, ids)
    if head_dim < 16 or head_dim % 16:
        raise ValueError(f"head_dim {head_dim}: a multiple of 16 (the M-RoPE sections split head_dim / 2 as 2:3:3)")
    mrope_section = [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16]  # sums to head_dim / 2: [2, 3, 3] at 16
    text_config = dict(
        vocab_size=len(tokenizer),
        hidden_size=4 * head_dim,
        intermediate_size=8 * head_dim,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        # The three M-RoPE sections (time, height, width) must sum to head_dim / 2.
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": mrope_section},
        # transformers 4.x reads M-RoPE from these instead (the cu121 image carries 4.57).
        rope_scaling={"type": "mrope", "mrope_section": mrope_section},
        rope_theta=1000000.0,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    patches = dict(patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    if family == "qwen2_vl":
        config_class = Qwen2VLConfig
        vision_config = dict(depth=2, embed_dim=2 * head_dim, hidden_size=4 * head_dim, mlp_ratio=2, num_heads=2,
                             **patches)
    else:
        config_class = Qwen2_5_VLConfig
        vision_config = dict(depth=2, hidden_size=2 * head_dim, intermediate_size=4 * head_dim, num_heads=2,
                             out_hidden_size=4 * head_dim,
                             fullatt_block_indexes=[1], window_size=112, **patches)
    return config_class(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )


def internvl_config(tokenizer, ids: dict[str, int]):
    """InternVL (the transformers-native InternVLForConditionalGeneration): a vision tower, a pixel-shuffle
    projector and a Qwen2 language model."""
    from transformers import InternVLConfig

    patch = 14
    text_config = dict(
        model_type="qwen2", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
    )
    vision_config = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         image_size=INTERNVL_IMAGE_SIZE, patch_size=patch)
    return InternVLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=tokenizer.convert_tokens_to_ids(INTERNVL_TOKENS["context_image_token"]),
        image_seq_length=internvl_tokens_per_tile(patch),
        downsample_ratio=0.5,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )


def internvl_tokens_per_tile(patch: int = 14) -> int:
    return (INTERNVL_IMAGE_SIZE // patch) ** 2 // 4  # the 0.5 pixel shuffle merges 2x2 patches


def make_processor(tokenizer, family: str):
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLProcessor,
        InternVLVideoProcessor,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    if family == "internvl":
        tile = {"height": INTERNVL_IMAGE_SIZE, "width": INTERNVL_IMAGE_SIZE}
        # Up to 2 tiles plus a thumbnail per image, so training sees InternVL's tiling at a tiny size.
        return InternVLProcessor(
            image_processor=GotOcr2ImageProcessor(size=tile, crop_to_patches=True, min_patches=1, max_patches=2),
            tokenizer=tokenizer,
            video_processor=InternVLVideoProcessor(size=tile),
            image_seq_length=internvl_tokens_per_tile(),
            chat_template=chat_template(family),
        )
    pixel_limits = {"min_pixels": 28 * 28, "max_pixels": 112 * 112}
    processor_class = Qwen2VLProcessor if family == "qwen2_vl" else Qwen2_5_VLProcessor
    return processor_class(
        image_processor=Qwen2VLImageProcessor(**pixel_limits),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(**pixel_limits),
        chat_template=chat_template(family),
    )


def text_model_config(tokenizer, family: str):
    """A Qwen2 or Llama causal LM of the same tiny size as the vision-language models' language model."""
    from transformers import LlamaConfig, Qwen2Config

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config_class = Qwen2Config if family == "qwen2" else LlamaConfig
    return config_class(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
    )


def make_model(out_dir: str | Path, seed: int = 0, family: str = "qwen2_5_vl", head_dim: int = 16) -> Path:
    """Write a random tiny model of the family with tokenizer (and processor) and chat template to out_dir (head_dim:
    of the Qwen-VL families' attention heads, make_model_config)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(out_dir, seed=seed, named_tokens=INTERNVL_TOKENS if family == "internvl" else None)
    tokenizer.chat_template = chat_template(family)
    torch.manual_seed(seed)
    vision = family in VISION_FAMILIES
    config = make_model_config(tokenizer, family, head_dim) if vision else text_model_config(tokenizer, family)
    model_class = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    model = model_class.from_config(config).to(torch.float32)
    text = config.get_text_config()
    model.generation_config = GenerationConfig(
        eos_token_id=text.eos_token_id, pad_token_id=text.pad_token_id, do_sample=True
    )
    model.save_pretrained(out_dir)
    (make_processor(tokenizer, family) if vision else tokenizer).save_pretrained(out_dir)
    return out_dir


def make_images_and_rows(out_dir: str | Path, rows: int = 16, seed: int = 0) -> Path:
    """PNGs with one coloured rectangle each and a VLM-R1-style JSONL whose answers are those rectangles."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    out_dir = Path(out_dir)
    image_dir = out_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    lines, sft_lines, rectangles = [], [], []
    for index in range(rows):
        width, height = rng.choice([56, 84, 112]), rng.choice([56, 84, 112])
        x1, y1 = rng.randint(0, width // 2), rng.randint(0, height // 2)
        x2, y2 = rng.randint(x1 + 8, width), rng.randint(y1 + 8, height)
        color = rng.choice(list(COLORS))
        image = Image.new("RGB", (width, height), (245, 245, 245))
        ImageDraw.Draw(image).rectangle([x1, y1, x2 - 1, y2 - 1], fill=COLORS[color])
        name = f"{index:04d}.png"
        image.save(image_dir / name)
        rectangles.append((name, color, [x1, y1, x2, y2]))
        box = json.dumps({"bbox_2d": [x1, y1, x2, y2]})
        question = QUESTION.format(color=color)
        lines.append({"id": index, "image": name, "conversations": [
            {"from": "human", "value": "<image>" + question}, {"from": "gpt", "value": box}]})
        # The same row as an SFT target in the format the GRPO rewards ask for, with GRPO's prompt.
        sft_lines.append({"image": name, "conversations": [
            {"from": "human", "value": "<image>" + fill_template(REC_QUESTION_TEMPLATE, question)},
            {"from": "gpt", "value": f"<think>The {color} rectangle.</think> <answer>{box}</answer>"}]})
    data_file = out_dir / "rec.jsonl"
    write_jsonl(data_file, lines)
    write_jsonl(out_dir / "rec_sft.jsonl", sft_lines)
    write_task_rows(out_dir, rectangles, list(COLORS))  # VLM-R1's other tasks on the same images
    return data_file


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def make_chat_rows(out_dir: str | Path, rows: int = 16, seed: int = 0) -> dict[str, str]:
    """The same small task (name a rectangle's colour) as OpenAI messages, ShareGPT and Alpaca rows: rows of each."""
    rng = random.Random(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    formats: dict[str, list[dict]] = {"messages": [], "sharegpt": [], "alpaca": []}
    for index in range(rows):
        color, other = rng.sample(list(COLORS), 2)
        question, answer = f"Which colour is the {color} rectangle?", f"It is {color}."
        formats["messages"].append({"messages": [
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": f"Which colour is the {other} rectangle?"},
            {"role": "assistant", "content": f"It is {other}."},
            {"role": "user", "content": [{"type": "text", "text": question}]},
            {"role": "assistant", "content": answer}]})
        formats["sharegpt"].append({"conversations": [{"from": "human", "value": question},
                                                      {"from": "gpt", "value": answer}]})
        formats["alpaca"].append({"instruction": "Name the colour of the rectangle.",
                                  "input": f"the {color} rectangle" if index % 2 else "", "output": answer})
    paths = {}
    for name, format_rows in formats.items():
        paths[name] = str(out_dir / f"{name}.jsonl")
        write_jsonl(Path(paths[name]), format_rows)
    return paths


def make_tiny(out_dir: str | Path, rows: int = 16, seed: int = 0, family: str = "qwen2_5_vl") -> dict[str, str]:
    """Model in OUT/model; for a vision-language family images in OUT/data/images and rows in OUT/data/rec.jsonl (and
    as SFT answers in rec_sft.jsonl, and for VLM-R1's other tasks in OUT/data/tasks/{ovd,math,mcq,gui}.jsonl), for a
    text-only one chat rows in OUT/data/{messages,sharegpt,alpaca}.jsonl."""
    out_dir = Path(out_dir)
    model_dir = make_model(out_dir / "model", seed=seed, family=family)
    if family in TEXT_FAMILIES:
        return {"model": str(model_dir), **make_chat_rows(out_dir / "data", rows=rows, seed=seed)}
    data_file = make_images_and_rows(out_dir / "data", rows=rows, seed=seed)
    return {"model": str(model_dir), "data": str(data_file), "image_root": str(data_file.parent / "images"),
            "sft": str(data_file.parent / "rec_sft.jsonl")}
