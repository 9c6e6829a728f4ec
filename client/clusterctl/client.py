"""Synchronous gRPC client for clusterd: address from CLUSTERCTL_ADDR, token from the environment.

Address: ``unix:/PATH`` (a bare absolute ``/PATH`` means the same) or ``host:port``; unset, the
standard socket ``unix:/run/clusterd/clusterd.sock``. A comma-separated list names several clusterd
replicas: calls go to the one that last answered and fail over to the next when it is unreachable,
for as long as repeating the call is harmless (:mod:`clusterctl.failover` says which calls that
is); WatchJobs and ReadJobLog streams continue at another replica where they broke.

Token: CLUSTERCTL_TOKEN, else the first line of CLUSTERCTL_TOKEN_FILE, which must be the caller's
own file and not readable by group or others. Tokens never come from the command line, where every
local user can read them (``ps``).

TLS (TCP addresses): with a CA (``ca=`` or CLUSTERCTL_CA, a PEM file) the channel is TLS and the server certificate
must chain to that CA and name the host in the address; add ``cert=``/``key=`` (CLUSTERCTL_CERT,
CLUSTERCTL_KEY) for mTLS. Without a CA the channel is plaintext, which clusterd accepts on TCP only
when its operator set allow_insecure.

Every call carries the bearer token and a deadline (per attempt); gRPC errors become
:class:`ServiceError` with the status code's name and the server's message, so callers never see
grpc internals. Retries across replicas last at most ``retry_seconds`` (CLUSTERCTL_RETRY_SECONDS,
default 15) from the first failure.

What is repeated (after UNAVAILABLE, or DEADLINE_EXCEEDED on a replica that stopped answering):
reads; SubmitJob (it always carries a request_id, generated before the first attempt, so the
service makes one job of every attempt); CancelJob (a second cancel returns the cancelled job);
HoldJob/ReleaseJob (Slurm's uhold/release of a held/released job changes nothing); AdoptJob (a
second adopt returns the adopted record). RequeueJob is repeated only when it reached no replica
(each requeue restarts the job once more). Every other status comes back at once.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from clusterctl import failover
from clusterctl.errors import ResumeExpired, ServiceError, UsageError
from clusterctl.failover import DEFAULT_ADDR, CallFailed, Retry, split_addrs
from clusterctl.v1 import cluster_pb2, cluster_pb2_grpc, jobs_pb2, jobs_pb2_grpc

DEFAULT_TIMEOUT = 30.0
_MAX_TOKEN_FILE = 4096


def new_request_id() -> str:
    return uuid.uuid4().hex


def resolve_addr(addr: str | None = None) -> str:
    """``addr``, else CLUSTERCTL_ADDR, else the standard socket; a bare absolute path becomes ``unix:PATH``.

    A list stays a list (comma-separated, each item normalized): :func:`split_addrs` gives the items.
    """
    return ",".join(split_addrs(addr))


def resolve_token(token: str | None = None) -> str:
    """``token``, else CLUSTERCTL_TOKEN, else CLUSTERCTL_TOKEN_FILE's content, else "" (no token).

    Raises:
        UsageError: the token file cannot be read, is not the caller's, is readable by group or
            others, or does not hold one token.
    """
    if token is not None:
        return token
    if env := os.environ.get("CLUSTERCTL_TOKEN"):
        return env
    path = os.environ.get("CLUSTERCTL_TOKEN_FILE")
    return read_token_file(path) if path else ""


def read_token_file(path: str) -> str:
    """The token in ``path``; the checks apply to the file actually opened (fstat), not to its name."""
    what = f"CLUSTERCTL_TOKEN_FILE {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{what} is not a regular file")
        if st.st_uid != os.geteuid():
            raise UsageError(f"{what} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})")
        if st.st_mode & 0o077:
            raise UsageError(
                f"{what} is readable by group or others (mode {stat.S_IMODE(st.st_mode):o}): run chmod 600 {path}"
            )
        data = f.read(_MAX_TOKEN_FILE + 1)
    lines = data.decode("utf-8", "replace").strip().splitlines()
    if len(data) > _MAX_TOKEN_FILE or len(lines) != 1 or not lines[0].strip():
        raise UsageError(f"{what} must hold one token on one line")
    return lines[0].strip()


def _read_pem(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None


def open_channel(
    addr: str,
    *,
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A TLS channel when a CA (or a client certificate) is configured, else plaintext.

    Arguments win over CLUSTERCTL_CA / CLUSTERCTL_CERT / CLUSTERCTL_KEY. ``options`` are gRPC
    channel arguments (e.g. reconnect backoff for the heartbeat sender).

    Raises:
        UsageError: a file cannot be read, or only one of cert/key is given.
    """
    ca = ca or os.environ.get("CLUSTERCTL_CA") or None
    cert = cert or os.environ.get("CLUSTERCTL_CERT") or None
    key = key or os.environ.get("CLUSTERCTL_KEY") or None
    if bool(cert) != bool(key):
        raise UsageError("a client certificate needs its key: give both --cert and --key (CLUSTERCTL_CERT/_KEY)")
    if not ca and not cert:
        return grpc.insecure_channel(addr, options=list(options))
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read_pem(ca, "CA file") if ca else None,
        private_key=_read_pem(key, "client key") if key else None,
        certificate_chain=_read_pem(cert, "client certificate") if cert else None,
    )
    return grpc.secure_channel(addr, creds, options=list(options))


