"""Environment injection, generated scripts, and the sbatch argv rendered from a JobRequest."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from clusterd.config import LimitsConfig
from clusterd.errors import InvalidArgument
from clusterd.jobs.directives import parse_directives
from clusterd.jobs.script import command_script, inject_environment, job_environment, tier_environment
from clusterd.jobs.validate import validate_spec
from clusterd.model.spec import JobSpec, PlacementPreference
from clusterd.slurm.argv import sbatch_argv, update_job_argv
from clusterd.slurm.request import JobRequest, Switches
from clusterd.slurm.types import ClusterFacts

SCRIPT = """#!/bin/bash
# a comment
#SBATCH --job-name=train
#SBATCH -N 2 --ntasks-per-node=4
#SBATCH --gres=gpu:4   # four per node
# SBATCH --not-a-directive
#SBATCH -t 1-00:00

echo start
#SBATCH --nodes=9
"""
FACTS = ClusterFacts(frozenset({"debug", "batch"}), frozenset(), "debug")


def test_environment_goes_after_the_header_quoted_on_one_line() -> None:
    out = inject_environment(SCRIPT, {"MSG": "it's $(id) `x`", "A": "1"})
    lines = out.splitlines()
    assert len(lines) == len(SCRIPT.splitlines()) + 1  # body line numbers move by one at most
    added = lines.index("echo start") - 1
    assert lines[added].startswith("export A=1; export MSG=")
    assert parse_directives(out) == parse_directives(SCRIPT)  # header intact
    printed = subprocess.run(
        ["bash", "-c", out.split("echo start")[0] + 'printf %s "$MSG"'], capture_output=True, text=True, check=True
    ).stdout
    assert printed == "it's $(id) `x`"


def test_a_memory_tier_job_starts_its_tiers_before_the_body_with_the_secret_off_argv() -> None:
    env = tier_environment(7)
    assert env["CLUSTERCTL_CHECKPOINT_TIER"] == "memory" and env["CLUSTERCTL_TIER_JOB"] == "record-7"
    assert len(bytes.fromhex(env["CLUSTERCTL_TIER_SECRET"])) == 32 and tier_environment(7) != env  # fresh each time
    out = inject_environment(SCRIPT, env)
    added = out.splitlines()[out.splitlines().index("echo start") - 1]
    assert (
        "srun --overlap --nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist=" in added
        and "clusterctl.tier.allocation serve" in added
    )
    assert added.index("allocation wait") < added.index("trap ")  # tiers answer before the user's lines run
    assert added.count(env["CLUSTERCTL_TIER_SECRET"]) == 1  # only in its export: argv never carries it
    assert "export CLUSTERCTL_TIER_SECRET=" + env["CLUSTERCTL_TIER_SECRET"] in added
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0
    assert "srun" not in inject_environment(SCRIPT, {"A": "1"})  # no tier asked: nothing started


def test_command_script_runs_argv_verbatim() -> None:
    script = command_script(["printf", "%s|", "a b", "$(id)", ";ls"])
    body = script.splitlines()[-1].replace("exec srun --kill-on-bad-exit=1 ", "")
    assert subprocess.run(["bash", "-c", body], capture_output=True, text=True).stdout == "a b|$(id)|;ls|"


def test_sbatch_argv_golden() -> None:
    spec = JobSpec(
        name="train",
        command=["python", "t.py"],
        nodes=2,
        gpus_per_node=4,
        time_limit="1:00:00",
        memory_mb_per_node=1024,
        account="ml",
        checkpoint_uri="s3://ckpt/run1",
        array="0-3%2",
        placement=PlacementPreference(constraints=["a100", "ib"]),
    )
    req = validate_spec(spec, FACTS, LimitsConfig())
    req = replace(
        req,
        user="alice",
        comment="clusterctl-record:7",
        switches=Switches(1, 300),
        working_directory="/jobs/alice",
        stdout="/jobs/alice/%x-%j.out",
    )
    assert sbatch_argv(req) == [
        "sbatch",
        "--parsable",
        "--ignore-pbs",
        "--job-name=train",
        "--comment=clusterctl-record:7",
        "--partition=debug",
        "--account=ml",
        "--nodes=2",
        "--gres=gpu:4",
        "--mem=1024M",
        "--time=1:00:00",
        "--constraint=a100&ib",
        "--switches=1@5:00",
        "--chdir=/jobs/alice",
        "--output=/jobs/alice/%x-%j.out",
        "--array=0-3%2",
        "--requeue",
        "--open-mode=append",
        "--export=ALL",
    ]
    assert job_environment({"A": "1"}, record_id=7, checkpoint_uri="s3://ckpt/run1") == {
        "A": "1",
        "CLUSTERCTL_RECORD_ID": "7",
        "CLUSTERCTL_CHECKPOINT_URI": "s3://ckpt/run1",
    }


def test_sbatch_argv_is_single_tokens() -> None:
    req = JobRequest(script="#!/bin/sh\n", name="a --uid=0", user="alice")
    assert sbatch_argv(req)[3] == "--job-name=a --uid=0"
    assert update_job_argv("5", exclude_nodes=("node1", "node2"), start_after=0) == [
        "scontrol",
        "update",
        "jobid=5",
        "ExcNodeList=node1,node2",
        "StartTime=now",
    ]


def test_script_directives_become_request_fields_and_are_neutralised() -> None:
    """sbatch sees the script's resources only as options rendered from the request."""
    script = (
        "#!/bin/bash\n#SBATCH -J mine\n#SBATCH --ntasks=8\n#SBATCH --nodes=2-4\n#SBATCH --gres=gpu:a100:4\n"
        "#SBATCH -p batch\nsrun hostname\n"
    )
    req = validate_spec(JobSpec(script=script), FACTS, LimitsConfig())
    assert (req.nodes, req.max_nodes, req.ntasks, req.gpus_per_node, req.gpu_type) == (2, 4, 8, 4, "a100")
    assert (req.partition, req.name) == ("batch", "mine")
    assert "\n#SBATCH" not in req.script and req.script.count("\n") == script.count("\n")
    argv = sbatch_argv(replace(req, user="alice"))
    assert {"--job-name=mine", "--ntasks=8", "--nodes=2-4", "--gres=gpu:a100:4", "--partition=batch"} <= set(argv)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("#SBATCH --ntasks=99999999999999", "exceeds the maximum"),
        ("#SBATCH --cpus-per-task=12345678901234567890123", "exceeds the maximum"),
        ("#SBATCH --gpus=99999999999", "exceeds the maximum"),
        ("#SBATCH --gpus-per-node=a100:99999999999", "exceeds the maximum"),
        ("#SBATCH --mem=99999999999999G", "exceeds the maximum"),
        ("#SBATCH --array=0-3%99999999999", "can run at once"),
        ("#SBATCH --nodelist=n[0-999999]", "more than"),
        ("#SBATCH --exclude=bad/name", "node name"),
        ("#SBATCH --nodelist=node99", "unknown node"),
        ("#SBATCH --switches=1@soon", "the wait after '@'"),
    ],
)
def test_directive_values_are_bounded_like_their_spec_fields(line: str, says: str) -> None:
    spec = JobSpec(script=f"#!/bin/bash\n{line}\nhostname\n")
    facts = ClusterFacts(partitions=frozenset({"debug"}), nodes=frozenset({"node1", "node2"}))
    with pytest.raises(InvalidArgument) as err:
        validate_spec(spec, facts, LimitsConfig())
    assert err.value.field == "spec.script" and "script line 2" in err.value.message and says in err.value.message


