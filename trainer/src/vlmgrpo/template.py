"""The question template of GRPO's grounding prompts (RecDataConfig.question_template): VLM-R1's REC prompt and its
placeholder. Kept apart from sections.py, which imports trl, so that `make-tiny` starts without it."""

from __future__ import annotations

# {question} is replaced by the row's question; VLM-R1 spells it {Question}, which works too.
QUESTION_PLACEHOLDERS = ("{question}", "{Question}")
REC_QUESTION_TEMPLATE = (
    "{question} First output the thinking process in <think> </think> tags and then output the final answer in "
    "<answer> </answer> tags. Output the final answer in JSON format."
)


def fill_template(template: str, question: str) -> str:
    for placeholder in QUESTION_PLACEHOLDERS:
        template = template.replace(placeholder, question)
    return template
