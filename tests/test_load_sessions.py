"""Conversations planned in virtual time: each turn is due when the previous answer ended plus
its think time, resends the whole history, and sessions start on a schedule or a trace."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tokenwatt.errors import SpecError
from tokenwatt.spec.workload import ThinkExponential, ThinkUniform, Workload
from tokenwatt.traffic.arrivals import OpenLoopSchedule
from tokenwatt.traffic.sessions import (
    Conversation,
    SessionPlanner,
    mean_turns,
    session_rate_rps,
    think_times_ns,
)
from tokenwatt.traffic.traces import TraceReplay, parse_azure

S = 10**9


def planner(workload: dict, starts: list[int], seed: int = 0) -> list[Conversation]:
    return list(
        SessionPlanner(Workload.model_validate(workload), seed=seed, starts_ns=iter(starts))
    )


def test_turns_wait_for_the_answer_plus_think_time() -> None:
    w = {
        "input_tokens": 5,
        "output_tokens": 7,
        "sessions": {"turns": 3, "think_time_s": {"kind": "fixed", "value_s": 2.0}},
    }
    (conv,) = planner(w, [3 * S])
    assert conv.turns == 3 and conv.think_ns == (2 * S, 2 * S)
    t0 = conv.first_turn()
    assert (t0.session_id, t0.turn, t0.due_ns, t0.max_tokens) == (0, 0, 3 * S, 7)
    assert [m.role for m in t0.messages] == ["user"] and t0.prompt_tokens_client == 5
    assert t0.history_tokens_client == 0
    # the answer ends at 4.5 s: the next turn is due 2 s later, whatever the due time was
    t1 = conv.answer_ended(4 * S + S // 2, "one two three", 3)
    assert t1 is not None and t1.due_ns == 6 * S + S // 2
    assert [m.role for m in t1.messages] == ["user", "assistant", "user"]
    assert t1.messages[1].content == "one two three"  # the answer, resent as written
    assert t1.history_tokens_client == 5 + 3 and t1.prompt_tokens_client == 5 + 3 + 5
    assert t1.messages[0] == t0.messages[0]  # the history is a prefix of the new prompt
    assert [m["role"] for m in t1.chat_messages()] == ["user", "assistant", "user"]
    assert t1.chat_messages()[1] == {"role": "assistant", "content": "one two three"}
    t2 = conv.answer_ended(10 * S, "a b c d e f g")  # token count falls back to words
    assert t2 is not None and t2.due_ns == 12 * S and t2.turn == 2
    assert t2.history_tokens_client == 5 + 3 + 5 + 7
    assert conv.answer_ended(13 * S, "end") is None  # three turns, then the session is over
    with pytest.raises(RuntimeError, match="no turn is waiting"):
        conv.answer_ended(14 * S, "again")
    with pytest.raises(RuntimeError, match="already started"):
        conv.first_turn()


def test_a_late_answer_delays_the_next_turn_not_the_plan() -> None:
    """Due times follow the answers; what is sent does not depend on how fast they came."""
    w = {
        "input_tokens": 4,
        "sessions": {"turns": 2, "think_time_s": {"kind": "fixed", "value_s": 1}},
    }
    fast, slow = planner(w, [0])[0], planner(w, [0])[0]
    fast.first_turn(), slow.first_turn()
    a = fast.answer_ended(1 * S, "x", 1)
    b = slow.answer_ended(30 * S, "x", 1)
    assert a is not None and b is not None
    assert (a.due_ns, b.due_ns) == (2 * S, 31 * S)
    assert a.messages == b.messages


def test_shared_prefix_is_the_system_message() -> None:
    w = {
        "input_tokens": 3,
        "shared_prefix": {"count": 2, "length": 20},
        "sessions": {"turns": 2},
    }
    convs = planner(w, list(range(0, 40 * S, S)))
    systems: dict[int | None, set[str]] = {}
    for c in convs:
        t = c.first_turn()
        assert t.messages[0].role == "system" and t.messages[0].tokens_client == 20
        assert len(t.messages[0].content.split()) == 20
        assert t.prompt_tokens_client == 23 and t.history_tokens_client == 20
        systems.setdefault(t.prefix_id, set()).add(t.messages[0].content)
    assert sorted(systems) == [0, 1] and all(len(v) == 1 for v in systems.values())


def test_sessions_start_on_a_poisson_schedule_or_a_trace() -> None:
    w = {"sessions": {"turns": {"kind": "uniform", "min": 1, "max": 6}}}
    starts = OpenLoopSchedule("poisson", 2.0, 5).first(500)
    convs = planner(w, starts, seed=5)
    assert [c.start_ns for c in convs] == starts
    assert [c.first_turn().due_ns for c in convs] == starts
    turns = np.asarray([c.turns for c in convs])
    assert set(turns.tolist()) == {1, 2, 3, 4, 5, 6}
    assert turns.mean() == pytest.approx(3.5, abs=0.25)  # sd of the mean ≈ 0.08
    assert all(len(c.think_ns) == c.turns - 1 for c in convs)
    # reproducible from the seed (fresh plans: first_turn above moved the others on)
    assert planner(w, starts[:20], seed=5) == planner(w, starts, seed=5)[:20]
    assert planner(w, starts[:20], seed=6) != planner(w, starts, seed=5)[:20]
    trace = parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,1\n2.5,1,1\n", Path("t"))
    offs = TraceReplay(trace, prompt_format="text", seed=0).offsets_ns()
    assert [c.start_ns for c in planner(w, list(offs))] == [0, 2_500_000_000]


def test_think_time_distributions() -> None:
    rng = np.random.default_rng(1)
    g = np.asarray(think_times_ns(ThinkExponential(mean_s=5.0), rng, 5000)) / 1e9
    assert stats.kstest(g, "expon", args=(0, 5.0)).pvalue > 0.001
    u = np.asarray(think_times_ns(ThinkUniform(min_s=1.0, max_s=3.0), rng, 5000)) / 1e9
    assert u.min() >= 1.0 and u.max() <= 3.0 and u.mean() == pytest.approx(2.0, abs=0.05)


def test_rates_in_sessions_or_turns() -> None:
    w = Workload.model_validate({"sessions": {"turns": {"kind": "uniform", "min": 2, "max": 6}}})
    assert w.sessions is not None
    assert mean_turns(w.sessions.turns) == 4.0
    assert session_rate_rps(8.0, "turns", w.sessions.turns) == 2.0  # 8 turns/s ÷ 4 turns
    assert session_rate_rps(8.0, "sessions", w.sessions.turns) == 8.0
    ln = Workload.model_validate(
        {"sessions": {"turns": {"kind": "lognormal", "median": 4, "sigma": 0.3}}}
    )
    assert ln.sessions is not None
    # E[lognormal] = median·exp(σ²/2) = 4.18; rounding to whole turns shifts it little
    assert mean_turns(ln.sessions.turns) == pytest.approx(4 * np.exp(0.045), abs=0.03)
    with pytest.raises(SpecError, match="positive number of turns/s"):
        session_rate_rps(0.0, "turns", w.sessions.turns)
    with pytest.raises(SpecError, match=r"workload\.sessions: not set"):
        SessionPlanner(Workload(), seed=0, starts_ns=iter([0]))
    with pytest.raises(ValueError, match="drop the dataset"):
        Workload.model_validate({"sessions": {}, "dataset": {"path": "x.json"}})


def test_turns_are_bounded_by_the_plan() -> None:
    (conv,) = planner({"sessions": {"turns": 1}}, [0])
    conv.first_turn()
    assert conv.answer_ended(S, "done") is None
    assert (
        list(
            itertools.islice(
                SessionPlanner(
                    Workload.model_validate({"sessions": {}}), seed=0, starts_ns=iter([])
                ),
                3,
            )
        )
        == []
    )
