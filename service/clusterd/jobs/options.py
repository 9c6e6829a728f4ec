"""sbatch options for a validated job (pure: tested against golden argv lists)."""

from __future__ import annotations

from clusterctl.v1 import jobs_pb2
from clusterd.jobs.validate import ResolvedJob


def sbatch_options(
    spec: jobs_pb2.JobSpec,
    job: ResolvedJob,
    *,
    comment: str,
    signal_before_timeout: int,
    placement_args: list[str],
    output_dir: str,
) -> list[str]:
    """Options passed on sbatch's command line; they override the script's ``#SBATCH`` lines.

    ``--requeue`` and ``--open-mode=append`` let the supervisor bring the job back under the same id
    without truncating its log; ``--signal=B:USR1@T`` gives the batch shell time to checkpoint.
    """
    script_sets = job.directives.keys()
    opts = []
    if spec.name or "job-name" not in script_sets:
        opts.append(f"--job-name={job.name}")
    # Resource options only when the request set them: a script's own #SBATCH lines (--ntasks,
    # --nodes=2-4, --gres=gpu:a100:4, ...) must reach sbatch unchanged.
    if spec.nodes:
        opts.append(f"--nodes={spec.nodes}")
    if spec.tasks_per_node:
        opts.append(f"--ntasks-per-node={spec.tasks_per_node}")
    if spec.cpus_per_task:
        opts.append(f"--cpus-per-task={spec.cpus_per_task}")
    if spec.gpus_per_node:
        opts.append(f"--gres=gpu:{spec.gpus_per_node}")
    opts += ["--requeue", "--open-mode=append", "--export=ALL", f"--comment={comment}"]
    if spec.memory_mb_per_node:
        opts.append(f"--mem={spec.memory_mb_per_node}M")
    if spec.time_limit:
        opts.append(f"--time={spec.time_limit}")
    if signal_before_timeout > 0:
        opts.append(f"--signal=B:USR1@{signal_before_timeout}")
    if job.partition and (spec.partition or "partition" not in script_sets):
        opts.append(f"--partition={job.partition}")
    if spec.account:
        opts.append(f"--account={spec.account}")
    if spec.qos:
        opts.append(f"--qos={spec.qos}")
    if spec.placement.constraints:
        opts.append(f"--constraint={'&'.join(spec.placement.constraints)}")
    stdout = spec.stdout_path or ("" if "output" in job.directives else f"{output_dir}/%x-%j.out")
    if stdout:
        opts.append(f"--output={stdout}")
    if spec.stderr_path:
        opts.append(f"--error={spec.stderr_path}")
    opts.extend(placement_args)
    return opts


def job_environment(spec: jobs_pb2.JobSpec, *, record_id: int) -> dict[str, str]:
    """What the job sees: the user's variables plus the CLUSTERCTL_* contract."""
    env = dict(spec.environment)
    env["CLUSTERCTL_RECORD_ID"] = str(record_id)
    if spec.checkpoint_uri:
        env["CLUSTERCTL_CHECKPOINT_URI"] = spec.checkpoint_uri
    return env
