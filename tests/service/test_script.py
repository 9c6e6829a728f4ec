"""#SBATCH header parsing, environment injection and generated sbatch options."""

from __future__ import annotations

import subprocess

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.config import LimitsConfig
from clusterd.jobs.options import job_environment, sbatch_options
from clusterd.jobs.script import command_script, inject_environment, parse_directives
from clusterd.jobs.validate import ClusterFacts, validate_spec
from clusterd.slurm.argv import sbatch_argv, update_job_argv
from clusterd.slurm.types import SubmitArgs

SCRIPT = """#!/bin/bash
# a comment
#SBATCH --job-name=train
#SBATCH -N 2 --ntasks-per-node=4
#SBATCH --gres=gpu:4   # four per node
#SBATCHX --not-a-directive
#SBATCH -t 1-00:00

echo start
#SBATCH --nodes=9
"""


def test_directives_stop_at_first_command() -> None:
    d = parse_directives(SCRIPT)
    assert d == {"job-name": "train", "nodes": "2", "ntasks-per-node": "4", "gres": "gpu:4", "time": "1-00:00"}


def test_environment_goes_after_the_header_quoted() -> None:
    out = inject_environment(SCRIPT, {"MSG": "it's $(id) `x`", "A": "1"})
    lines = out.splitlines()
    start = lines.index("# --- environment added by clusterd ---")
    assert lines[start - 1] == "" and lines[start + 1] == "export A=1"
    assert parse_directives(out) == parse_directives(SCRIPT)  # header intact: sbatch still sees it
    printed = subprocess.run(["bash", "-c", out.split("echo start")[0] + 'printf %s "$MSG"'],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert printed == "it's $(id) `x`"


def test_command_script_runs_argv_verbatim() -> None:
    script = command_script(["printf", "%s|", "a b", "$(id)", ";ls"])
    body = script.splitlines()[-1].replace("exec srun --kill-on-bad-exit=1 ", "")
    assert subprocess.run(["bash", "-c", body], capture_output=True, text=True).stdout == "a b|$(id)|;ls|"


def test_sbatch_options_golden() -> None:
    spec = jobs_pb2.JobSpec(
        name="train", command=["python", "t.py"], nodes=2, gpus_per_node=4, time_limit="1:00:00",
        memory_mb_per_node=1024, account="ml", checkpoint_uri="s3://ckpt/run1",
        placement=cluster_pb2.PlacementPreference(constraints=["a100", "ib"]),
    )  # fmt: skip
    facts = ClusterFacts(frozenset({"debug"}), frozenset(), "debug")
    job = validate_spec(spec, facts, LimitsConfig())
    opts = sbatch_options(spec, job, comment="clusterctl-record:7", signal_before_timeout=120,
                          placement_args=["--switches=1@5:00"], output_dir="/jobs/alice")  # fmt: skip
    assert opts == [
        "--job-name=train", "--nodes=2", "--gres=gpu:4", "--requeue",
        "--open-mode=append", "--export=ALL", "--comment=clusterctl-record:7", "--mem=1024M",
        "--time=1:00:00", "--signal=B:USR1@120", "--partition=debug", "--account=ml", "--constraint=a100&ib",
        "--output=/jobs/alice/%x-%j.out", "--switches=1@5:00",
    ]  # fmt: skip
    assert job_environment(spec, record_id=7) == {
        "CLUSTERCTL_RECORD_ID": "7",
        "CLUSTERCTL_CHECKPOINT_URI": "s3://ckpt/run1",
    }


def test_sbatch_argv_is_single_tokens() -> None:
    args = SubmitArgs(options=("--job-name=a --uid=0",), script="#!/bin/sh\n", uid=1000, gid=1000,
                      working_directory="/home/a")  # fmt: skip
    assert sbatch_argv(args) == ["sbatch", "--parsable", "--uid=1000", "--gid=1000", "--chdir=/home/a",
                                 "--job-name=a --uid=0"]  # fmt: skip
    assert update_job_argv("5", exclude_nodes=("node1", "node2"), start_after=0) == [
        "scontrol", "update", "jobid=5", "ExcNodeList=node1,node2", "StartTime=now"
    ]  # fmt: skip


def test_script_resources_reach_sbatch_unchanged() -> None:
    """Only what the request itself sets goes on the command line; the script's lines stay in charge."""
    script = "#!/bin/bash\n#SBATCH -J mine\n#SBATCH --ntasks=8\n#SBATCH --nodes=2-4\n#SBATCH --gres=gpu:a100:4\n" \
             "#SBATCH -p batch\nsrun hostname\n"
    spec = jobs_pb2.JobSpec(script=script)
    facts = ClusterFacts(frozenset({"debug", "batch"}), frozenset(), "debug")
    job = validate_spec(spec, facts, LimitsConfig())
    opts = sbatch_options(spec, job, comment="c", signal_before_timeout=0, placement_args=[], output_dir="/o")
    assert not [o for o in opts if o.startswith(("--job-name", "--nodes", "--ntasks", "--gres", "--partition",
                                                 "--cpus-per-task"))]  # fmt: skip
    assert (job.nodes, job.gpus_per_node, job.partition, job.name) == (2, 4, "batch", "mine")
