"""A dense reward for tests only: a random policy scores 0 on iou and format, which gives zero gradients."""


def distinct_tokens(prompts, completions, completion_ids, **kwargs):
    return [float(len(set(ids))) for ids in completion_ids]