def prelude(script: str) -> str:
    """The line inject_environment added (a checkpoint URI in the job's environment)."""
    out = inject_environment(script, job_environment({}, record_id=3, checkpoint_uri="s3://b/run"))
    return next(line for line in out.splitlines() if line.endswith("# environment added by clusterd"))


def run_prelude(line: str, then: str, tmp_path: Path) -> str:
    """Run the line under bash with a fake ``clusterctl`` first on PATH that says step 41."""
    fake = tmp_path / "bin" / "clusterctl"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\n[ "$1 $2 $3" = "checkpoints latest s3://b/run" ] && echo 41\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "SLURM_RESTART_COUNT": "2"}
    return subprocess.run(
        ["bash", "-c", f"{line}\n{then}"], capture_output=True, text=True, env=env, check=True, timeout=30
    ).stdout


def test_resume_step_is_looked_up_only_for_scripts_that_mention_it(tmp_path: Path) -> None:
    """`clusterctl checkpoints latest` costs 0.5-3 s before every (re)start: not for scripts that ignore it."""
    show = 'echo "restart=$CLUSTERCTL_RESTART_COUNT resume=${CLUSTERCTL_RESUME_STEP-unset}"'
    command = prelude(command_script(["python3", "train.py"]))
    assert "checkpoints latest" not in command
    assert run_prelude(command, show, tmp_path) == "restart=2 resume=unset\n"
    plain = prelude("#!/bin/bash\n#SBATCH -N 2\nexec srun python3 train.py\n")
    assert "checkpoints latest" not in plain
    for body in ('python3 train.py --from "$CLUSTERCTL_RESUME_STEP"', "echo ${CLUSTERCTL_RESUME_STEP}"):
        line = prelude(f"#!/bin/bash\n#SBATCH -N 2\n{body}\n")
        assert "checkpoints latest" in line
        assert run_prelude(line, show, tmp_path) == "restart=2 resume=41\n"
    asked = prelude(command_script(["bash", "-c", "echo $CLUSTERCTL_RESUME_STEP"]))
    assert run_prelude(asked, show, tmp_path) == "restart=2 resume=41\n"


