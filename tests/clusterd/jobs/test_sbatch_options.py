"""sbatch's option table through validation: the options GPU sites use become request fields with
sbatch's meaning, from #SBATCH lines and from spec.sbatch_options, with sbatch's precedence."""

from __future__ import annotations

import dataclasses

import pytest

from clusterctl.sbatch.options import ACCEPTED, ANSWER_ONLY, REFUSED, SBATCH_LONG, refusal
from clusterd.config import LimitsConfig
from clusterd.errors import InvalidArgument
from clusterd.jobs.validate import validate_spec
from clusterd.model.spec import JobSpec
from clusterd.slurm.argv import sbatch_argv
from clusterd.slurm.request import JobRequest, Sharing
from clusterd.slurm.restd_submit import Unexpressible, job_description
from clusterd.slurm.types import ClusterFacts

FACTS = ClusterFacts(frozenset({"debug", "batch"}), frozenset(f"node{i}" for i in range(1, 7)), "debug")
LIMITS = LimitsConfig()


def req(lines: str, *options: str, **fields: object) -> JobRequest:
    spec = JobSpec(script=f"#!/bin/bash\n{lines}\necho\n", sbatch_options=list(options), **fields)  # type: ignore[arg-type]
    return validate_spec(spec, FACTS, LIMITS)


def test_every_option_is_accepted_or_refused_with_a_reason() -> None:
    assert set(SBATCH_LONG) >= ACCEPTED
    assert not ACCEPTED & set(REFUSED) and not ANSWER_ONLY & (ACCEPTED | set(REFUSED))
    assert set(SBATCH_LONG) == ACCEPTED | ANSWER_ONLY | set(REFUSED)
    for option in set(SBATCH_LONG) - ACCEPTED - ANSWER_ONLY:
        reason = refusal(option)
        assert reason and "not supported" not in reason, option


def test_gpu_site_options_become_fields() -> None:
    r = req(
        "#SBATCH --gpus-per-task=a100:1 --cpus-per-gpu=4 --mem-per-gpu=10G --ntasks-per-gpu=1\n"
        "#SBATCH --gpu-bind=closest --gres-flags=enforce-binding --hint=nomultithread -m cyclic:block\n"
        "#SBATCH -B 1:2:1 --mincpus=2 --contiguous --spread-job --kill-on-invalid-dep=yes\n"
        "#SBATCH --deadline=now+2hours --time-min=30 --wckey=proj --ntasks-per-core=1 --open-mode=truncate"
    )
    assert (r.gpus_per_task, r.gpu_type, r.cpus_per_gpu, r.memory_mb_per_gpu, r.tasks_per_gpu) == (
        1,
        "a100",
        4,
        10240,
        1,
    )
    assert (r.gpu_bind, r.gres_flags, r.hint, r.distribution) == (
        "closest",
        "enforce-binding",
        "nomultithread",
        "cyclic:block",
    )
    assert (r.sockets_per_node, r.cores_per_socket, r.threads_per_core, r.min_cpus_per_node) == (1, 2, 1, 2)
    assert r.contiguous and r.spread_job and r.kill_on_invalid_dep is True
    assert (r.deadline, r.time_min_seconds, r.wckey, r.tasks_per_core) == ("now+2hours", 1800, "proj", 1)
    assert r.open_append is False


@pytest.mark.parametrize(
    ("lines", "options", "sharing"),
    [
        ("#SBATCH --exclusive", (), Sharing.EXCLUSIVE),
        ("#SBATCH --exclusive=user", (), Sharing.USER),
        ("#SBATCH --exclusive=mcs", (), Sharing.MCS),
        ("#SBATCH -s", (), Sharing.OVERSUBSCRIBE),
        ("#SBATCH --exclusive\n#SBATCH --oversubscribe", (), Sharing.OVERSUBSCRIBE),  # the last one wins
        ("#SBATCH --oversubscribe", ("--exclusive=user",), Sharing.USER),  # the command line wins
        ("", (), None),
    ],
)
def test_sharing(lines: str, options: tuple[str, ...], sharing: Sharing | None) -> None:
    assert req(lines, *options).sharing is sharing


def test_no_requeue_is_the_users_choice() -> None:
    assert req("#SBATCH --no-requeue").requeue is False
    assert req("#SBATCH --no-requeue", "--requeue").requeue is True
    assert req("").requeue is True


def test_node_and_accounting_options_become_fields() -> None:
    r = req(
        "#SBATCH --tmp=1G --ntasks-per-socket=1 --gpus-per-socket=a100:1 --delay-boot=10 -O --no-kill\n"
        "#SBATCH --use-min-nodes --wait-all-nodes=1 --mem-bind=local --acctg-freq=task=30 -L fluent:2\n"
        "#SBATCH --batch=a100"
    )
    assert (r.tmp_mb, r.tasks_per_socket, r.gpus_per_socket, r.gpu_type, r.delay_boot_seconds) == (
        1024,
        1,
        1,
        "a100",
        600,
    )
    assert r.overcommit and r.no_kill and r.use_min_nodes and r.wait_all_nodes is True
    assert (r.mem_bind, r.acctg_freq, r.licenses, r.batch_features) == ("local", "task=30", "fluent:2", "a100")
    assert req("#SBATCH --no-kill=off").no_kill is False
    assert req("#SBATCH -i data/in.txt").stdin == "data/in.txt"  # slurmd opens it, as the user
    with pytest.raises(InvalidArgument, match="must not contain"):
        req("#SBATCH --input=../secret")


