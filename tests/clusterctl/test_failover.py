"""The client against two fake clusterd replicas on unix sockets: failover, idempotent retries, watch resume.

The replicas share one "store" (:class:`Shared`): the request ids submitted and an event log whose
position is the resume token, as real replicas share PostgreSQL. A replica "dies" by its server
stopping at once (in-flight calls end UNAVAILABLE, as when the process is killed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusterctl.cli.main import main
from clusterctl.client import ClusterClient, split_addrs
from clusterctl.errors import ResumeExpired, ServiceError, UsageError
from clusterctl.v1 import jobs_pb2
from tests.support.heartbeat import FakeJobService, serve


class Shared:
    """What replicas share: the submitted request ids (one job each) and the event log."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.jobs: dict[str, str] = {}  # request_id -> job id
        self.events: list[jobs_pb2.JobEvent] = []  # resume token = 1-based position
        self.oldest = 1  # the oldest position still kept (older tokens: OUT_OF_RANGE)

    def append(self, n: int = 1) -> None:
        with self.cond:
            for _ in range(n):
                seq = len(self.events) + 1
                self.events.append(
                    jobs_pb2.JobEvent(
                        type=jobs_pb2.JOB_EVENT_TYPE_STATE_CHANGED, message=f"e{seq}", resume_token=str(seq)
                    )
                )
            self.cond.notify_all()


class Replica(FakeJobService):
    """One replica: every call is recorded; ``hang`` makes the named method wait until the server dies."""

    def __init__(self, shared: Shared, name: str) -> None:
        super().__init__()
        self.shared, self.name = shared, name
        self.calls: list[tuple[str, Any]] = []
        self.hang: set[str] = set()
        self.answer: dict[str, tuple[grpc.StatusCode, str]] = {}  # method -> error to answer
        self.arrived = threading.Event()
        self.released = threading.Event()  # set when the server is stopped: hanging handlers return

    def _enter(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        self.calls.append((method, request))
        self.arrived.set()
        if method in self.answer:
            context.abort(*self.answer[method])
        if method in self.hang:
            self.released.wait(10)
            context.abort(grpc.StatusCode.INTERNAL, "not reached: the server was stopped")

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]

    def SubmitJob(self, request: jobs_pb2.SubmitJobRequest, context: Any) -> jobs_pb2.SubmitJobResponse:
        self._enter("SubmitJob", request, context)
        with self.shared.cond:
            job_id = self.shared.jobs.setdefault(request.spec.request_id, str(100 + len(self.shared.jobs)))
        return jobs_pb2.SubmitJobResponse(job=jobs_pb2.JobStatus(job_id=job_id))

    def GetJob(self, request: jobs_pb2.GetJobRequest, context: Any) -> jobs_pb2.GetJobResponse:
        self._enter("GetJob", request, context)
        return jobs_pb2.GetJobResponse(job=jobs_pb2.JobStatus(job_id=request.job_id, name=self.name))

    def RequeueJob(self, request: jobs_pb2.RequeueJobRequest, context: Any) -> jobs_pb2.RequeueJobResponse:
        self._enter("RequeueJob", request, context)
        return jobs_pb2.RequeueJobResponse(job=jobs_pb2.JobStatus(job_id=request.job_id, name=self.name))

    def CancelJob(self, request: jobs_pb2.CancelJobRequest, context: Any) -> jobs_pb2.CancelJobResponse:
        self._enter("CancelJob", request, context)
        return jobs_pb2.CancelJobResponse(job=jobs_pb2.JobStatus(job_id=request.job_id, name=self.name))

    def WatchJobs(self, request: jobs_pb2.WatchJobsRequest, context: Any) -> Iterator[jobs_pb2.JobEvent]:
        self._enter("WatchJobs", request, context)
        shared = self.shared
        after = int(request.resume_token or 0)
        if request.resume_token and after + 1 < shared.oldest:
            context.abort(grpc.StatusCode.OUT_OF_RANGE, f"event {after} is older than the log's retention")
        if not request.resume_token:
            after = len(shared.events)  # live from now on (fixed before the snapshot, as the real one subscribes)
        if request.include_initial:
            yield jobs_pb2.JobEvent(type=jobs_pb2.JOB_EVENT_TYPE_SNAPSHOT, message="snapshot")
        while context.is_active() and not self.released.is_set():
            with shared.cond:
                if len(shared.events) <= after:
                    shared.cond.wait(0.1)
                batch = shared.events[after:]
            for event in batch:
                after += 1
                yield event

    def ReadJobLog(self, request: jobs_pb2.ReadJobLogRequest, context: Any) -> Iterator[jobs_pb2.JobLogChunk]:
        """The file "out" holds b"0123456789" * 3, sent in 10-byte chunks (the tail: its last 10 bytes)."""
        self._enter("ReadJobLog", request, context)
        data = b"0123456789" * 3
        start = len(data) - 10 if request.tail_lines else 0
        for offset in range(start, len(data), 10):
            yield jobs_pb2.JobLogChunk(path="out", offset=offset, data=data[offset : offset + 10])
            if "ReadJobLog:die-after-first" in self.hang:
                self.arrived.set()
                self.released.wait(10)
                return