FUNCTION = "() {  echo \"hi $1\" 'q' \\\\\n}"  # as bash exports `f() { echo "hi $1" 'q' \\; }`


def test_an_exported_function_is_defined_again_under_bash(tmp_path: Path) -> None:
    script = "#!/bin/bash\n#SBATCH -t 5\nf world\nbash -c 'f child'\n"
    out = inject_environment(script, {"BASH_FUNC_f%%": FUNCTION, "A": "1"})
    assert len(out.splitlines()) == len(script.splitlines()) + 1  # still one added line
    path = tmp_path / "job.sh"
    path.write_text(out)
    ran = subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "hi world q \\\nhi child q \\\n", "")


def test_another_interpreter_gets_no_function_definition() -> None:
    out = inject_environment("#!/bin/sh\ntrue\n", {"BASH_FUNC_f%%": FUNCTION, "A": "1"})
    assert "export A=1" in out and "BASH_FUNC" not in out and " f " not in out


def _spare_run(tmp_path: Path, scontrol_notes: list[str], srun_codes: list[int]) -> tuple[int, list[str], str]:
    """The batch script of a --spare-nodes job, run with stand-in scontrol and srun: scontrol prints
    the job with each AdminComment of ``scontrol_notes`` in turn (the last one again after), srun
    exits with each code of ``srun_codes`` in turn. Returns the script's status, srun's argv and
    environment per call, and stderr."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "notes").write_text("\n".join(scontrol_notes) + "\n")
    (tmp_path / "codes").write_text("\n".join(map(str, srun_codes)) + "\n")
    (bin_dir / "scontrol").write_text(
        f"#!/bin/bash\nn=$(head -1 {tmp_path}/notes); [ $(wc -l < {tmp_path}/notes) -gt 1 ] && "
        f"sed -i 1d {tmp_path}/notes\n"
        'echo "JobId=7 JobName=t AdminComment=$n ReqNodeList=(null) NodeList=node[1,3] NumNodes=2 BatchHost=node1"\n'
    )
    (bin_dir / "srun").write_text(
        f'#!/bin/bash\necho "$* | $CLUSTERCTL_RELAUNCH $SLURM_JOB_NODELIST $SLURM_NNODES" >> {tmp_path}/calls\n'
        f"c=$(head -1 {tmp_path}/codes); sed -i 1d {tmp_path}/codes; exit ${{c:-0}}\n"
    )
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    script = inject_environment(command_script(["train"], relaunched=True), {"CLUSTERCTL_RANK_NODES": "2"})
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_ID": "7",
        "SLURM_RESTART_COUNT": "0",
        "SLURM_JOB_NODELIST": "node[1-3]",
        "SLURM_NNODES": "3",
        "CLUSTERCTL_RELAUNCH_WAIT": "1",
    }
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return done.returncode, calls, done.stderr


def test_a_spare_jobs_srun_is_relaunched_where_clusterd_says(tmp_path: Path) -> None:
    """The step fails (its node died); clusterd's note names relaunch 1 of run 0 on node1,node3."""
    code, calls, err = _spare_run(tmp_path, ["(null)", "(null)", "clusterctl-relaunch=0.1@node1,node3"], [137, 0])
    assert code == 0, err
    assert calls == [
        "--nodes=2 --kill-on-bad-exit=1 train | 0 node[1-3] 2",
        "--nodes=2 --nodelist=node1,node3 --kill-on-bad-exit=1 train | 1 node[1,3] 2",
    ]
    assert "relaunch 1 in place on node1,node3" in err


def test_a_failed_step_without_a_relaunch_returns_its_status(tmp_path: Path) -> None:
    """No relaunch decided (a plain failure, or one that gets the job requeued): srun's own status,
    after CLUSTERCTL_RELAUNCH_WAIT; a note of an earlier run (restart count 1) is not this run's."""
    code, calls, _ = _spare_run(tmp_path, ["(null)", "clusterctl-relaunch=1.3@node4,node5"], [3])
    assert code == 3 and calls == ["--nodes=2 --kill-on-bad-exit=1 train | 0 node[1-3] 2"]


def test_a_step_that_asks_to_be_requeued_returns_at_once(tmp_path: Path) -> None:
    """Exit 85 (checkpointed, requeue me): no wait for a relaunch (the time limit may be near)."""
    code, calls, _ = _spare_run(tmp_path, ["(null)"], [85])
    assert code == 85 and len(calls) == 1
