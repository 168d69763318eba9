"""VLM-R1's `llm` accuracy method: a judge model behind an OpenAI-compatible endpoint (vLLM, `transformers serve`,
`vlmgrpo serve` of another model) says 1.0 or 0.0 for the answer against the label, with VLM-R1's prompt at
temperature 0 (grpo_jsonl.py's evaluate_answer_similarity).

The endpoint and model are named in the config (judge_url, judge_model; the key only in the environment variable
judge_api_key_env names, never in the URL). `train`, `score` and `--dry-run` check that the endpoint answers and
serves the model before any weights load. During training rows are judged judge_concurrency at a time, and each call
(connecting, sending, every read, the client's retries) has one deadline, judge_timeout: the whole exchange is
cancelled when it passes, so a judge that drips a byte at a time cannot hold a step. A call that fails, or an answer
that is not a number, is scored as VLM-R1 scores it (1.0 when the answer equals the label); a number that is not a
verdict (NaN, infinite, outside 0..1) scores 0. Each kind is one warning line per batch with its count; a judge that
gives no valid verdict in its first calls stops the run with one line (a reward that is all fallbacks teaches
nothing).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional
from urllib.parse import urlsplit, urlunsplit

from vlmgrpo.rewards.answer import label_answer, last_answer
from vlmgrpo.errors import ConfigError

log = logging.getLogger("vlmgrpo")

# VLM-R1's two user turns, word for word: the judge's numbers depend on them.
INSTRUCTION = ("You are a evaluation expert. First, analyze the student's response to identify and extract their "
               "final answer. Then, compare the extracted answer with the correct solution. Output ONLY '1.0' if the "
               "extracted answer matches the correct solution in meaning, or '0.0' if the student's response does "
               "not contain a clear or correct answer. No other output is allowed.")
QUESTION = "Student's response: {answer}\nCorrect solution: {label}\nOutput only 1.0 or 0.0:"

# The prompt asks for 1.0 or 0.0: a verdict is a number from 0 to 1. NaN would make GRPO's advantages NaN (nothing
# learnt, exit 0), and 1e30 or -50 would drown every other reward, so neither reaches the reward.
VERDICT_RANGE = (0.0, 1.0)
# A judge with no valid verdict in this many calls is misconfigured (another model, a prompt it does not follow),
# not unlucky: the run stops rather than train on fallbacks.
FIRST_CALLS = 16

# Why a row has no valid verdict: the first two are scored by exact match (VLM-R1's fallback), the others 0.
FAILED, NOT_A_NUMBER, NOT_FINITE, OUT_OF_RANGE = "failed", "not a number", "not finite", "out of range"
_SAID = {FAILED: "answers scored by exact match instead (the call failed: {detail}",
         NOT_A_NUMBER: "answers scored by exact match instead (the judge said {detail}, not a number",
         NOT_FINITE: "verdicts scored 0 (the judge said {detail}, not a finite number",
         OUT_OF_RANGE: "verdicts scored 0 (the judge said {detail}, outside 0 to 1"}


class Verdict(NamedTuple):
    score: float
    problem: str = ""  # "" for a valid verdict, else one of the kinds above
    detail: str = ""


def without_userinfo(url: str) -> str:
    """The URL with any user:password@ replaced by ***@, for messages and saved configs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def credentials_problem(url: str, key_variable: str) -> Optional[str]:
    """Why judge_url is refused: userinfo in it would be sent as Basic auth instead of the key, silently, and end up
    in logs and the saved config."""
    if without_userinfo(url) == url:
        return None
    return (f"credentials in the URL are not taken ({without_userinfo(url)}); put the key in ${key_variable} "
            "(judge_api_key_env names the variable) and give judge_url without user:password@")