def test_precedence_fields_then_options_then_script() -> None:
    """sbatch: command line, then SBATCH_* (both reach the service as spec fields/sbatch_options), then #SBATCH."""
    r = req("#SBATCH -p batch -t 5 -J script", "--partition=debug", "--time=7", "--job-name=env", name="flag")
    assert (r.partition, r.time_limit_seconds, r.name) == ("debug", 420, "flag")


@pytest.mark.parametrize(
    ("lines", "options", "field", "says"),
    [
        ("#SBATCH --mem=1.5G", (), "spec.script", "script line 2: #SBATCH --mem=1.5G: bad memory size"),
        ("", ("--mem=1.5G",), "spec.sbatch_options", "spec.sbatch_options[0] '--mem=1.5G': bad memory size"),
        ("#SBATCH --exclusive=other", (), "spec.script", "--exclusive takes no value, user or mcs"),
        ("#SBATCH --hint=fast", (), "spec.script", "bad --hint 'fast'"),
        ("#SBATCH --gpu-bind=nearest", (), "spec.script", "bad --gpu-bind"),
        ("#SBATCH -B x", (), "spec.script", "bad -B"),
        ("#SBATCH --gpus-per-node=a100:2 --gpus-per-task=h100:1", (), "spec.script", "differs from 'a100'"),
        ("", ("--uid=0",), "spec.sbatch_options", "--uid is not allowed (jobs run as their submitter"),
        ("", ("--comment=" + "x" * 1001,), "spec.sbatch_options", "one line of at most 1000 printable characters"),
        ("", ("nodes=2",), "spec.sbatch_options", "is not an option"),
        ("", ("--time",), "spec.sbatch_options", "--time needs a value"),
        ("#SBATCH --no-kill=on", (), "spec.script", "bad --no-kill 'on'"),
        ("#SBATCH --mem-bind=far", (), "spec.script", "bad --mem-bind"),
        ("#SBATCH -L 'a b'", (), "spec.script", "bad --licenses"),
    ],
)
def test_bad_values_name_the_line_or_option(lines: str, options: tuple[str, ...], field: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        req(lines, *options)
    assert err.value.field == field and says in err.value.message, err.value.message


def test_options_that_change_only_sbatchs_answer_are_taken() -> None:
    """sbatch takes ``#SBATCH --parsable`` or ``-v`` in a script; they change nothing in the job."""
    taken, plain = req("#SBATCH --parsable -v --quiet\n#SBATCH -t 5"), req("#SBATCH -t 5\n#")
    assert dataclasses.replace(taken, script="") == dataclasses.replace(plain, script="")


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [
        ("BASH_FUNC_module%%", "() {  eval $(modulecmd bash $*)\n}", True),
        ("BASH_FUNC_f%%", "echo not a definition", False),
        ("BASH_FUNC_a-b%%", "() { :; }", False),
        ("BASH_FUNC_f", "() { :; }", True),  # a plain variable that happens to have the prefix
    ],
)
def test_exported_functions_travel_and_nothing_else_of_their_shape(name: str, value: str, ok: bool) -> None:
    spec = JobSpec(script="#!/bin/bash\ntrue\n", environment={name: value})
    if ok:
        assert validate_spec(spec, FACTS, LIMITS).export.variables[name] == value
    else:
        with pytest.raises(InvalidArgument, match="variable names must match"):
            validate_spec(spec, FACTS, LIMITS)


def test_mem_0_asks_for_all_of_each_nodes_memory() -> None:
    """sbatch's --mem=0; no backend but sbatch was seen to read 0 so, so the others hand it to sbatch."""
    r = req("#SBATCH --mem=0")
    assert r.memory_mb_per_node == 0 and "--mem=0M" in sbatch_argv(r)
    with pytest.raises(Unexpressible, match="--mem=0"):
        job_description(r, {})
    assert req("#SBATCH --mem=0", "--mem=2G").memory_mb_per_node == 2048
    with pytest.raises(InvalidArgument, match="must be positive"):
        req("#SBATCH --mem-per-cpu=0")


def test_a_reservation_end_signal_goes_by_sbatch() -> None:
    r = req("#SBATCH --signal=R:USR2@120")
    assert r.signal is not None and r.signal.render() == "R:USR2@120"
    assert "--signal=R:USR2@120" in sbatch_argv(r)
    with pytest.raises(Unexpressible, match="R:"):
        job_description(r, {})