class Cluster:
    """Two replicas ``a`` and ``b`` on their sockets; ``kill(name)`` stops one at once."""

    def __init__(self, tmp_path: Path, stack: ExitStack) -> None:
        self.shared = Shared()
        self.paths = {name: tmp_path / f"{name}.sock" for name in "ab"}
        self.replicas = {name: Replica(self.shared, name) for name in "ab"}
        self.servers = {name: stack.enter_context(serve(self.paths[name], self.replicas[name])) for name in "ab"}
        for replica in self.replicas.values():
            stack.callback(replica.released.set)
        self.addr = ",".join(f"unix:{self.paths[n]}" for n in "ab")

    def kill(self, name: str) -> None:
        self.servers[name].stop(0).wait(5)  # in-flight calls end UNAVAILABLE; then hanging handlers may return
        self.replicas[name].released.set()

    def kill_when_called(self, name: str) -> threading.Thread:
        """Stop replica ``name`` as soon as a call arrives at it (it is hanging in that call)."""

        def run() -> None:
            assert self.replicas[name].arrived.wait(10)
            time.sleep(0.05)
            self.kill(name)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with ExitStack() as stack:
        yield Cluster(tmp_path, stack)


def client(cluster: Cluster, **kw: Any) -> ClusterClient:
    kw.setdefault("retry_seconds", 3.0)
    return ClusterClient(cluster.addr, "tok", timeout=5.0, **kw)


def test_addresses_parse_as_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    assert split_addrs("unix:/a.sock, /b.sock,host:1,,host:1") == ("unix:/a.sock", "unix:/b.sock", "host:1")
    monkeypatch.setenv("CLUSTERCTL_ADDR", "h1:1,h2:2")
    assert split_addrs() == ("h1:1", "h2:2")
    with pytest.raises(UsageError):
        split_addrs(" , ")
    monkeypatch.setenv("CLUSTERCTL_RETRY_SECONDS", "x")
    with pytest.raises(UsageError, match="CLUSTERCTL_RETRY_SECONDS"):
        ClusterClient("h:1", "")


def test_a_dead_first_address_fails_over_and_the_next_call_stays(cluster: Cluster) -> None:
    cluster.kill("a")
    with client(cluster) as c:
        assert c.get("1").name == "b"
        assert c.get("2").name == "b"
    assert cluster.replicas["b"].methods() == ["GetJob", "GetJob"]


def test_a_submit_retried_after_the_replica_died_is_the_same_request(cluster: Cluster) -> None:
    cluster.replicas["a"].hang.add("SubmitJob")
    killer = cluster.kill_when_called("a")
    spec = jobs_pb2.JobSpec(command=["true"])  # no request_id: the client sets one before the first attempt
    with client(cluster) as c:
        reply = c.submit(spec)
    killer.join()
    sent = [r.spec.request_id for m, r in cluster.replicas["a"].calls + cluster.replicas["b"].calls]
    assert len(sent) == 2 and sent[0] and sent[0] == sent[1] == spec.request_id
    assert cluster.shared.jobs == {spec.request_id: reply.job.job_id}  # one job for both attempts


def test_a_requeue_that_may_have_arrived_is_not_repeated(cluster: Cluster) -> None:
    cluster.replicas["a"].hang.add("RequeueJob")
    killer = cluster.kill_when_called("a")
    with client(cluster) as c, pytest.raises(ServiceError) as err:
        c.requeue("7")
    killer.join()
    assert err.value.code_name == "UNAVAILABLE"
    assert cluster.replicas["b"].calls == []  # each requeue restarts the job: never twice for one call


def test_a_requeue_that_reached_no_replica_goes_to_the_next(cluster: Cluster) -> None:
    cluster.kill("a")
    with client(cluster) as c:
        assert c.requeue("7").name == "b"


