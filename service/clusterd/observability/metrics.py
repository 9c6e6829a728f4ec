"""Prometheus metrics, defined once here so every module counts into the same families.

The families live in their own registry rather than prometheus_client's global default, so
``/metrics`` carries what clusterd documents (plus process RSS/CPU/fds, for sizing) and nothing a
library happened to register. They are process-wide: a test comparing counts compares deltas.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from clusterd.errors import SlurmError, SlurmUnavailable

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
REGISTRY.register(GC_COLLECTOR)

# Slurm answers in milliseconds (squeue) to tens of seconds (a wedged slurmctld): one bucket ladder.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

RPCS = Counter(
    "clusterd_rpcs",
    "gRPC calls handled, by method and final status code",
    ["method", "code"],
    registry=REGISTRY,
)
RPC_LATENCY = Histogram(
    "clusterd_rpc_latency_seconds",
    "gRPC call latency, by method (streams: time to the end of the stream)",
    ["method"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
JOBS_BY_STATE = Gauge(
    "clusterd_jobs",
    "Jobs the service tracks, by state, as of the last queue poll",
    ["state"],
    registry=REGISTRY,
)
# Goodput over the partition's live jobs (wall-time weighted), refreshed every few seconds; per
# partition only: a job or user label would make a series per job ever run.
GOODPUT_RATIO = Gauge(
    "clusterd_job_goodput_ratio",
    "Effective training time ratio of the partition's live jobs (productive / wall seconds)",
    ["partition"],
    registry=REGISTRY,
)
GOODPUT_SECONDS = Gauge(
    "clusterd_job_goodput_seconds",
    "Wall seconds of the partition's live jobs by where they went (productive, queue, lost, ...)",
    ["partition", "part"],
    registry=REGISTRY,
)
REQUEUES = Counter(
    "clusterd_requeues",
    "Automatic requeues the supervisor performed, by cause",
    ["cause"],
    registry=REGISTRY,
)
POLL_LATENCY = Histogram(
    "clusterd_queue_poll_latency_seconds",
    "Time for one queue poll: the queue and node queries, their parsing, and reconciling the live jobs",
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
STRAGGLERS = Counter(
    "clusterd_straggler_verdicts",
    "Times a running job named a node a straggler (its ranks' step time over the other nodes'), by node",
    ["node"],
    registry=REGISTRY,
)
SLURM_CALLS = Counter(
    "clusterd_slurm_calls",
    "Calls into Slurm, by backend, command (sbatch, squeue, POST job/submit...) and outcome",
    ["backend", "command", "outcome"],
    registry=REGISTRY,
)
SLURM_CALL_LATENCY = Histogram(
    "clusterd_slurm_call_latency_seconds",
    "Latency of calls into Slurm, by backend and command",
    ["backend", "command"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
SLURM_INFO = Gauge(
    "clusterd_slurm_info",
    "The Slurm release clusterd found at start and the backend that talks to it (value 1)",
    ["version", "backend"],
    registry=REGISTRY,
)
LEASE_EPOCH = Gauge(
    "clusterd_lease_epoch",
    "Epoch of the supervisor lease this replica holds or last held (0: never held it)",
    registry=REGISTRY,
)
IS_LEADER = Gauge(
    "clusterd_is_leader",
    "1 while this replica holds the supervisor lease (runs requeues and releases), else 0",
    registry=REGISTRY,
)
FAILOVERS = Counter(
    "clusterd_failovers",
    "Times this replica took the supervisor lease over from an earlier holder (epoch above 1)",
    registry=REGISTRY,
)
CHECKPOINT_COMMITS = Counter(
    "clusterd_checkpoint_commits_seen",
    "Times the supervisor saw a running job's newest committed checkpoint step advance, by job",
    ["job_id"],
    registry=REGISTRY,
)
CHECKPOINT_STEP = Gauge(
    "clusterd_checkpoint_step",
    "Newest committed checkpoint step the supervisor has seen, by job",
    ["job_id"],
    registry=REGISTRY,
)


def observe_slurm_call(backend: str, command: str, outcome: str, seconds: float) -> None:
    """Count one call into Slurm; ``outcome`` is ``ok``, ``error`` (Slurm refused) or ``unavailable``."""
    SLURM_CALLS.labels(backend=backend, command=command, outcome=outcome).inc()
    SLURM_CALL_LATENCY.labels(backend=backend, command=command).observe(seconds)


@contextlib.contextmanager
def observed_slurm_call(backend: str, command: str, *, read: bool) -> Iterator[None]:
    """Count and log one call into Slurm made inside the block, by the SlurmError it raises (if any).

    The log line matches the commands runner's (``slurm <command> <outcome>``); the calling RPC's
    request id is added by the log filter. Successful reads (``read``) are debug-level: the poll
    makes them every interval.
    """
    started = time.monotonic()
    outcome = "error"
    detail = None
    try:
        yield
        outcome = "ok"
    except SlurmError as exc:
        outcome = "unavailable" if isinstance(exc, SlurmUnavailable) else "error"
        detail = exc.detail[:500]
        raise
    finally:
        seconds = time.monotonic() - started
        observe_slurm_call(backend, command, outcome, seconds)
        level = logging.DEBUG if read and outcome == "ok" else logging.INFO
        log.log(
            level,
            "slurm %s %s",
            command,
            outcome,
            extra={"backend": backend, "duration_ms": round(seconds * 1000, 2), "stderr": detail},
        )


class MetricsServer(Protocol):
    """A running HTTP listener serving ``/metrics`` (clusterd.web.listener's, on clusterd's loop)."""

    @property
    def port(self) -> int: ...

    async def stop(self) -> None: ...
