"""The question template of GRPO's grounding prompts (RecDataConfig.question_template): VLM-R1's REC prompt and its
placeholder. Standard library only, as sections.py, so that `make-tiny` and `--help` start without TRL."""

from __future__ import annotations

# {question} is replaced by the row's question; VLM-R1 spells it {Question}, which works too.
QUESTION_PLACEHOLDERS = ("{question}", "{Question}")
REC_QUESTION_TEMPLATE = (
    "{question} First output the thinking process in <think> </think> tags and then output the final answer in "
    "<answer> </answer> tags. Output the final answer in JSON format."
)


# VLM-R1's question template per --task_type (its Qwen module's get_question_template, word for word: the prompt is
# part of the recipe); any other task type, "gui" included, gets the default. Its InternVL module asks every task
# with the default.
TASK_DEFAULT_TEMPLATE = ("{question} First output the thinking process in <think> </think> tags and then output the "
                         "final answer in <answer> </answer> tags.")
TASK_QUESTION_TEMPLATES = {
    "rec": REC_QUESTION_TEMPLATE,
    "ic": "{question} First thinks about the reasoning process in the mind and then provides the user with the answer. "
          "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
          "respectively, i.e., <think> reasoning process here </think><answer> json format answer here </answer>",
    "odLength": "First thinks about the reasoning process in the mind and then provides the user with the answer. The "
                "reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
                "respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>\n{question}",
}
TASK_TYPES = ("rec", "ic", "odLength", "default", "gui", "gui_defect")  # gui_defect: run_grpo_gui_defect_detection.sh


def task_template(task_type: str) -> str:
    return TASK_QUESTION_TEMPLATES.get(task_type, TASK_DEFAULT_TEMPLATE)


def fill_template(template: str, question: str) -> str:
    for placeholder in QUESTION_PLACEHOLDERS:
        template = template.replace(placeholder, question)
    return template