@dataclass
class Tally:
    """What the judge said so far in this process: calls, valid verdicts, and each kind of invalid one."""

    calls: int = 0
    valid: int = 0
    invalid: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class Judge:
    url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    max_retries: int = 2
    concurrency: int = 8
    max_tokens: int = 16
    where: str = "config"
    tally: Tally = field(default_factory=Tally, compare=False, repr=False)

    def __post_init__(self):
        problem = credentials_problem(self.url, self.api_key_env)
        if problem:
            raise ConfigError(f"{self.where}: key 'judge_url': {problem}")

    @classmethod
    def from_config(cls, reward: Any, where: str = "config") -> Optional["Judge"]:
        """The config's judge, or None when judge_url is unset."""
        if not getattr(reward, "judge_url", None):
            return None
        return cls(reward.judge_url.rstrip("/"), reward.judge_model or "", reward.judge_api_key_env,
                   reward.judge_timeout, reward.judge_max_retries, reward.judge_concurrency, reward.judge_max_tokens,
                   where)

    def client(self):
        from openai import AsyncOpenAI

        # An endpoint without keys takes any: the openai client wants one all the same. Its timeout bounds each
        # phase (connect, every read); the deadline around each call (_bounded) bounds the whole.
        return AsyncOpenAI(base_url=self.url, api_key=os.environ.get(self.api_key_env) or "none",
                           timeout=self.timeout_s, max_retries=self.max_retries)

    async def _bounded(self, request):
        """await request() within judge_timeout, retries included; past it the exchange is cancelled (its
        connection closed) and TimeoutError raised."""
        try:
            return await asyncio.wait_for(request(), self.timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer within judge_timeout {self.timeout_s:g} s") from None

    def check(self, where: str) -> None:
        """ConfigError (one line) unless the endpoint answers and lists judge_model."""
        if not self.model:
            raise ConfigError(f"{where}: key 'judge_model': rows are scored by the llm method: name the model "
                              f"{self.url} serves")

        async def listed():
            async with self.client() as client:
                async def ids():
                    return [model.id async for model in client.with_options(max_retries=0).models.list()]

                return await self._bounded(ids)

        try:
            served = _run(listed())
        except Exception as error:  # noqa: BLE001 - any failure to reach it is the same line to the user
            raise ConfigError(f"{where}: key 'judge_url': the judge at {self.url} did not answer GET /models "
                              f"({error.__class__.__name__}: {str(error)[:200]}); start it, or fix judge_url or the "
                              f"key in ${self.api_key_env}") from None
        if self.model not in served:
            raise ConfigError(f"{where}: key 'judge_model': {self.url} serves {', '.join(served) or 'no model'}, "
                              f"not {self.model!r}")

    def verdict(self, client, answer: str, label: str):
        """A coroutine: the Verdict on one answer, within the deadline. VLM-R1 sets no token limit; a verdict is a
        few tokens, and a judge that goes on would not be read as a number either way."""
        async def ask() -> Verdict:
            try:
                response = await self._bounded(lambda: client.chat.completions.create(
                    model=self.model, temperature=0, max_tokens=self.max_tokens, messages=[
                        {"role": "user", "content": INSTRUCTION},
                        {"role": "user", "content": QUESTION.format(answer=answer, label=label)}]))
                said = (response.choices[0].message.content or "").strip()
            except Exception as error:  # noqa: BLE001 - after the client's retries: VLM-R1's fallback, said aloud
                return Verdict(float(answer == label), FAILED, f"{error.__class__.__name__}: {str(error)[:120]}")
            return read_verdict(said, answer, label)

        return ask()

    def scores(self, completions: list[str], labels: list[str]) -> list[float]:
        pairs = [(last_answer(completion), label_answer(label)) for completion, label in zip(completions, labels)]

        async def judged() -> list[Verdict]:
            limit = asyncio.Semaphore(self.concurrency)

            async def one(answer: str, label: str) -> Verdict:
                async with limit:
                    return await self.verdict(client, answer, label)

            async with self.client() as client:
                return await asyncio.gather(*(one(*pair) for pair in pairs))

        verdicts = _run(judged()) if pairs else []
        self.count(verdicts)
        return [verdict.score for verdict in verdicts]

    def count(self, verdicts: list[Verdict]) -> None:
        """One warning line per kind of invalid verdict in this batch, with the run's count; ConfigError when the
        first FIRST_CALLS calls gave no valid verdict."""
        tally = self.tally
        tally.calls += len(verdicts)
        tally.valid += sum(1 for verdict in verdicts if not verdict.problem)
        for kind in _SAID:
            found = [verdict for verdict in verdicts if verdict.problem == kind]
            if found:
                tally.invalid[kind] += len(found)
                log.warning("judge %s: %d of %d %s; %d so far)", self.model, len(found), len(verdicts),
                            _SAID[kind].format(detail=found[0].detail), tally.invalid[kind])
        if tally.valid == 0 and tally.calls >= FIRST_CALLS:
            kinds = ", ".join(f"{count} {kind}" for kind, count in tally.invalid.items())
            raise ConfigError(f"{self.where}: key 'judge_url': the judge {self.model} at {self.url} returned no "
                              f"valid verdict in the first {tally.calls} calls ({kinds}); a verdict is a number from "
                              f"0 to 1 (VLM-R1's prompt asks for 1.0 or 0.0): check judge_model and that the endpoint "
                              "answers within judge_timeout")


def read_verdict(said: str, answer: str, label: str) -> Verdict:
    """The judge's text as a verdict: a finite number from 0 to 1; else why not, with the row's fallback score."""
    try:
        value = float(said)
    except ValueError:
        return Verdict(float(answer == label), NOT_A_NUMBER, repr(said[:60]))
    if not math.isfinite(value):
        return Verdict(0.0, NOT_FINITE, repr(said[:60]))
    if not VERDICT_RANGE[0] <= value <= VERDICT_RANGE[1]:
        return Verdict(0.0, OUT_OF_RANGE, repr(said[:60]))
    return Verdict(value)


def _run(coroutine):
    """Run a coroutine to its end from synchronous code, also where this thread already runs an event loop (a
    notebook): then in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
