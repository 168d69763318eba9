"""Completions with the rewards VLM-R1's Qwen module gives them (`iou_reward`, `format_reward_rec` in
om-ai-lab/VLM-R1 src/open-r1-multimodal/src/open_r1/vlm_modules/qwen_module.py), worked out from its rules and
checked once against that code; the code itself is not part of this repository.

Two images, as the tiny Qwen2.5-VL processor (patch 14, merge 2, 784 to 12544 pixels) resizes them:
  wide  200x100 -> 140x56 input, label [40, 20, 120, 80] = [28, 11.2, 84, 44.8] in the input's pixels
  small  30x20  ->  28x28 input, label [3, 2, 24, 18]   = [2.8, 2.8, 22.4, 25.2]
VLM-R1 scales the answered box from input pixels to the original image and takes its pixel IoU with the label.
"""

IMAGES = {"wide": ((200, 100), [40, 20, 120, 80]), "small": ((30, 20), [3, 2, 24, 18])}
GOOD = '{"bbox_2d": [28, 11, 84, 45]}'

# (row, completion, iou, format, what it shows)
TABLE = [
    ("wide", f"<think>the red box</think><answer>{GOOD}</answer>", 0.9882, 1, "a well-formed answer"),
    ("wide", "<think>it is at [28, 11, 84, 45]</think>", 0.0, 0, "a box in <think> without <answer> scores 0"),
    ("wide", "[28, 11, 84, 45]", 0.0, 0, "a bare box scores 0"),
    ("wide", '<think>x</think><answer>{"bbox_2d": [28.0, 11.0, 84.0, 45.0]}</answer>', 0.0, 0, "floats"),
    ("wide", '<think>x</think><answer>{"bbox_2d": [-5, 11, 84, 45]}</answer>', 0.0, 0, "a negative number"),
    ("wide", '<think>x</think><answer>{"bbox_2d": [ 28, 11, 84, 45 ]}</answer>', 0.0, 0, "inner spaces"),
    ("wide", f"Sure. <think>look</think><answer>{GOOD}</answer>", 0.9882, 1, "text before <think>"),
    ("wide", f"<think>look</think><answer>{GOOD}</answer> Done.", 0.9882, 1, "text after </answer>"),
    ("wide", "<think>look</think><answer>[28, 11, 84, 45]</answer>", 0.9882, 0, "no {...} around the box"),
    ("wide", '<think>look</think>\n<answer>\n```json\n[{"bbox_2d": [28, 11, 84, 45], "label": "red"}]\n```\n'
             "</answer>", 0.9882, 1, "Qwen's fenced JSON list"),
    ("wide", '<think>two</think><answer>[{"bbox_2d": [0, 0, 20, 20]}, {"bbox_2d": [28, 11, 84, 45]}]</answer>',
     0.0, 1, "the first box counts"),
    ("wide", '<think>half</think><answer>{"bbox_2d": [56, 11, 112, 45]}</answer>', 0.3307, 1, "half overlap"),
    ("wide", '<think>far</think><answer>{"bbox_2d": [100, 0, 140, 10]}</answer>', 0.0, 1, "no overlap"),
    ("wide", '<think>edge</think><answer>{"bbox_2d": [84, 11, 140, 45]}</answer>', 0.0, 1, "touching edges"),
    ("wide", '<think>flip</think><answer>{"bbox_2d": [84, 45, 28, 11]}</answer>', 0.0, 1, "x2 < x1"),
    ("wide", '<think>tight</think><answer>{"bbox_2d":[28,11,84,45]}</answer>', 0.9882, 1, "no spaces at all"),
    ("wide", f"<answer>{GOOD}</answer><think>late</think>", 0.9882, 0, "<answer> before <think>"),
    ("wide", f"<think>a</think><answer>none</answer><answer>{GOOD}</answer>", 0.0, 1,
     "iou reads the first <answer> only; format's match may run past the first </answer>"),
    ("wide", f"<think>never closed <answer>{GOOD}</answer>", 0.9882, 0, "unclosed <think>"),
    ("wide", f"<think>gap</think>\n\n  <answer>{GOOD}</answer>", 0.9882, 1, "whitespace between the blocks"),
    ("wide", f"<think>gap</think> so <answer>{GOOD}</answer>", 0.9882, 0, "words between the blocks"),
    ("wide", '<think>x</think><answer>{"bbox_2d": [28, 11, 84, 45]</answer>', 0.9882, 0, "no closing }"),
    ("wide", "", 0.0, 0, "empty"),
    ("wide", '<think>all</think><answer>{"bbox_2d": [0, 0, 140, 56]}</answer>', 0.24, 1, "the whole image"),
    ("wide", '<think>tab</think><answer>{"bbox_2d": [28,\t11,\n84, 45]}</answer>', 0.9882, 1, "tab and newline"),
    ("small", '<think>s</think><answer>{"bbox_2d": [3, 3, 22, 25]}</answer>', 0.9521, 1, "an upscaled image"),
    ("small", '<think>s</think><answer>{"bbox_2d": [0, 0, 28, 28]}</answer>', 0.56, 1, "the whole small image"),
    ("small", '<think>s</think><answer>{"bbox_2d": [22, 3, 28, 25]}</answer>', 0.0, 1,
     "an overlap under one pixel counts as none"),
]
