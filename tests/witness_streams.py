"""Hand-built streams for the witness tests: one request whose chunks arrive at given
milliseconds, one token each, sent 50 ms before its first."""

from __future__ import annotations

from tokenwatt.records import RequestRecord

MS = 1_000_000


def stream(rid: int, stamps_ms: list[int]) -> RequestRecord:
    """Request ``rid`` with a one-token chunk at each of ``stamps_ms``."""
    ns = [t * MS for t in stamps_ms]
    return RequestRecord(
        request_id=str(rid), scheduled_ns=ns[0] - 50 * MS, prompt_tokens_client=8, max_tokens=99,
        sent_ns=ns[0] - 50 * MS, first_token_ns=ns[0], end_ns=ns[-1], done_ns=ns[-1],
        chunk_ns=ns, chunk_tokens=[1] * len(ns), prompt_tokens=8, completion_tokens=len(ns),
        saw_done=True,
    )  # fmt: skip