@dataclass(frozen=True)
class _Conn:
    """One replica's channel and its stubs (made on first use)."""

    channel: grpc.Channel
    jobs: jobs_pb2_grpc.JobServiceStub
    cluster: cluster_pb2_grpc.ClusterServiceStub


def _conn(channel: grpc.Channel) -> _Conn:
    return _Conn(channel, jobs_pb2_grpc.JobServiceStub(channel), cluster_pb2_grpc.ClusterServiceStub(channel))


class ClusterClient:
    """clusterd's API as methods; thread-safe (threads may share one client and its channels).

    ``addr`` may list several replicas (``"unix:/a.sock,host2:50051"``); ``retry_seconds`` bounds
    the time spent failing over (None: CLUSTERCTL_RETRY_SECONDS, else 15; 0: each address once).
    ``channel`` (tests) replaces the channel to the one address.
    """

    def __init__(
        self,
        addr: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        channel: grpc.Channel | None = None,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        retry_seconds: float | None = None,
    ) -> None:
        self.addrs = split_addrs(addr)
        self.addr = ",".join(self.addrs)
        self.token = resolve_token(token)
        self.timeout = timeout
        self.retry_seconds = failover.resolve_retry_seconds(retry_seconds)
        if channel is not None:
            given = _conn(channel)
            self.addrs = self.addrs[:1]
            self._endpoints = failover.Endpoints(self.addrs, lambda _addr: given, lambda c: c.channel.close())
        else:
            self._endpoints = failover.Endpoints(
                self.addrs, lambda a: _conn(open_channel(a, ca=ca, cert=cert, key=key)), lambda c: c.channel.close()
            )
        self._endpoints.get(0)  # a channel connects on first use; TLS file errors show here, not at the first call

    @property
    def jobs(self) -> jobs_pb2_grpc.JobServiceStub:
        """The JobService stub of the replica that last answered (no failover: for raw calls)."""
        return self._endpoints.get(self._endpoints.preferred).jobs

    @property
    def cluster(self) -> cluster_pb2_grpc.ClusterServiceStub:
        return self._endpoints.get(self._endpoints.preferred).cluster

    def close(self) -> None:
        self._endpoints.close()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token}")] if self.token else []

    def _call(self, rpc: Callable[[_Conn], Any], request: Any, *, retry: Retry = Retry.SAFE) -> Any:
        """``rpc(conn)(request)`` with the token and deadline, failing over as ``retry`` allows."""

        def attempt(conn: _Conn) -> Any:
            return rpc(conn)(request, timeout=self.timeout, metadata=self._metadata())

        try:
            return failover.call(self._endpoints, attempt, retry=retry, seconds=self.retry_seconds)
        except CallFailed as exc:
            raise _service_error(exc.error, exc.tried) from None

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, spec: jobs_pb2.JobSpec) -> jobs_pb2.SubmitJobResponse:
        """Submit; a request_id is set first when missing (in ``spec``), so every retry is the same request."""
        if not spec.request_id:
            spec.request_id = new_request_id()
        return self._call(lambda c: c.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec))

    def get(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(lambda c: c.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id)).job

    def list_jobs(
        self,
        *,
        states: list[jobs_pb2.JobState] | None = None,
        user: str = "",
        include_finished: bool = False,
        limit: int = 0,
    ) -> list[jobs_pb2.JobStatus]:
        request = jobs_pb2.ListJobsRequest(
            states=states or [], user=user, include_finished=include_finished, limit=limit
        )
        return list(self._call(lambda c: c.jobs.ListJobs, request).jobs)

    def cancel(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(lambda c: c.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id)).job

    def requeue(self, job_id: str) -> jobs_pb2.JobStatus:
        request = jobs_pb2.RequeueJobRequest(job_id=job_id)
        return self._call(lambda c: c.jobs.RequeueJob, request, retry=Retry.UNSENT).job  # each one restarts it

    def watch(
        self, job_ids: list[str] | None = None, *, include_initial: bool = True, resume_token: str = ""
    ) -> Generator[jobs_pb2.JobEvent, None, None]:
        """Stream job events until the server ends the stream or the caller stops iterating.

        One unbroken stream across replicas: when it breaks (UNAVAILABLE: the replica died) it is
        reopened at the next address after the last event's ``resume_token`` (without a snapshot),
        so no event is missed or seen twice. ``resume_token`` continues an earlier watch.
        Only a stream that broke before its first logged event starts over (with the snapshot asked for).

        Raises:
            ResumeExpired: the service no longer keeps events after the token (OUT_OF_RANGE).
            ServiceError: any other error, or no replica answered within ``retry_seconds``.
        """
        token = resume_token

        def open_stream(conn: _Conn) -> Any:
            request = jobs_pb2.WatchJobsRequest(
                job_ids=job_ids or [], include_initial=include_initial and not token, resume_token=token
            )
            return conn.jobs.WatchJobs(request, metadata=self._metadata())

        try:
            for event in failover.stream(self._endpoints, open_stream, seconds=self.retry_seconds):
                if event.resume_token:
                    token = event.resume_token
                yield event
        except CallFailed as exc:
            if _code(exc.error) == grpc.StatusCode.CANCELLED:
                return
            if _code(exc.error) == grpc.StatusCode.OUT_OF_RANGE and token:
                raise ResumeExpired(token, exc.error.details() or "") from None
            raise _service_error(exc.error, exc.tried) from None

    def read_log(
        self, job_id: str, *, stderr: bool = False, tail_lines: int = 0, follow: bool = False
    ) -> Generator[jobs_pb2.JobLogChunk, None, None]:
        """A job's output in chunks, read by the service with the job owner's rights.

        ``follow`` keeps the stream open (no deadline) until the job ends, across requeues. A stream
        that breaks (UNAVAILABLE) is reopened at the next replica; the request has no offset, so the
        file is read again from its start and what was already delivered is skipped (by path and
        offset): the caller sees no byte twice. Notices without data may repeat.
        """
        seen: dict[str, int] = {}  # path -> end offset of the data delivered from it
        timeout = None if follow else self.timeout * 10

        def open_stream(conn: _Conn) -> Any:
            request = jobs_pb2.ReadJobLogRequest(
                job_id=job_id,
                tail_lines=0 if seen else tail_lines,
                follow=follow,
                stream=jobs_pb2.LOG_STREAM_STDERR if stderr else jobs_pb2.LOG_STREAM_STDOUT,
            )
            return conn.jobs.ReadJobLog(request, metadata=self._metadata(), timeout=timeout)

        try:
            for chunk in failover.stream(self._endpoints, open_stream, seconds=self.retry_seconds):
                if chunk.data:
                    end = seen.get(chunk.path, 0)
                    if chunk.path in seen and chunk.offset < end:
                        skip = end - chunk.offset
                        if skip >= len(chunk.data):
                            continue
                        rest = jobs_pb2.JobLogChunk()
                        rest.CopyFrom(chunk)
                        rest.data, rest.offset = chunk.data[skip:], end
                        chunk = rest
                    seen[chunk.path] = chunk.offset + len(chunk.data)
                yield chunk
        except CallFailed as exc:
            if _code(exc.error) == grpc.StatusCode.CANCELLED:
                return
            raise _service_error(exc.error, exc.tried) from None

    def history(self, request: jobs_pb2.ListHistoryRequest) -> jobs_pb2.ListHistoryResponse:
        return self._call(lambda c: c.jobs.ListHistory, request)

    def hold(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(lambda c: c.jobs.HoldJob, jobs_pb2.HoldJobRequest(job_id=job_id)).job

    def release(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(lambda c: c.jobs.ReleaseJob, jobs_pb2.ReleaseJobRequest(job_id=job_id)).job

    def queue(
        self, *, partition: str = "", states: list[jobs_pb2.JobState] | None = None
    ) -> jobs_pb2.ListQueueResponse:
        request = jobs_pb2.ListQueueRequest(partition=partition, states=states or [])
        return self._call(lambda c: c.jobs.ListQueue, request)

    def adopt(self, job_id: str, *, checkpoint_uri: str = "") -> jobs_pb2.AdoptJobResponse:
        request = jobs_pb2.AdoptJobRequest(job_id=job_id, checkpoint_uri=checkpoint_uri)
        return self._call(lambda c: c.jobs.AdoptJob, request)

    def goodput(self, job_id: str) -> jobs_pb2.GetGoodputResponse:
        """Where the job's wall time went (productive, queue, stalls, detection, restart, lost)."""
        return self._call(lambda c: c.jobs.GetGoodput, jobs_pb2.GetGoodputRequest(job_id=job_id))

    def checkpoints(self, job_id: str) -> jobs_pb2.ListJobCheckpointsResponse:
        return self._call(lambda c: c.jobs.ListJobCheckpoints, jobs_pb2.ListJobCheckpointsRequest(job_id=job_id))

    # -- cluster -----------------------------------------------------------------------------

    def topology(self) -> cluster_pb2.Topology:
        return self._call(lambda c: c.cluster.GetTopology, cluster_pb2.GetTopologyRequest()).topology

    def nodes(self, *, partition: str = "") -> list[cluster_pb2.Node]:
        return list(self._call(lambda c: c.cluster.ListNodes, cluster_pb2.ListNodesRequest(partition=partition)).nodes)

    def plan(self, request: cluster_pb2.PlanPlacementRequest) -> cluster_pb2.Placement:
        return self._call(lambda c: c.cluster.PlanPlacement, request).placement


def _code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    return exc.code() if hasattr(exc, "code") else None


def _service_error(exc: grpc.RpcError, tried: Sequence[str] = ()) -> ServiceError:
    """The library's error for a gRPC one; a connection failure names every address tried."""
    code = _code(exc)
    details = exc.details() if hasattr(exc, "details") else str(exc)
    name = code.name if code is not None else "UNKNOWN"
    if name == "UNAVAILABLE" and "failed to connect" in (details or "").lower():
        where = f" at {', '.join(tried)}" if tried else ""
        details = f"cannot reach clusterd{where}: {details}"
    trailing: Any = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    request_id = next((str(value) for key, value in trailing or () if key == "x-request-id"), "")
    return ServiceError(name, details or "", request_id=request_id, addresses=tuple(tried))


__all__ = [
    "DEFAULT_ADDR",
    "ClusterClient",
    "ResumeExpired",
    "ServiceError",
    "UsageError",
    "new_request_id",
    "open_channel",
    "resolve_addr",
    "resolve_token",
    "split_addrs",
]
