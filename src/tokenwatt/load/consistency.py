"""Greedy consistency: the references a consistency task is graded against.

A consistency task (``traffic.graded``) asks whether the engine's greedy answer to a prompt
under load is the answer it gives the same prompt alone. Before a probe's load starts, each
prompt of a small seeded pool is sent alone, one after another, greedy and free to stop; its
text is the reference. The pool comes from the spec's workload seed, so every probe of a run
uses the same prompts, and each probe takes its references afresh.
"""

from __future__ import annotations

import numpy as np

from tokenwatt.clock import now_ns
from tokenwatt.send.base import Streamer
from tokenwatt.spec import BenchSpec
from tokenwatt.traffic.graded import TASK_WORDS

__all__ = ["CONSISTENCY_POOL", "consistency_prompts", "consistency_references"]

_STREAM_POOL = 8  # the pool's random stream (traffic.workload uses 1–6, traffic.graded 7)
CONSISTENCY_POOL = 4  # distinct consistency prompts, each sent alone once per probe


def consistency_prompts(seed: int) -> list[str]:
    """The pool of consistency prompts of a seed (the spec's workload seed: the same pool in
    every probe of a run)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, _STREAM_POOL]))
    out = []
    for _ in range(CONSISTENCY_POOL):
        words = [TASK_WORDS[i] for i in rng.integers(0, len(TASK_WORDS), size=8)]
        out.append(f"Continue this text: {' '.join(words)}\nAnswer:")
    return out


async def consistency_references(spec: BenchSpec, client: Streamer) -> dict[str, str]:
    """Each consistency prompt's greedy answer sent alone, one after another (no other
    request in flight: call it before a probe's load starts); a prompt whose reference
    failed is left out (never graded). Empty without ``consistency`` among the tasks."""
    graded = spec.graded
    if graded is None or "consistency" not in graded.tasks:
        return {}
    refs: dict[str, str] = {}
    for k, prompt in enumerate(consistency_prompts(spec.workload.seed)):
        rec = await client.stream(
            request_id=-1 - k,
            scheduled_ns=now_ns(),
            prompt=prompt,
            max_tokens=graded.max_tokens,
            prompt_tokens_client=len(prompt.split()),
            ignore_eos=False,
            graded=True,
        )
        if rec.ok and rec.answer_text is not None:
            refs[prompt] = rec.answer_text.strip()
    return refs
