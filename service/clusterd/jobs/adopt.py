"""Adoption: a job its user submitted with plain sbatch, taken under the service's supervision.

The checks are pure (they read one queue snapshot); JobManager.adopt reserves the record, tags
the Slurm job with the record's comment (the supervisor recognises its jobs by that tag and their
owner, see JobRecord.adopts) and makes it requeueable, so restarts apply as to any submission.
Only the job's owner may adopt it: an admin acting for a user goes through the user's own token,
because adoption makes the service act on the job in its owner's name from then on.
"""

from __future__ import annotations

import posixpath

from clusterctl.storage import InvalidURIError, parse_uri
from clusterd.auth.identity import Identity
from clusterd.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from clusterd.model.spec import JobSpec
from clusterd.slurm.types import SlurmJob
from clusterd.supervisor.cache import ClusterSnapshot

_MAX_URI = 4096


def adoptable(ident: Identity, job_id: str, snapshot: ClusterSnapshot) -> SlurmJob:
    """The caller's live, plain (non-array) job ``job_id`` from the last queue poll.

    Raises NotFound (not in the queue), PermissionDenied (someone else's), FailedPrecondition
    (an array, or already ended).
    """
    job = snapshot.jobs.get(job_id)
    if job is None and job_id in snapshot.arrays:
        job = snapshot.arrays[job_id][0]
    if job is None:
        raise NotFound(
            f"job {job_id} is not in Slurm's queue: only queued or running jobs can be adopted "
            "(a job submitted a moment ago shows after the next poll)"
        )
    if job.user != ident.user:
        raise PermissionDenied(f"job {job_id} belongs to another user: only its owner may adopt it")
    if job.in_array:
        raise FailedPrecondition(
            f"job {job_id} is an array job: arrays submitted with plain sbatch cannot be "
            "adopted; submit the array through clusterctl instead"
        )
    if job.state.terminal:
        raise FailedPrecondition(f"job {job_id} has already ended ({job.state.value}): nothing to supervise")
    return job


def check_checkpoint_uri(uri: str) -> str:
    """``checkpoint_uri`` as the adopted job's record keeps it; raises InvalidArgument naming the field."""
    if not uri:
        return ""
    if len(uri) > _MAX_URI or any(ord(c) < 32 for c in uri):
        raise InvalidArgument("checkpoint_uri", "must be one line of at most 4096 characters")
    if not uri.startswith(("s3://", "file://", "/")):
        raise InvalidArgument("checkpoint_uri", f"{uri!r}: expected s3://bucket/prefix, file:///dir or /dir")
    try:
        parse_uri(uri)
    except InvalidURIError as exc:
        raise InvalidArgument("checkpoint_uri", str(exc)) from None
    return uri


def _absolute(path: str, workdir: str) -> str:
    return posixpath.normpath(posixpath.join(workdir or "/", path)) if path else ""


def adoption_spec(job: SlurmJob, checkpoint_uri: str) -> JobSpec:
    """What the record keeps of a job it did not submit: what ``status`` and ``logs`` need.

    The request id makes a retried adopt idempotent (the same job, submitted at the same time).
    """
    stdout = job.stdout or "slurm-%j.out"
    return JobSpec(
        name=job.name,
        partition=job.partition,
        working_directory=job.working_directory,
        stdout_path=_absolute(stdout, job.working_directory),
        stderr_path=_absolute(job.stderr, job.working_directory) if job.stderr != job.stdout else "",
        checkpoint_uri=checkpoint_uri,
        request_id=f"adopt-{job.job_id}-{int(job.submit_time or 0)}",
    )
