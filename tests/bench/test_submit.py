"""sdiag's RPC statistics as bench.submit reads them."""

from __future__ import annotations

from bench.submit import parse_sdiag

SDIAG = """*******************************************************
sdiag output at Sun Nov 29 10:43:00 2026 (1795948980)
Data since      Sun Nov 29 10:37:17 2026 (1795948637)
*******************************************************
Server thread count:  1

Remote Procedure Call statistics by message type
\tREQUEST_JOB_WILL_RUN                    ( 4012) count:4      ave_time:1725   total_time:6900
\tREQUEST_JOB_INFO                        ( 2003) count:3      ave_time:12185  total_time:36556

Remote Procedure Call statistics by user
\troot            (       0) count:5      ave_time:8000   total_time:40000
\tbob             (    1001) count:2      ave_time:1728   total_time:3456

Pending RPC statistics
\tNo pending RPCs
"""


def test_counts_and_times_by_message_type_and_user() -> None:
    stats = parse_sdiag(SDIAG)
    assert stats.since.startswith("Data since")
    assert stats.counts == {"REQUEST_JOB_WILL_RUN": 4, "REQUEST_JOB_INFO": 3}
    assert stats.micros == {"REQUEST_JOB_WILL_RUN": 6900, "REQUEST_JOB_INFO": 36556}
    assert stats.users == {"root": 5, "bob": 2}
    assert stats.total == 7


def test_a_release_without_times_still_counts() -> None:
    stats = parse_sdiag(SDIAG.replace("ave_time:1725   total_time:6900", ""))
    assert stats.counts["REQUEST_JOB_WILL_RUN"] == 4 and "REQUEST_JOB_WILL_RUN" not in stats.micros
