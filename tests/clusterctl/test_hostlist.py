"""Hostlist expansion/compression: Slurm syntax, zero padding, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusterctl.hostlist import natural_key
from clusterd.topology import HostlistError, compress_hostlist, expand_hostlist


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node[1-3,7],gpu-a[01-02]", ["node1", "node2", "node3", "node7", "gpu-a01", "gpu-a02"]),
        ("node1", ["node1"]),
        ("", []),
        ("(null)", []),
        ("a,b", ["a", "b"]),
        ("tux[0-3,12,18-20]", ["tux0", "tux1", "tux2", "tux3", "tux12", "tux18", "tux19", "tux20"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("n[9-10]", ["n9", "n10"]),
        ("n[001-002]-ib", ["n001-ib", "n002-ib"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        (" node[1-2] ", ["node1", "node2"]),
        ("s[0-2,4-8,12]", ["s0", "s1", "s2", "s4", "s5", "s6", "s7", "s8", "s12"]),
    ],
)
def test_expand(expr: str, names: list[str]) -> None:
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize(
    "expr",
    [
        "node[1-3",
        "node1-3]",
        "node[a-b]",
        "node[3-1]",
        "node[]",
        "n[[1]]",
        "n[1-9999999]",
        "n[\u0661-\u0662]",
        "n[1_0]",
        "n[\u00b2]",
        "n[1-\u00b2]",
    ],  # only ASCII digits are indexes
)
def test_expand_rejects_malformed(expr: str) -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(expr)


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["node1", "node2", "node3", "node7"], "node[1-3,7]"),
        (["gpu-a01", "gpu-a02"], "gpu-a[01-02]"),
        (["node3"], "node3"),
        (["node10", "node9"], "node[9-10]"),
        (["n09", "n10"], "n[09-10]"),
        (["n1", "n01"], "n[1,01]"),
        (["login", "node1", "node2"], "login,node[1-2]"),
        (["node2", "node2"], "node2"),
        ([], ""),
    ],
)
def test_compress(names: list[str], expr: str) -> None:
    assert compress_hostlist(names) == expr


def test_compress_keeps_padding_distinct() -> None:
    names = ["gpu-a01", "gpu-a1", "gpu-a02"]
    assert sorted(expand_hostlist(compress_hostlist(names))) == sorted(names)


def test_compress_groups_by_text_around_last_number() -> None:
    names = ["rack1-node1", "rack1-node2", "rack2-node1"]
    expr = compress_hostlist(names)
    assert expr == "rack1-node[1-2],rack2-node1"
    assert sorted(expand_hostlist(expr)) == sorted(names)


def test_natural_order() -> None:
    assert sorted(["node10", "node9", "node1"], key=natural_key) == ["node1", "node9", "node10"]


_name = st.builds(
    lambda prefix, num, width, suffix: f"{prefix}{str(num).zfill(width)}{suffix}",
    st.sampled_from(["node", "gpu-a", "n", "rack1-n", "x"]),
    st.integers(min_value=0, max_value=1200),
    st.integers(min_value=1, max_value=4),
    st.sampled_from(["", "-ib", "b"]),
)


@given(st.lists(_name | st.sampled_from(["login", "head"]), max_size=60))
def test_round_trip(names: list[str]) -> None:
    assert sorted(expand_hostlist(compress_hostlist(names))) == sorted(set(names))


@given(st.lists(_name, max_size=60))
def test_compress_is_stable(names: list[str]) -> None:
    once = compress_hostlist(names)
    assert compress_hostlist(expand_hostlist(once)) == once
