"""Table-driven validation: every bad field is rejected with its name, before anything runs.

The specs here are the wire's (tests/clusterd/api sends the same table): each goes through the API's
conversion first, as a submission does.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration

from clusterctl.v1 import cluster_pb2, jobs_pb2
from clusterd.api.spec_convert import placement_from_proto, spec_from_proto
from clusterd.config import LimitsConfig
from clusterd.errors import InvalidArgument
from clusterd.jobs import validate
from clusterd.jobs.validate import placement_preference
from clusterd.slurm.request import JobRequest, parse_time_limit
from clusterd.slurm.types import ClusterFacts
from clusterd.topology.demand import Preference

FACTS = ClusterFacts(
    partitions=frozenset({"debug", "batch"}),
    nodes=frozenset(f"node{i}" for i in range(1, 7)),
    default_partition="debug",
)
LIMITS = LimitsConfig(max_script_bytes=4096)
SCRIPT = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:2\n#SBATCH -t 10:00\necho hi\n"


def validate_spec(wire: jobs_pb2.JobSpec, facts: ClusterFacts, limits: LimitsConfig) -> JobRequest:
    return validate.validate_spec(spec_from_proto(wire), facts, limits)


def spec(**fields: Any) -> jobs_pb2.JobSpec:
    base: dict[str, Any] = {"command": ["python", "train.py"]}
    base.update(fields)
    if "script" in fields:
        base.pop("command")
    return jobs_pb2.JobSpec(**base)


BAD: list[tuple[str, jobs_pb2.JobSpec, str]] = [
    ("no script or command", jobs_pb2.JobSpec(), "spec.script"),
    ("both script and command", jobs_pb2.JobSpec(script=SCRIPT, command=["x"]), "spec.command"),
    ("empty program", spec(command=[""]), "spec.command[0]"),
    ("NUL in command", spec(command=["echo", "a\x00b"]), "spec.command[1]"),
    ("script without shebang", spec(script="echo hi\n"), "spec.script"),
    ("oversized script", spec(script="#!/bin/bash\n" + "x" * 5000), "spec.script"),
    ("NUL in script", spec(script="#!/bin/bash\necho \x00\n"), "spec.script"),
    ("#SBATCH --uid in script", spec(script="#!/bin/bash\n#SBATCH --uid=0\necho\n"), "spec.script"),
    ("#SBATCH --export-file in script", spec(script="#!/bin/bash\n#SBATCH --export-file=/etc/shadow\n"), "spec.script"),
    ("#SBATCH --export reserved name", spec(script="#!/bin/bash\n#SBATCH --export=SLURM_CONF=/x\n"), "spec.script"),
    ("#SLURM --uid line", spec(script="#!/bin/bash\n#SLURM --uid=0\n"), "spec.script"),
    ("#PBS line", spec(script="#!/bin/bash\n#PBS -W umask=022\n"), "spec.script"),
    ("#SBATCH ambiguous --par", spec(script="#!/bin/bash\n#SBATCH --par=debug\n"), "spec.script"),
    ("#SBATCH -W", spec(script="#!/bin/bash\n#SBATCH -W\n"), "spec.script"),
    ("#SBATCH array too big", spec(script="#!/bin/bash\n#SBATCH --array=0-99999\n"), "spec.script"),
    ("array syntax", spec(array="1-x"), "spec.array"),
    ("export bad name", spec(export="A-B=1"), "spec.export"),
    ("dependency injection", spec(dependency="afterok:1;id"), "spec.dependency"),
    ("max_nodes below nodes", spec(nodes=3, max_nodes=2), "spec.max_nodes"),
    ("#SBATCH abbreviated --get-user-env", spec(script="#!/bin/bash\n#SBATCH --get-user\n"), "spec.script"),
    ("#SBATCH abbreviated --wrap", spec(script="#!/bin/bash\n#SBATCH --wra=id\n"), "spec.script"),
    ("#SBATCH bad quoting", spec(script="#!/bin/bash\n#SBATCH --job-name='x\n"), "spec.script"),
    ("#SBATCH nodes zero", spec(script="#!/bin/bash\n#SBATCH -N 0\n"), "spec.script"),
    ("#SBATCH bad time", spec(script="#!/bin/bash\n#SBATCH --time=soon\n"), "spec.script"),
    ("#SBATCH unknown partition", spec(script="#!/bin/bash\n#SBATCH -p gpu\n"), "spec.script"),
    ("#SBATCH bad gres count", spec(script="#!/bin/bash\n#SBATCH --gres=gpu:a100:many\n"), "spec.script"),
    ("name with newline", spec(name="a\nb"), "spec.name"),
    ("name with escape", spec(name="a\x1b[31m"), "spec.name"),
    ("name too long", spec(name="n" * 201), "spec.name"),
    ("too many nodes", spec(nodes=100_000), "spec.nodes"),
    ("too many tasks", spec(tasks_per_node=5000), "spec.tasks_per_node"),
    ("too many gpus", spec(gpus_per_node=1000), "spec.gpus_per_node"),
    ("too many cpus", spec(cpus_per_task=100_000), "spec.cpus_per_task"),
    ("absurd memory", spec(memory_mb_per_node=1 << 40), "spec.memory_mb_per_node"),
    ("time words", spec(time_limit="ten minutes"), "spec.time_limit"),
    ("time negative", spec(time_limit="-5"), "spec.time_limit"),
    ("time zero", spec(time_limit="0"), "spec.time_limit"),
    ("time too many colons", spec(time_limit="1:2:3:4"), "spec.time_limit"),
    ("time injection", spec(time_limit="10; rm -rf /"), "spec.time_limit"),
    ("unknown partition", spec(partition="gpu"), "spec.partition"),
    ("partition metachar", spec(partition="debug;id"), "spec.partition"),
    ("account metachar", spec(account="acct$(id)"), "spec.account"),
    ("qos with space", spec(qos="high prio"), "spec.qos"),
    ("env bad name", spec(environment={"1X": "v"}), "spec.environment"),
    ("env name with =", spec(environment={"A=B": "v"}), "spec.environment"),
    ("env name with space", spec(environment={"A B": "v"}), "spec.environment"),
    ("env reserved SLURM_", spec(environment={"SLURM_CONF": "/tmp/x"}), "spec.environment"),
    ("env reserved SBATCH_", spec(environment={"SBATCH_UID": "0"}), "spec.environment"),
    ("env reserved CLUSTERCTL_", spec(environment={"CLUSTERCTL_RESTART_COUNT": "9"}), "spec.environment"),
    ("env NUL value", spec(environment={"A": "x\x00y"}), "spec.environment"),
    ("env huge value", spec(environment={"A": "x" * 40000}), "spec.environment"),
    ("relative submit dir", spec(submit_directory="tmp/x"), "spec.submit_directory"),
    ("workdir traversal", spec(working_directory="/home/a/../../etc"), "spec.working_directory"),
    ("workdir newline", spec(working_directory="/tmp/a\nb"), "spec.working_directory"),
    ("stdout traversal", spec(stdout_path="../../etc/passwd"), "spec.stdout_path"),
    ("stderr control", spec(stderr_path="/tmp/\x07"), "spec.stderr_path"),
    ("checkpoint bad scheme", spec(checkpoint_uri="http://x/y"), "spec.checkpoint_uri"),
    ("checkpoint relative", spec(checkpoint_uri="ckpt/run1"), "spec.checkpoint_uri"),
    ("checkpoint traversal", spec(checkpoint_uri="s3://bucket/a/../b"), "spec.checkpoint_uri"),
    ("checkpoint bad bucket", spec(checkpoint_uri="s3://Bad_Bucket/x"), "spec.checkpoint_uri"),
    ("checkpoint file relative", spec(checkpoint_uri="file://relative/x"), "spec.checkpoint_uri"),
    ("checkpoint tier unknown", spec(checkpoint_tier="disk"), "spec.checkpoint_tier"),
    ("checkpoint tier case", spec(checkpoint_tier="Memory"), "spec.checkpoint_tier"),
    ("request id spaces", spec(request_id="a b"), "spec.request_id"),
    ("request id too long", spec(request_id="r" * 129), "spec.request_id"),
    (
        "restart exit code 0",
        spec(restart_policy=jobs_pb2.RestartPolicy(retryable_exit_codes=[0])),
        "spec.restart_policy.retryable_exit_codes",
    ),
    (
        "restart exit code 300",
        spec(restart_policy=jobs_pb2.RestartPolicy(fatal_exit_codes=[300])),
        "spec.restart_policy.fatal_exit_codes",
    ),
    (
        "retryable and fatal",
        spec(restart_policy=jobs_pb2.RestartPolicy(retryable_exit_codes=[3], fatal_exit_codes=[3])),
        "spec.restart_policy.fatal_exit_codes",
    ),
    (
        "huge max restarts",
        spec(restart_policy=jobs_pb2.RestartPolicy(max_restarts=100_000)),
        "spec.restart_policy.max_restarts",
    ),
    (
        "negative backoff",
        spec(restart_policy=jobs_pb2.RestartPolicy(backoff=Duration(seconds=-1))),
        "spec.restart_policy.backoff",
    ),
    (
        "exact without count",
        spec(placement=cluster_pb2.PlacementPreference(policy=cluster_pb2.PLACEMENT_POLICY_EXACT)),
        "spec.placement.switch_count",
    ),
    (
        "more switches than nodes",
        spec(
            nodes=2,
            placement=cluster_pb2.PlacementPreference(policy=cluster_pb2.PLACEMENT_POLICY_EXACT, switch_count=3),
        ),
        "spec.placement.switch_count",
    ),
    (
        "unknown excluded node",
        spec(placement=cluster_pb2.PlacementPreference(exclude_nodes=["node99"])),
        "spec.placement.exclude_nodes[0]",
    ),
    (
        "excluded node metachar",
        spec(placement=cluster_pb2.PlacementPreference(exclude_nodes=["node1,node2"])),
        "spec.placement.exclude_nodes[0]",
    ),
    (
        "nodelist count mismatch",
        spec(nodes=1, placement=cluster_pb2.PlacementPreference(nodelist=["node1", "node2"])),
        "spec.placement.nodelist",
    ),
    (
        "nodelist and exclude overlap",
        spec(nodes=1, placement=cluster_pb2.PlacementPreference(nodelist=["node1"], exclude_nodes=["node1"])),
        "spec.placement.nodelist",
    ),
    (
        "max wait too long",
        spec(placement=cluster_pb2.PlacementPreference(max_wait_seconds=10**8)),
        "spec.placement.max_wait_seconds",
    ),
    (
        "constraint metachar",
        spec(placement=cluster_pb2.PlacementPreference(constraints=["a|b"])),
        "spec.placement.constraints[0]",
    ),
    (
        "unknown policy value",
        spec(placement=cluster_pb2.PlacementPreference(policy=42)),  # type: ignore[arg-type]
        "spec.placement.policy",
    ),
]


@pytest.mark.parametrize(("case", "bad", "field"), BAD, ids=[c[0] for c in BAD])
def test_bad_field_is_named(case: str, bad: jobs_pb2.JobSpec, field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec(bad, FACTS, LIMITS)
    assert info.value.field.startswith(field), str(info.value)
    assert str(info.value).startswith(field)


def test_script_directives_resolve() -> None:
    job = validate_spec(spec(script=SCRIPT), FACTS, LIMITS)
    assert (job.nodes, job.gpus_per_node, job.time_limit_seconds, job.partition) == (2, 2, 600, "debug")


def test_spec_fields_override_directives() -> None:
    job = validate_spec(spec(script=SCRIPT, nodes=3, gpus_per_node=4, partition="batch"), FACTS, LIMITS)
    assert (job.nodes, job.gpus_per_node, job.partition) == (3, 4, "batch")


def test_command_gets_generated_script_and_name() -> None:
    job = validate_spec(spec(command=["/usr/bin/python3", "-c", "print('a b')"]), FACTS, LIMITS)
    assert job.name == "python3"
    assert "srun" in job.script and "'print('\"'\"'a b'\"'\"')'" in job.script


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("30:15", 1815),
        ("1:00:00", 3600),
        ("2-0", 172800),
        ("1-2:03", 93780),
        ("1-2:03:04", 93784),
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_time_limits(text: str, seconds: int | None) -> None:
    assert parse_time_limit(text) == seconds


def test_shell_metacharacters_in_free_text_are_data_not_code() -> None:
    """Names, env values and args may hold any printable text: they never pass through a shell."""
    hostile = "$(touch /tmp/pwned); `id` | rm -rf / && echo 'x\" ;"
    job = validate_spec(spec(name=hostile, command=["echo", hostile], environment={"X": hostile}), FACTS, LIMITS)
    assert job.name == hostile


@pytest.mark.parametrize(
    ("field", "seconds"),
    [("heartbeat_interval", 0.01), ("heartbeat_interval", 600), ("hang_timeout", 0.5), ("hang_timeout", 10**6)],
)
def test_liveness_settings_out_of_range_are_refused(field: str, seconds: float) -> None:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    with pytest.raises(InvalidArgument) as err:
        validate_spec(spec(command=["true"], restart_policy=jobs_pb2.RestartPolicy(**{field: d})), FACTS, LIMITS)
    assert err.value.field == f"spec.restart_policy.{field}"


def test_dos_line_breaks_are_refused_naming_the_line() -> None:
    """sbatch refuses them on the client side; slurmrestd would not, so validation does for every backend."""
    with pytest.raises(InvalidArgument) as info:
        validate_spec(jobs_pb2.JobSpec(script="#!/bin/bash\n#SBATCH -t 1\r\ntrue\r\n"), FACTS, LIMITS)
    assert info.value.field == "spec.script" and "script line 2: DOS line breaks" in str(info.value)


@pytest.mark.parametrize(
    ("policy", "name"),
    [
        (cluster_pb2.PLACEMENT_POLICY_UNSPECIFIED, "pack"),
        (cluster_pb2.PLACEMENT_POLICY_PACK, "pack"),
        (cluster_pb2.PLACEMENT_POLICY_ANY, "any"),
        (cluster_pb2.PLACEMENT_POLICY_EXACT, "exact"),
        (99, "pack"),  # a dry run's unknown policy (a submit's is refused first)
    ],
)
def test_the_placement_preference_in_the_services_terms(policy: int, name: str) -> None:
    wire = cluster_pb2.PlacementPreference(policy=policy, switch_count=2, exclude_nodes=["node3"], nodelist=["node1"])  # type: ignore[arg-type]
    pref = placement_preference(placement_from_proto(wire, strict=False))
    assert pref == Preference(policy=name, switch_count=2, exclude_nodes=("node3",), nodelist=("node1",))  # type: ignore[arg-type]
    assert placement_preference(placement_from_proto(cluster_pb2.PlacementPreference())) == Preference()


def test_pbs_lines_win_over_sbatch_lines_and_lose_to_the_spec() -> None:
    script = "#!/bin/bash\n#SBATCH -t 5 -p debug\n#PBS -l walltime=20:00,nodes=2:ppn=3 -q batch -N pbs\necho\n"
    job = validate_spec(spec(script=script, sbatch_options=["--partition=debug"]), FACTS, LIMITS)
    assert (job.time_limit_seconds, job.nodes, job.ntasks, job.partition, job.name) == (1200, 2, 6, "debug", "pbs")
    assert "#clusterd:PBS" in job.script
    ignored = validate_spec(spec(script=script, sbatch_options=["--ignore-pbs"]), FACTS, LIMITS)
    assert (ignored.time_limit_seconds, ignored.nodes, ignored.name) == (300, None, "job")


def test_a_translated_value_is_refused_naming_the_line_and_the_translation() -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec(spec(script="#!/bin/bash\n#PBS -l nice=-5\n"), FACTS, LIMITS)
    assert str(info.value).startswith("spec.script: script line 2: #PBS -l nice=-5 (sbatch: --nice=-5): ")


def test_pbs_working_directory_is_read_as_the_clusters_release_reads_it() -> None:
    script = "#!/bin/bash\n#PBS -d /tmp/w\n"
    newer = ClusterFacts(FACTS.partitions, FACTS.nodes, "debug", slurm_release=(24, 11))
    assert validate_spec(spec(script=script), newer, LIMITS).working_directory == "/tmp/w"
    older = ClusterFacts(FACTS.partitions, FACTS.nodes, "debug", slurm_release=(22, 5))
    with pytest.raises(InvalidArgument, match="script line 2: #PBS -d /tmp/w: -d is translated by sbatch"):
        validate_spec(spec(script=script), older, LIMITS)


def test_a_nodelist_sets_the_node_count_as_slurm_does() -> None:
    """-w node1,node2 without -N is a 2-node job; -N 2 -w node1 has Slurm add a node."""
    for nodes, listed in ((0, ["node1", "node2"]), (2, ["node1"]), (0, ["node1"])):
        pref = cluster_pb2.PlacementPreference(nodelist=listed)
        validate_spec(spec(nodes=nodes, placement=pref), FACTS, LIMITS)
    with pytest.raises(InvalidArgument, match="3 nodes listed for a 2-node job"):
        pref = cluster_pb2.PlacementPreference(nodelist=["node1", "node2", "node3"])
        validate_spec(spec(nodes=1, max_nodes=2, placement=pref), FACTS, LIMITS)


def test_spare_nodes_are_held_beside_the_ranks_nodes_with_no_kill() -> None:
    job = validate_spec(spec(script=SCRIPT, spare_nodes=1), FACTS, LIMITS)  # -N 2 from the script
    assert job.nodes == 3 and job.max_nodes is None and job.no_kill
    assert not validate_spec(spec(nodes=2), FACTS, LIMITS).no_kill


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"spare_nodes": 1}, "needs a node count"),
        ({"nodes": 2, "max_nodes": 4, "spare_nodes": 1}, "node range"),
        ({"nodes": 2, "array": "0-3", "spare_nodes": 1}, "array"),
        ({"script": "#!/bin/sh\n#SBATCH -N 2\nsrun train\n", "spare_nodes": 1}, "bash"),
        ({"nodes": 2, "spare_nodes": 10**6}, "spec.spare_nodes"),
    ],
)
def test_spare_nodes_that_cannot_work_are_refused(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        validate_spec(spec(**fields), FACTS, LIMITS)
    assert err.value.field == "spec.spare_nodes" and says in str(err.value)
