"""The submit path's steps between validation and Slurm (pure except where they say they block).

Directories are settled with the caller's rights, the checkpoint signal is added only when the
job asks for it, and the spec the store keeps holds the resolved values ``status`` shows.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace

from clusterd.errors import InvalidArgument
from clusterd.jobs.users import UnixUser, directory_problem, job_dir
from clusterd.model.spec import JobSpec
from clusterd.slurm.request import JobRequest, Signal, slurm_time

_LEGACY_OUTPUT = "%x-%j.out"  # clients that send no submit directory: outputs in the service's job dir


def settle_directories(request: JobRequest, user: UnixUser, job_root: str) -> JobRequest:
    """Submit and working directories made explicit, each checked with the caller's rights.

    Blocking (filesystem): run it in a worker thread. Without a submit directory (older clients)
    the job runs in ``<job_root>/<user>`` (created), with outputs named ``%x-%j.out`` there.
    """
    stdout = request.stdout
    if request.submit_directory:
        submit_dir = request.submit_directory
        problem = directory_problem(submit_dir, user)
        if problem:
            raise InvalidArgument("spec.submit_directory", problem)
    else:
        submit_dir = job_dir(job_root, user)
        stdout = stdout or f"{submit_dir}/{_LEGACY_OUTPUT}"
    workdir = posixpath.normpath(posixpath.join(submit_dir, request.working_directory or "."))
    if request.working_directory:
        problem = directory_problem(workdir, user)
        if problem:
            raise InvalidArgument("spec.working_directory", f"--chdir {problem}")
    return replace(request, submit_directory=submit_dir, working_directory=workdir, stdout=stdout)


def with_signal(request: JobRequest, spec: JobSpec, default_seconds: int) -> JobRequest:
    """Add the checkpoint-before-timeout signal (``B:USR1@T``) only for a job that asks for it.

    A job asks by having a checkpoint URI or by setting ``signal_before_timeout_seconds``; its own
    ``--signal`` wins. Any other job ends at its time limit exactly as under sbatch.
    """
    if request.signal is not None:
        return request
    asked = spec.restart_policy.signal_before_timeout_seconds
    if asked is None and not spec.checkpoint_uri:
        return request
    seconds = asked if asked is not None else default_seconds
    if seconds <= 0:
        return request
    limit = request.time_limit_seconds
    if limit is not None and seconds >= limit:
        seconds = max(limit // 4, 1)
    return replace(request, signal=Signal("USR1", seconds, batch_only=True))


def _output_path(request: JobRequest, path: str) -> str:
    if not path:
        path = "slurm-%A_%a.out" if request.array else "slurm-%j.out"
    return posixpath.normpath(posixpath.join(request.working_directory, path))


def persisted_spec(spec: JobSpec, request: JobRequest) -> JobSpec:
    """The spec the store keeps: the caller's, with what status shows resolved from the request
    (name, time limit, working directory, output paths still holding Slurm's %-patterns); a job
    that asked for ``--no-requeue`` gets a restart budget of zero, so the supervisor leaves it be."""
    time_limit = spec.time_limit
    if request.time_unlimited:
        time_limit = "UNLIMITED"
    elif request.time_limit_seconds is not None:
        time_limit = slurm_time(request.time_limit_seconds)
    policy = spec.restart_policy
    if not request.requeue:  # --no-requeue: the user's choice, no automatic restart either
        policy = replace(policy, max_restarts=0)
    return replace(
        spec,
        name=request.name,
        working_directory=request.working_directory,
        submit_directory=request.submit_directory,
        stdout_path=_output_path(request, request.stdout),
        stderr_path=_output_path(request, request.stderr) if request.stderr else "",
        array=request.array.render() if request.array else "",  # an #SBATCH --array too
        time_limit=time_limit,
        restart_policy=policy,
        # --spare-nodes: the nodes the ranks run on (an #SBATCH -N too); Slurm holds the spares beside them
        nodes=request.nodes - spec.spare_nodes if spec.spare_nodes and request.nodes else spec.nodes,
    )
