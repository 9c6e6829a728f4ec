"""Leaf-set selection: the combinatorial core of the planner, kept apart from policy and text.

Given, per leaf switch, the nodes that can take the request's per-node share, pick a set of
leaves and nodes for ``count`` nodes ordered by (1) fewest leaf switches, (2) lowest common
switch, (3) best fit: the fullest leaves that still fit, so that whole leaves stay free for
big jobs. Within the chosen leaves the fullest leaf is drained first and the roomiest leaf takes
the remainder, so what is left stays in as few pieces as possible.

Nodes that must be used (an explicit nodelist) are seeded first and their leaves count as
already chosen, like Slurm does with required nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clusterctl.hostlist import natural_key
from clusterd.topology.model import TopologyModel


@dataclass(frozen=True)
class Selection:
    leaves: tuple[str, ...]  # in fill order
    nodes: tuple[str, ...]
    common_switch: str | None
    spine_levels: int


def _best_fit_swap(chosen: list[str], pool: list[str], cap: Mapping[str, int], need: int) -> list[str]:
    """Swap chosen leaves for smaller unchosen ones while the set still covers ``need``.

    Greedy largest-first gives the fewest leaves; this pass then trades each leaf for the
    tightest one that still covers the need, so a big empty leaf is not spent when a fuller
    one would do.
    """
    chosen = list(chosen)
    changed = True
    while changed:
        changed = False
        total = sum(cap[x] for x in chosen)
        unchosen = sorted((x for x in pool if x not in chosen), key=lambda x: (cap[x], natural_key(x)))
        for i in sorted(range(len(chosen)), key=lambda i: -cap[chosen[i]]):
            old = chosen[i]
            for new in unchosen:
                if cap[new] >= cap[old]:
                    break
                if total - cap[old] + cap[new] >= need:
                    chosen[i] = new
                    changed = True
                    break
            if changed:
                break
    return chosen


def _leaves_for(leaves: Sequence[str], forced: Sequence[str], cap: Mapping[str, int], need: int) -> list[str] | None:
    """Fewest leaves (forced ones included) from ``leaves`` covering ``need`` more nodes."""
    have = sum(cap[x] for x in forced)
    if have >= need:
        return list(forced)
    others = sorted((x for x in leaves if x not in forced and cap[x] > 0), key=lambda x: (-cap[x], natural_key(x)))
    picked: list[str] = []
    for leaf in others:
        if have >= need:
            break
        picked.append(leaf)
        have += cap[leaf]
    if have < need:
        return None
    free_need = need - sum(cap[x] for x in forced)
    return list(forced) + _best_fit_swap(picked, others, cap, free_need)


def min_leaf_count(model: TopologyModel, cap: Mapping[str, int], count: int) -> int | None:
    """Fewest leaves under any one switch whose capacities add up to ``count`` (None: none do).

    Greedy largest-first is exact for "fewest bins reaching a sum", so no search is needed.
    """
    best: int | None = None
    for top in model.switch_names:
        have = 0
        for k, c in enumerate(sorted((cap.get(x, 0) for x in model.leaves_under(top)), reverse=True), 1):
            if best is not None and k >= best:
                break
            have += c
            if have >= count:
                best = k
                break
    return best


def select(
    model: TopologyModel,
    free: Mapping[str, Sequence[str]],
    count: int,
    *,
    required: Sequence[str] = (),
    max_leaves: int | None = None,
) -> Selection | None:
    """The best placement of ``count`` nodes, or None when none exists.

    Args:
        free: per leaf, the candidate nodes in preference order (required nodes excluded).
        required: nodes that must be in the placement (already checked to be usable).
        max_leaves: reject placements on more leaves than this.
    """
    cap = {leaf: len(free.get(leaf, ())) for leaf in model.leaves}
    need = count - len(required)
    forced = list(dict.fromkeys(model.leaf_of(n) for n in required))
    if forced:
        top = model.lowest_common_switch(forced)
        if top is None:
            return None
        tops: Sequence[str] = model.ancestors(top)
    else:
        tops = model.switch_names

    best: tuple[tuple[object, ...], list[str]] | None = None
    for top in tops:
        under = model.leaves_under(top)
        if not under:
            continue
        chosen = _leaves_for(under, forced, cap, need)
        if chosen is None:
            continue
        if max_leaves is not None and len(chosen) > max_leaves:
            continue
        levels = model.spine_levels(chosen)
        if levels is None:
            continue
        spare = sum(cap[x] for x in chosen) - need
        key = (len(chosen), levels, spare, sorted(natural_key(x) for x in chosen))
        if best is None or key < best[0]:
            best = (key, chosen)
    if best is None:
        return None

    chosen = best[1]
    # Required leaves first, then fullest first; the roomiest leaf takes what is left.
    order = [x for x in chosen if x in forced] + sorted(
        (x for x in chosen if x not in forced), key=lambda x: (cap[x], natural_key(x))
    )
    nodes = list(required)
    for leaf in order:
        take = min(need - (len(nodes) - len(required)), cap[leaf])
        if take <= 0:
            continue
        # The roomiest leaf is last; when an earlier leaf would be drained only partly (because
        # later leaves were picked for count), still take from it in preference order.
        nodes.extend(free.get(leaf, ())[:take])
    used_leaves = tuple(dict.fromkeys(model.leaf_of(n) for n in nodes))
    return Selection(
        leaves=used_leaves,
        nodes=tuple(nodes),
        common_switch=model.lowest_common_switch(used_leaves),
        spine_levels=model.spine_levels(used_leaves) or 0,
    )
