"""Several clusterd addresses: one lazy channel each, the last that worked first, retries through tenacity.

Why: with several clusterd replicas every replica serves the whole API, so when the one a
caller talks to dies (or is being restarted) the call can go on at another, without the caller
noticing, but only where repeating it cannot do a thing twice. So each call says how safe it is
(:class:`Retry`): a SAFE call (reads, and writes that are idempotent: a submit with its request_id,
cancel, hold, release, adopt) is repeated on UNAVAILABLE and DEADLINE_EXCEEDED; an UNSENT call (a
requeue: each one restarts the job again) only when it never reached a server (the connection could
not be made). Every other status (PERMISSION_DENIED, NOT_FOUND, INVALID_ARGUMENT, ...) is the
service's answer and comes back at once.

An attempt goes to the address that last worked; a failure moves on to the next one at once, and
only after a whole round of addresses failed does the caller wait (exponential backoff with jitter),
for at most ``retry_seconds`` in all (CLUSTERCTL_RETRY_SECONDS, default 15: longer than a leader
lease, so a lone replica being restarted is waited for too).
"""

from __future__ import annotations

import enum
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import grpc
import tenacity

from clusterctl.errors import UsageError

DEFAULT_ADDR = "unix:/run/clusterd/clusterd.sock"  # clusterd's default listen (service/clusterd/config.py)
DEFAULT_RETRY_SECONDS = 15.0
RETRY_ENV = "CLUSTERCTL_RETRY_SECONDS"
BACKOFF_INITIAL, BACKOFF_MAX = 0.1, 2.0  # seconds between rounds (before jitter)

C = TypeVar("C")
T = TypeVar("T")

# Details of an UNAVAILABLE that gRPC raises before a request leaves the client (nothing was sent).
_NOT_CONNECTED = ("failed to connect", "connection refused", "no such file or directory", "dns resolution failed")


class Retry(enum.Enum):
    """How safe a call is to repeat (see the module doc)."""

    SAFE = "safe"  # UNAVAILABLE or DEADLINE_EXCEEDED: try again (on the next address)
    UNSENT = "unsent"  # only a connection failure: the request reached no server
    NEVER = "never"  # the first answer, whatever it is


def split_addrs(addr: str | None = None) -> tuple[str, ...]:
    """``addr``, else CLUSTERCTL_ADDR, else the standard socket, as a tuple of gRPC targets.

    A comma-separated list names several replicas (``unix:/a.sock,host2:50051``); a bare absolute
    path means ``unix:PATH``. Empty items are ignored, duplicates kept once.

    Raises:
        UsageError: the list names no address at all (only commas).
    """
    text = addr or os.environ.get("CLUSTERCTL_ADDR") or DEFAULT_ADDR
    out: list[str] = []
    for item in text.split(","):
        item = item.strip()
        target = f"unix:{item}" if item.startswith("/") else item
        if target and target not in out:
            out.append(target)
    if not out:
        raise UsageError(f"no clusterd address in {text!r} (CLUSTERCTL_ADDR or --addr)")
    return tuple(out)


