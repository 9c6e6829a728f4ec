"""Pure argv builders for Slurm's commands (STYLE 3: build -> run -> parse)."""

from __future__ import annotations

from clusterd.slurm.types import SubmitArgs


def sbatch_argv(args: SubmitArgs) -> list[str]:
    """``sbatch --parsable`` with the service's options; the script itself goes on stdin.

    Options are always ``--name=value`` single tokens, so no value can be read as another option.
    """
    argv = ["sbatch", "--parsable"]
    if args.uid is not None:
        argv.append(f"--uid={args.uid}")
    if args.gid is not None:
        argv.append(f"--gid={args.gid}")
    if args.working_directory:
        argv.append(f"--chdir={args.working_directory}")
    argv.extend(args.options)
    return argv


def parse_sbatch_parsable(stdout: str) -> str:
    """``sbatch --parsable`` prints ``jobid`` or ``jobid;cluster``."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"unexpected sbatch output: {stdout.strip()[:200]!r}")
    return job_id


def scancel_argv(job_id: str) -> list[str]:
    return ["scancel", job_id]


def requeue_argv(job_id: str) -> list[str]:
    return ["scontrol", "requeue", job_id]


def update_job_argv(job_id: str, *, exclude_nodes: tuple[str, ...] | None, start_after: int | None) -> list[str]:
    """``scontrol update``: StartTime=now clears the ~120 s BeginTime hold Slurm puts on requeued jobs."""
    argv = ["scontrol", "update", f"jobid={job_id}"]
    if exclude_nodes is not None:
        argv.append(f"ExcNodeList={','.join(exclude_nodes)}")
    if start_after is not None:
        argv.append("StartTime=now" if start_after <= 0 else f"StartTime=now+{int(start_after)}")
    return argv


SQUEUE_ARGV = ["squeue", "--all", "--json"]
SINFO_ARGV = ["sinfo", "--json"]
TOPOLOGY_ARGV = ["scontrol", "show", "topology"]
PARTITIONS_ARGV = ["scontrol", "show", "partition", "--oneliner"]
VERSION_ARGV = ["sbatch", "--version"]
