"""The reservation's decision from a user's counts: what to prune, read lazily, oldest first."""

from __future__ import annotations

import pytest

from clusterd.errors import ResourceExhausted
from clusterd.store.bounds import Prune, Usage, UserBounds, admit

OLDEST = [(1, 100), (2, 300), (3, 100), (4, 100)]  # (record_id, spec_bytes), oldest first


def test_within_bounds_nothing_is_read() -> None:
    prune = admit(
        UserBounds(max_finished=4, max_spec_bytes=10_000), Usage(0, 0, 4, 600), user="a", tasks=1, spec_bytes=100
    )
    assert not prune.needed
    assert prune.choose(OLDEST) == []


def test_over_the_count_reads_only_as_many_rows_as_go() -> None:
    prune = admit(UserBounds(max_finished=2), Usage(0, 0, 4, 600), user="a", tasks=1, spec_bytes=100)
    assert prune == Prune(records=2, spec_bytes=0)
    assert prune.rows == 2
    assert prune.choose(OLDEST) == [1, 2]


def test_over_the_bytes_the_oldest_go_until_the_new_spec_fits() -> None:
    # held: 200 live + 100 new + 600 finished = 900; the bound is 500: free 400 bytes, oldest first
    prune = admit(UserBounds(max_spec_bytes=500), Usage(0, 200, 4, 600), user="a", tasks=1, spec_bytes=100)
    assert prune == Prune(records=0, spec_bytes=400)
    assert prune.rows is None  # sizes decide: the store reads until enough is freed
    assert prune.choose(OLDEST) == [1, 2]


def test_count_and_bytes_together_take_the_larger_cut() -> None:
    prune = admit(
        UserBounds(max_finished=1, max_spec_bytes=1_000), Usage(0, 0, 4, 600), user="a", tasks=1, spec_bytes=500
    )
    assert prune.choose(OLDEST) == [1, 2, 3]  # the count needs 3 gone; the bytes only 100


def test_live_work_past_a_bound_is_refused_and_never_pruned() -> None:
    with pytest.raises(ResourceExhausted, match=r"limits\.max_jobs_per_user"):
        admit(UserBounds(max_live_tasks=4), Usage(4, 0, 10, 0), user="a", tasks=1, spec_bytes=1)
    with pytest.raises(ResourceExhausted, match=r"limits\.max_spec_bytes_per_user"):
        admit(UserBounds(max_spec_bytes=100), Usage(0, 90, 10, 0), user="a", tasks=1, spec_bytes=20)