def resolve_retry_seconds(seconds: float | None = None) -> float:
    """``seconds``, else CLUSTERCTL_RETRY_SECONDS, else 15; 0 turns retries off (one attempt per address).

    Raises:
        UsageError: CLUSTERCTL_RETRY_SECONDS is not a number >= 0.
    """
    if seconds is None:
        text = os.environ.get(RETRY_ENV, "").strip()
        if not text:
            return DEFAULT_RETRY_SECONDS
        try:
            seconds = float(text)
        except ValueError:
            raise UsageError(f"{RETRY_ENV} must be a number of seconds, got {text!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"retry time must be a number of seconds >= 0, got {seconds!r}")
    return seconds


def not_connected(exc: grpc.RpcError) -> bool:
    """The call failed before its request reached any server (so any call may be repeated)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    return code == grpc.StatusCode.UNAVAILABLE and any(s in details.lower() for s in _NOT_CONNECTED)


def retryable(exc: BaseException, retry: Retry) -> bool:
    """Whether ``exc`` may be answered by trying again elsewhere, for a call that is ``retry`` safe."""
    if not isinstance(exc, grpc.RpcError) or retry is Retry.NEVER:
        return False
    if retry is Retry.UNSENT:
        return not_connected(exc)
    code = exc.code() if hasattr(exc, "code") else None
    return code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class CallFailed(Exception):
    """A call's last gRPC error and every address it was tried at (the caller maps it to its own error)."""

    def __init__(self, error: grpc.RpcError, tried: Sequence[str]) -> None:
        super().__init__(str(error))
        self.error = error
        self.tried = tuple(tried)


class Endpoints(Generic[C]):
    """The addresses, a connection per address made on first use, and which one to try first.

    ``connect(addr)`` makes a connection (a channel and its stubs); ``close(conn)`` closes one.
    Thread-safe: threads sharing a client share its connections.
    """

    def __init__(self, addrs: Sequence[str], connect: Callable[[str], C], close: Callable[[C], None]) -> None:
        if not addrs:
            raise ValueError("no addresses")
        self.addrs = tuple(addrs)
        self._connect = connect
        self._close = close
        self._conns: dict[int, C] = {}
        self._lock = threading.Lock()
        self.preferred = 0  # the index that last worked (or the next to try after a failure)

    def get(self, index: int) -> C:
        with self._lock:
            conn = self._conns.get(index)
            if conn is None:
                conn = self._conns[index] = self._connect(self.addrs[index])
            return conn

    def worked(self, index: int) -> None:
        self.preferred = index

    def failed(self, index: int) -> int:
        """``index`` failed: the next address becomes the preferred one (unless another thread moved on)."""
        with self._lock:
            if self.preferred == index:
                self.preferred = (index + 1) % len(self.addrs)
            return self.preferred

    def close(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            self._close(conn)


def retrying(endpoints: Endpoints[C], retry: Retry, seconds: float) -> tenacity.Retrying:
    """A tenacity policy: retry what ``retry`` allows, wait only between rounds of addresses, and
    stop once ``seconds`` passed since the first failure and every address was tried once.

    (Counted from the first failure, not from the start: an attempt that waited out its deadline,
    or a stream that ran for an hour, still leaves the whole time for failing over.)
    """
    rounds = len(endpoints.addrs)
    first_failure: list[float] = []

    def wait(state: tenacity.RetryCallState) -> float:
        if state.attempt_number % rounds:
            return 0.0  # the next address has not been tried in this round yet
        step = BACKOFF_INITIAL * 2 ** (state.attempt_number // rounds - 1)
        return min(BACKOFF_MAX, step) + random.uniform(0, BACKOFF_INITIAL)  # jitter: callers spread out

    def stop(state: tenacity.RetryCallState) -> bool:
        now = time.monotonic()
        if not first_failure:
            first_failure.append(now)
        return state.attempt_number >= rounds and now - first_failure[0] >= seconds

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: retryable(exc, retry)), stop=stop, wait=wait, reraise=True
    )


def call(endpoints: Endpoints[C], attempt: Callable[[C], T], *, retry: Retry, seconds: float) -> T:
    """``attempt(conn)`` at the preferred address, failing over as ``retry`` allows (module doc).

    Raises:
        CallFailed: the last error and the addresses tried, when no attempt succeeded.
    """
    tried: list[str] = []
    try:
        for try_ in retrying(endpoints, retry, seconds):
            with try_:
                index = endpoints.preferred
                if endpoints.addrs[index] not in tried:
                    tried.append(endpoints.addrs[index])
                try:
                    result = attempt(endpoints.get(index))
                except grpc.RpcError as exc:
                    if retryable(exc, retry):
                        endpoints.failed(index)
                    raise
                endpoints.worked(index)
        return result
    except grpc.RpcError as exc:
        raise CallFailed(exc, tried) from None


_END: Any = object()  # a stream's clean end, as a value (StopIteration must not cross tenacity)


def stream(endpoints: Endpoints[C], open_stream: Callable[[C], Any], *, seconds: float) -> Iterator[Any]:
    """The messages of a server stream that is reopened, at the next address, when it breaks.

    ``open_stream(conn)`` starts the call; when called again after a break it must ask to continue
    where the caller is (a resume token, an offset). A break is retried as a SAFE call, with the
    time counted afresh after every message received.

    Raises:
        CallFailed: the stream could not be (re)opened, or the service answered an error.
    """
    current: Any = None
    index = -1
    tried: list[str] = []

    def next_message() -> Any:
        nonlocal current, index
        if current is None:
            index = endpoints.preferred
            if endpoints.addrs[index] not in tried:
                tried.append(endpoints.addrs[index])
            current = open_stream(endpoints.get(index))
        try:
            message = next(current)
        except StopIteration:
            current = None
            return _END
        except grpc.RpcError as exc:
            current.cancel()
            current = None
            if retryable(exc, Retry.SAFE):
                endpoints.failed(index)
            raise
        endpoints.worked(index)
        return message

    try:
        while (message := retrying(endpoints, Retry.SAFE, seconds)(next_message)) is not _END:
            yield message
    except grpc.RpcError as exc:
        raise CallFailed(exc, tried) from None
    finally:
        if current is not None:
            current.cancel()  # the caller stopped early: the server stops sending


__all__ = [
    "DEFAULT_ADDR",
    "CallFailed",
    "Endpoints",
    "Retry",
    "call",
    "not_connected",
    "resolve_retry_seconds",
    "retryable",
    "split_addrs",
    "stream",
]