def test_a_cancel_is_repeated_after_the_replica_died(cluster: Cluster) -> None:
    cluster.replicas["a"].hang.add("CancelJob")
    killer = cluster.kill_when_called("a")
    with client(cluster) as c:
        assert c.cancel("7").name == "b"
    killer.join()


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.INTERNAL,
    ],
)
def test_other_errors_are_answers_not_retried(cluster: Cluster, code: grpc.StatusCode) -> None:
    cluster.replicas["a"].answer["GetJob"] = (code, "no")
    with client(cluster) as c, pytest.raises(ServiceError) as err:
        c.get("1")
    assert err.value.code_name == code.name
    assert cluster.replicas["a"].methods() == ["GetJob"] and cluster.replicas["b"].calls == []


def test_unavailable_answers_fail_over_and_all_down_names_every_address(cluster: Cluster) -> None:
    cluster.replicas["a"].answer["GetJob"] = (grpc.StatusCode.UNAVAILABLE, "follower; busy")
    with client(cluster) as c:
        assert c.get("1").name == "b"
    cluster.kill("a")
    cluster.kill("b")
    started = time.monotonic()
    with client(cluster, retry_seconds=1.0) as c, pytest.raises(ServiceError) as err:
        c.get("1")
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 4.0  # retried with backoff for retry_seconds, then gave up
    assert err.value.code_name == "UNAVAILABLE"
    assert err.value.addresses == split_addrs(cluster.addr)
    assert f"cannot reach clusterd at unix:{cluster.paths['a']}, unix:{cluster.paths['b']}" in err.value.message


def test_the_cli_names_every_address(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.kill("a")
    cluster.kill("b")
    assert main(["status", "1", "--addr", cluster.addr, "--timeout", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"clusterctl: error: cannot reach clusterd at unix:{cluster.paths['a']}, unix:{cluster.paths['b']}: "
    )
    assert err.count("\n") == 1


def test_a_watch_resumes_at_the_next_replica_without_gap_or_duplicate(cluster: Cluster) -> None:
    seen: list[jobs_pb2.JobEvent] = []
    with client(cluster) as c:
        stream = c.watch(include_initial=True)
        assert next(stream).type == jobs_pb2.JOB_EVENT_TYPE_SNAPSHOT
        cluster.shared.append(3)
        seen += [next(stream) for _ in range(3)]
        cluster.kill("a")  # the stream breaks with UNAVAILABLE
        cluster.shared.append(4)  # while the client reconnects
        seen += [next(stream) for _ in range(4)]
        cluster.shared.append(1)  # live again, at b
        seen.append(next(stream))
        stream.close()
    assert [e.message for e in seen] == [f"e{i}" for i in range(1, 9)]
    resumed = [r for m, r in cluster.replicas["b"].calls if m == "WatchJobs"]
    assert len(resumed) == 1 and resumed[0].resume_token == "3" and not resumed[0].include_initial


def test_a_watch_that_cannot_resume_says_so(cluster: Cluster) -> None:
    with client(cluster) as c:
        stream = c.watch()
        assert next(stream).type == jobs_pb2.JOB_EVENT_TYPE_SNAPSHOT
        cluster.shared.append(2)
        assert [next(stream).message for _ in range(2)] == ["e1", "e2"]
        cluster.shared.oldest = 5  # b's log no longer reaches back to event 2
        cluster.kill("a")
        with pytest.raises(ResumeExpired) as err:
            next(stream)
    assert err.value.code_name == "OUT_OF_RANGE" and err.value.resume_token == "2"


def test_a_watch_continues_a_given_token(cluster: Cluster) -> None:
    cluster.shared.append(5)
    with client(cluster) as c:
        stream = c.watch(resume_token="3")
        assert [next(stream).message for _ in range(2)] == ["e4", "e5"]
        stream.close()
    assert not cluster.replicas["a"].calls[0][1].include_initial


def test_a_followed_log_continues_at_the_next_replica_without_repeating_bytes(cluster: Cluster) -> None:
    cluster.replicas["a"].hang.add("ReadJobLog:die-after-first")
    killer = cluster.kill_when_called("a")
    with client(cluster) as c:
        chunks = list(c.read_log("7", follow=True))
    killer.join()
    assert b"".join(ch.data for ch in chunks) == b"0123456789" * 3
    assert [ch.offset for ch in chunks] == [0, 10, 20]
