"""A dense reward for tests only: a random policy scores 0 on iou and format, which gives zero gradients.

Any reward that varies between the completions of a group gives non-zero advantages; this one does.
"""


def token_sum(prompts, completions, completion_ids, **kwargs):
    return [float(sum(ids) % 101) / 100 for ids in completion_ids]
