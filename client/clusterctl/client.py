"""Synchronous gRPC client for clusterd: address from CLUSTERCTL_ADDR, token from the environment.

Address: ``unix:/PATH`` (a bare absolute ``/PATH`` means the same) or ``host:port``; unset, the
standard socket ``unix:/run/clusterd/clusterd.sock``. Token: CLUSTERCTL_TOKEN, else the first line
of CLUSTERCTL_TOKEN_FILE, which must be the caller's own file and not readable by group or others.
Tokens never come from the command line, where every local user can read them (``ps``).

TLS (TCP addresses): with a CA (``ca=`` or CLUSTERCTL_CA, a PEM file) the channel is TLS and the server certificate
must chain to that CA and name the host in the address; add ``cert=``/``key=`` (CLUSTERCTL_CERT,
CLUSTERCTL_KEY) for mTLS. Without a CA the channel is plaintext, which clusterd accepts on TCP only
when its operator set allow_insecure.

Every call carries the bearer token and a deadline; gRPC errors become :class:`ServiceError` with
the status code's name and the server's message, so callers never see grpc internals.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import grpc

from clusterctl.errors import ServiceError, UsageError
from clusterctl.v1 import cluster_pb2, cluster_pb2_grpc, jobs_pb2, jobs_pb2_grpc

DEFAULT_ADDR = "unix:/run/clusterd/clusterd.sock"  # clusterd's default listen (service/clusterd/config.py)
DEFAULT_TIMEOUT = 30.0
_MAX_TOKEN_FILE = 4096

T = TypeVar("T")


def new_request_id() -> str:
    return uuid.uuid4().hex


def resolve_addr(addr: str | None = None) -> str:
    """``addr``, else CLUSTERCTL_ADDR, else the standard socket; a bare absolute path becomes ``unix:PATH``."""
    addr = addr or os.environ.get("CLUSTERCTL_ADDR") or DEFAULT_ADDR
    return f"unix:{addr}" if addr.startswith("/") else addr


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
            raise UsageError(f"{what} is readable by group or others (mode {stat.S_IMODE(st.st_mode):o}): "
                             f"run chmod 600 {path}")  # fmt: skip
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


def open_channel(addr: str, *, ca: str | None = None, cert: str | None = None, key: str | None = None,
                 options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
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


class ClusterClient:
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
    ) -> None:
        self.addr = resolve_addr(addr)
        self.token = resolve_token(token)
        self.timeout = timeout
        self._channel = channel or open_channel(self.addr, ca=ca, cert=cert, key=key)
        self.jobs = jobs_pb2_grpc.JobServiceStub(self._channel)
        self.cluster = cluster_pb2_grpc.ClusterServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token}")] if self.token else []

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata())
        except grpc.RpcError as exc:
            raise _service_error(exc) from None

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, spec: jobs_pb2.JobSpec) -> jobs_pb2.SubmitJobResponse:
        """Submit; a request_id is generated when missing so that the retry below is idempotent."""
        if not spec.request_id:
            spec.request_id = new_request_id()
        request = jobs_pb2.SubmitJobRequest(spec=spec)
        try:
            return self._call(self.jobs.SubmitJob, request)
        except ServiceError as exc:
            if exc.code_name != "UNAVAILABLE":
                raise
            return self._call(self.jobs.SubmitJob, request)

    def get(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(self.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id)).job

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
        return list(self._call(self.jobs.ListJobs, request).jobs)

    def cancel(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(self.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id)).job

    def requeue(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(self.jobs.RequeueJob, jobs_pb2.RequeueJobRequest(job_id=job_id)).job

    def watch(self, job_ids: list[str] | None = None, *, include_initial: bool = True) -> Iterator[jobs_pb2.JobEvent]:
        """Stream job events until the server ends the stream or the caller stops iterating."""
        request = jobs_pb2.WatchJobsRequest(job_ids=job_ids or [], include_initial=include_initial)
        yield from _drain(self.jobs.WatchJobs(request, metadata=self._metadata()))

    def read_log(
        self, job_id: str, *, stderr: bool = False, tail_lines: int = 0, follow: bool = False
    ) -> Iterator[jobs_pb2.JobLogChunk]:
        """A job's output in chunks, read by the service with the job owner's rights.

        ``follow`` keeps the stream open (no deadline) until the job ends, across requeues.
        """
        request = jobs_pb2.ReadJobLogRequest(
            job_id=job_id, tail_lines=tail_lines, follow=follow,
            stream=jobs_pb2.LOG_STREAM_STDERR if stderr else jobs_pb2.LOG_STREAM_STDOUT,
        )  # fmt: skip
        timeout = None if follow else self.timeout * 10
        yield from _drain(self.jobs.ReadJobLog(request, metadata=self._metadata(), timeout=timeout))

    def history(self, request: jobs_pb2.ListHistoryRequest) -> jobs_pb2.ListHistoryResponse:
        return self._call(self.jobs.ListHistory, request)

    def hold(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(self.jobs.HoldJob, jobs_pb2.HoldJobRequest(job_id=job_id)).job

    def release(self, job_id: str) -> jobs_pb2.JobStatus:
        return self._call(self.jobs.ReleaseJob, jobs_pb2.ReleaseJobRequest(job_id=job_id)).job

    def queue(
        self, *, partition: str = "", states: list[jobs_pb2.JobState] | None = None
    ) -> jobs_pb2.ListQueueResponse:
        request = jobs_pb2.ListQueueRequest(partition=partition, states=states or [])
        return self._call(self.jobs.ListQueue, request)

    def adopt(self, job_id: str, *, checkpoint_uri: str = "") -> jobs_pb2.AdoptJobResponse:
        return self._call(self.jobs.AdoptJob, jobs_pb2.AdoptJobRequest(job_id=job_id, checkpoint_uri=checkpoint_uri))

    def checkpoints(self, job_id: str) -> jobs_pb2.ListJobCheckpointsResponse:
        return self._call(self.jobs.ListJobCheckpoints, jobs_pb2.ListJobCheckpointsRequest(job_id=job_id))

    # -- cluster -----------------------------------------------------------------------------

    def topology(self) -> cluster_pb2.Topology:
        return self._call(self.cluster.GetTopology, cluster_pb2.GetTopologyRequest()).topology

    def nodes(self, *, partition: str = "") -> list[cluster_pb2.Node]:
        return list(self._call(self.cluster.ListNodes, cluster_pb2.ListNodesRequest(partition=partition)).nodes)

    def plan(self, request: cluster_pb2.PlanPlacementRequest) -> cluster_pb2.Placement:
        return self._call(self.cluster.PlanPlacement, request).placement


def _service_error(exc: grpc.RpcError) -> ServiceError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    name = code.name if code is not None else "UNKNOWN"
    if name == "UNAVAILABLE" and "failed to connect" in (details or "").lower():
        details = f"cannot reach clusterd: {details}"
    trailing: Any = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    request_id = next((str(value) for key, value in trailing or () if key == "x-request-id"), "")
    return ServiceError(name, details or "", request_id=request_id)


__all__ = ["ClusterClient", "ServiceError", "UsageError", "new_request_id", "open_channel", "resolve_addr",
           "resolve_token"]


def _drain(stream: Any) -> Iterator[Any]:
    """A server stream's messages; its end by cancellation is a plain end, other errors ServiceError.

    The stream is cancelled when the caller stops iterating early, so the server stops sending.
    """
    try:
        yield from stream
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.CANCELLED:
            return
        raise _service_error(exc) from None
    finally:
        stream.cancel()
