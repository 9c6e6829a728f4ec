"""Client-side errors: one root, so callers and the CLI catch exactly what this package raises."""

from __future__ import annotations


class ClusterctlError(Exception):
    """Root of every error raised by the clusterctl client library.

    Subclasses: :class:`UsageError`, :class:`ServiceError` (the gRPC client's),
    ``clusterctl.storage.StorageError`` and ``clusterctl.checkpoint.CheckpointError`` (their
    modules import this one, never the other way round), so ``except ClusterctlError`` catches
    everything the library raises on purpose.
    """


class UsageError(ClusterctlError):
    """Bad input from the caller (CLI exit code 2)."""


class ServiceError(ClusterctlError):
    """The service answered with an error status (CLI exit code 1, or 2 for INVALID_ARGUMENT)."""

    def __init__(self, code_name: str, message: str, *, request_id: str = "", addresses: tuple[str, ...] = ()) -> None:
        super().__init__(f"{code_name}: {message}")
        self.code_name = code_name
        self.message = message
        self.request_id = request_id  # clusterd's id for the call: operators find its log lines by it
        self.addresses = addresses  # the clusterd addresses the call was tried at (several when it failed over)

    @property
    def is_bad_input(self) -> bool:
        return self.code_name in ("INVALID_ARGUMENT", "OUT_OF_RANGE")

    @property
    def server_too_old(self) -> bool:
        """The server has no such call (UNIMPLEMENTED): it is older than this client."""
        return self.code_name == "UNIMPLEMENTED"


class ResumeExpired(ServiceError):
    """A watch cannot continue after ``resume_token``: the service's event log no longer reaches back
    that far (OUT_OF_RANGE). Watch again with a snapshot (include_initial) to get the current state."""

    def __init__(self, resume_token: str, detail: str = "") -> None:
        super().__init__(
            "OUT_OF_RANGE",
            f"cannot resume the watch after event {resume_token}: the service no longer keeps events that old"
            + (f" ({detail})" if detail else "")
            + "; watch again to get the current state",
        )
        self.resume_token = resume_token
