"""The service's error hierarchy; security/audit.py STATUS_NAMES maps each class to one gRPC status code."""

from __future__ import annotations


class ServiceError(Exception):
    """Root of every error the service raises on purpose."""


class InvalidArgument(ServiceError):
    """A request field is malformed; ``field`` names it (dotted path, e.g. ``spec.nodes``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Unauthenticated(ServiceError):
    pass


class PermissionDenied(ServiceError):
    pass


class NotFound(ServiceError):
    pass


class FailedPrecondition(ServiceError):
    pass


class ResourceExhausted(ServiceError):
    pass


class AlreadyExists(ServiceError):
    """A request id reused for a different request: the message names the first job."""


class Unavailable(ServiceError):
    """This replica cannot serve the call now and another one can (e.g. a follower asked for the
    leader's work): the caller retries elsewhere."""


class OutOfRange(ServiceError):
    """A position (a watch's resume token) the service no longer keeps or never gave out."""


class SlurmError(ServiceError):
    """A Slurm command failed; ``stderr`` carries Slurm's own words for the caller."""

    def __init__(self, command: str, returncode: int | None, stderr: str) -> None:
        lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
        detail = key_line(lines) or "no output"
        rc = "timed out" if returncode is None else f"exit {returncode}"
        super().__init__(f"{command} failed ({rc}): {detail}")
        self.command = command
        self.returncode = returncode
        self.stderr = stderr
        # Slurm's last words without the "sbatch: error: " prefix: what a user needs to read.
        self.detail = detail.removeprefix(f"{command}: error: ")


def key_line(lines: list[str]) -> str:
    """The line that says what went wrong: the first ``error:`` line, else the first that is not
    sbatch's generic 'Try "sbatch --help"' hint (which follows the line naming the option)."""
    meaningful = [ln for ln in lines if not ln.startswith("Try ")]
    return next((ln for ln in meaningful if "error:" in ln), meaningful[0] if meaningful else "")


class SlurmUnavailable(SlurmError):
    """slurmctld did not answer (timeouts, connection refused): retryable by the caller."""


# Slurm's words for "slurmctld did not answer" rather than "your job is wrong", in the stderr of its
# commands, slurmrestd's errors array and pyslurm's exceptions alike.
_UNAVAILABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Slurm backup controller in standby mode",
    "Zero Bytes were transmitted",
)


def says_unavailable(text: str) -> bool:
    """Whether Slurm's message means the controller is unreachable (so: SlurmUnavailable)."""
    return any(marker in text for marker in _UNAVAILABLE_MARKERS)
