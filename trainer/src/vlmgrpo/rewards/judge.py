"""VLM-R1's `llm` accuracy method: a judge model behind an OpenAI-compatible endpoint (vLLM, `transformers serve`,
`vlmgrpo serve` of another model) says 1.0 or 0.0 for the answer against the label, with VLM-R1's prompt at
temperature 0 (grpo_jsonl.py's evaluate_answer_similarity).

The endpoint and model are named in the config (judge_url, judge_model; the key in the environment variable
judge_api_key_env names). `train`, `score` and `--dry-run` check that the endpoint answers and serves the model
before any weights load. During training each call has a timeout and retries, rows are judged judge_concurrency at
a time, and a call that still fails, or an answer that is not a number, is scored as VLM-R1 scores it (1.0 when the
answer equals the label) with a warning naming the row count and the reason: never a silent 0.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from vlmgrpo.rewards.answer import label_answer, last_answer
from vlmgrpo.errors import ConfigError

log = logging.getLogger("vlmgrpo")

# VLM-R1's two user turns, word for word: the judge's numbers depend on them.
INSTRUCTION = ("You are a evaluation expert. First, analyze the student's response to identify and extract their "
               "final answer. Then, compare the extracted answer with the correct solution. Output ONLY '1.0' if the "
               "extracted answer matches the correct solution in meaning, or '0.0' if the student's response does "
               "not contain a clear or correct answer. No other output is allowed.")
QUESTION = "Student's response: {answer}\nCorrect solution: {label}\nOutput only 1.0 or 0.0:"


@dataclass(frozen=True)
class Judge:
    url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    max_retries: int = 2
    concurrency: int = 8
    max_tokens: int = 16

    @classmethod
    def from_config(cls, reward: Any) -> Optional["Judge"]:
        """The config's judge, or None when judge_url is unset."""
        if not getattr(reward, "judge_url", None):
            return None
        return cls(reward.judge_url.rstrip("/"), reward.judge_model or "", reward.judge_api_key_env,
                   reward.judge_timeout, reward.judge_max_retries, reward.judge_concurrency, reward.judge_max_tokens)

    def client(self):
        from openai import OpenAI

        # An endpoint without keys takes any: the openai client wants one all the same.
        return OpenAI(base_url=self.url, api_key=os.environ.get(self.api_key_env) or "none",
                      timeout=self.timeout_s, max_retries=self.max_retries)

    def check(self, where: str) -> None:
        """ConfigError (one line) unless the endpoint answers and lists judge_model."""
        if not self.model:
            raise ConfigError(f"{where}: key 'judge_model': rows are scored by the llm method: name the model "
                              f"{self.url} serves")
        try:
            served = [model.id for model in self.client().with_options(max_retries=0).models.list()]
        except Exception as error:  # noqa: BLE001 - any failure to reach it is the same line to the user
            raise ConfigError(f"{where}: key 'judge_url': the judge at {self.url} did not answer GET /models "
                              f"({error.__class__.__name__}: {str(error)[:200]}); start it, or fix judge_url or the "
                              f"key in ${self.api_key_env}") from None
        if self.model not in served:
            raise ConfigError(f"{where}: key 'judge_model': {self.url} serves {', '.join(served) or 'no model'}, "
                              f"not {self.model!r}")

    def scores(self, completions: list[str], labels: list[str]) -> list[float]:
        pairs = [(last_answer(completion), label_answer(label)) for completion, label in zip(completions, labels)]
        client = self.client()
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            verdicts = list(pool.map(lambda pair: _verdict(client, self.model, *pair, self.max_tokens), pairs))
        fallen = [reason for _, reason in verdicts if reason]
        if fallen:
            log.warning("judge %s: %d of %d answers scored by exact match instead (%s)", self.model, len(fallen),
                        len(pairs), fallen[0])
        return [score for score, _ in verdicts]


def _verdict(client, model: str, answer: str, label: str, max_tokens: int = 16) -> tuple[float, str]:
    """(score, why it is the exact-match fallback or ""). VLM-R1 sets no token limit; a verdict is a few tokens, and
    a judge that goes on would not be read as a number either way."""
    try:
        response = client.chat.completions.create(model=model, temperature=0, max_tokens=max_tokens, messages=[
            {"role": "user", "content": INSTRUCTION},
            {"role": "user", "content": QUESTION.format(answer=answer, label=label)}])
        said = (response.choices[0].message.content or "").strip()
    except Exception as error:  # noqa: BLE001 - after the client's retries: VLM-R1's fallback, said aloud
        return (1.0 if answer == label else 0.0), f"{error.__class__.__name__}: {str(error)[:120]}"
    try:
        return float(said), ""
    except ValueError:
        return (1.0 if answer == label else 0.0), f"the judge said {said[:60]!r}, not a number"
