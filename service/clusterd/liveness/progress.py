"""Hangs and stragglers by progress: what ranks that still beat say of their steps.

A rank stuck in a collective, or whose main thread deadlocked, keeps beating (the beat comes from
its own thread): silence never shows it, its step does. And a slow node shows in its ranks' step
times long before anyone notices the job is slow.

Everything here is the job's word (its step, its step time, its stacks): it decides only about
that job (a restart of it, a name in its status), never about a node.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from clusterd.liveness.table import RankBeat

_DETAIL_STACK = 2048  # characters of the named rank's main thread stack kept in the restart's detail


@dataclass(frozen=True)
class ProgressRules:
    """Service-wide (nothing per job): see LivenessConfig."""

    hang_factor: float = 10.0  # 0: off
    hang_floor_seconds: float = 300.0
    straggler_factor: float = 1.3  # 0: off
    straggler_window_steps: int = 20
    hang_after_advances: int = 3  # a rank is judged once clusterd saw its step advance this often


def stalled_ranks(ranks: dict[int, RankBeat], rules: ProgressRules, now: float) -> list[int]:
    """Ranks whose step has not moved for ``hang_factor`` times their pace (at least the floor).

    The pace is the slower of the rank's claimed step time and the running average of the gaps
    between its advances as clusterd saw them: a job that reports its step only at save(step),
    every ten minutes, advances every ten minutes whatever its step time. Only ranks clusterd saw
    advance ``hang_after_advances`` times in this run are judged: before that there is no pace.
    """
    if rules.hang_factor <= 0:
        return []
    out = []
    for rank, beat in ranks.items():
        if beat.advanced <= 0 or beat.advances < rules.hang_after_advances:
            continue
        pace = max(beat.step_seconds, beat.advance_gap)
        limit = max(rules.hang_floor_seconds, rules.hang_factor * pace)
        if now - beat.advanced > limit:
            out.append(rank)
    return sorted(out)


def odd_ranks(ranks: dict[int, RankBeat], stalled: list[int]) -> list[int]:
    """The ranks to blame: those that stopped while others went on; when all stopped (a collective
    waits on its slowest member), those whose main thread stands elsewhere than the most common
    place; else the ranks furthest behind; else all of them."""
    if len(stalled) < len(ranks):
        return stalled
    signatures = Counter(ranks[r].stack_sig for r in stalled if ranks[r].stack_sig)
    if len(signatures) > 1:
        (common, count), (_, second) = signatures.most_common(2)
        if count > second:
            return sorted(r for r in stalled if ranks[r].stack_sig and ranks[r].stack_sig != common)
    low = min(ranks[r].step for r in stalled)
    behind = [r for r in stalled if ranks[r].step == low]
    return behind if len(behind) < len(stalled) else stalled


def hang_detail(ranks: dict[int, RankBeat], stalled: list[int], named: list[int], stuck_for: float) -> str:
    """The restart's detail: who stopped, where, and the first named rank's stack (bounded)."""
    who = ", ".join(f"rank {r} on {ranks[r].node} at step {ranks[r].step}" for r in named[:8])
    more = f" (+{len(named) - 8} more)" if len(named) > 8 else ""
    text = f"{len(stalled)} of {len(ranks)} ranks stopped advancing for {stuck_for:.1f}s while beating; {who}{more}"
    stack = next((ranks[r].stack for r in named if ranks[r].stack), "")
    if stack:
        main = stack.split("\n\n", 1)[0]  # the main thread (sent first): its innermost frames, last
        text += f"\nstack of rank {next(r for r in named if ranks[r].stack)}:\n{main[-_DETAIL_STACK:]}"
    return text


def stragglers(ranks: dict[int, RankBeat], rules: ProgressRules) -> dict[str, float]:
    """Nodes whose ranks' median step time is ``straggler_factor`` times the other nodes' median or
    more, counting ranks that did ``straggler_window_steps`` steps in this run; node -> the ratio."""
    if rules.straggler_factor <= 0:
        return {}
    per_node: dict[str, list[float]] = {}
    for beat in ranks.values():
        if beat.step_seconds > 0 and beat.step - beat.first_step >= rules.straggler_window_steps and not beat.exiting:
            per_node.setdefault(beat.node, []).append(beat.step_seconds)
    if len(per_node) < 2:
        return {}
    medians = {node: statistics.median(times) for node, times in per_node.items()}
    overall = statistics.median(medians.values())  # of three or more nodes: one slow node barely moves it
    found = {}
    for node, median in medians.items():
        # Of two nodes, each is compared with the other one.
        base = next(m for n, m in medians.items() if n != node) if len(medians) == 2 else overall
        if median >= rules.straggler_factor * base:
            found[node] = round(median / base, 2)
    return found
