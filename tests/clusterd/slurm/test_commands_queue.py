"""How the commands backend looks at the queue: whole on 22.05 (its squeue --json ignores filters),
filtered from 24.11 on (jobs not PENDING, plus the followed ids)."""

from __future__ import annotations

from clusterd.config import SlurmConfig
from clusterd.slurm import argv
from clusterd.slurm.commands import CommandsBackend
from tests.support.paths import SLURM_FIXTURES
from tests.support.runner import ScriptedRunner

_QUEUE_22 = (SLURM_FIXTURES / "squeue_running_pending_finished.json").read_text()
_QUEUE_26 = (SLURM_FIXTURES / "squeue_26.05_real.json").read_text()


def _backend(version: str, answers: dict[tuple[str, ...], str]) -> tuple[CommandsBackend, ScriptedRunner]:
    runner = ScriptedRunner({("sbatch", "--version"): version, **answers})
    return CommandsBackend(SlurmConfig(), runner=runner), runner  # type: ignore[arg-type]


async def test_22_05_reads_the_whole_queue() -> None:
    backend, runner = _backend("slurm-wlm 22.05.8", {tuple(argv.SQUEUE_ARGV): _QUEUE_22})
    poll = await backend.poll_jobs(frozenset({"23"}))
    assert poll.whole and {j.job_id for j in poll.jobs} >= {"23", "28"}
    assert runner.calls[1:] == [argv.SQUEUE_ARGV]


async def test_newer_releases_read_what_is_not_pending_and_the_focus() -> None:
    focus = frozenset({"30", "31"})
    jobs_argv = argv.squeue_jobs_argv(focus)
    backend, runner = _backend(
        "slurm 24.11.5", {tuple(argv.SQUEUE_NOT_PENDING_ARGV): _QUEUE_26, tuple(jobs_argv): _QUEUE_22}
    )
    poll = await backend.poll_jobs(focus)
    assert not poll.whole
    assert runner.calls[1:] == [argv.SQUEUE_NOT_PENDING_ARGV, jobs_argv]
    assert "--states=all" in jobs_argv and "--jobs=30,31" in jobs_argv
    assert "PENDING" not in " ".join(argv.SQUEUE_NOT_PENDING_ARGV)
    runner.calls.clear()
    await backend.poll_jobs(frozenset())  # nothing followed: one squeue, and the release is not asked again
    assert runner.calls == [argv.SQUEUE_NOT_PENDING_ARGV]


def test_one_id_is_asked_twice_and_only_ids_are_passed() -> None:
    """One id alone makes squeue fail once the job left slurmctld ("Invalid job id specified", seen
    on 24.11); a list drops unknown ids. Whatever a record holds, only digits reach squeue's argv."""
    assert argv.squeue_jobs_argv(frozenset({"7"}))[-2] == "--jobs=7,7"
    assert argv.squeue_jobs_argv(frozenset({"7", "--uid=0", "8_1", ""}))[-2] == "--jobs=7,7"


async def test_the_queue_states_are_one_squeue_of_ids_and_states() -> None:
    """``--only-job-state`` takes no ``--all`` (squeue 26.05: "only works alone, with -j and/or -t")."""
    lines = "52301 PENDING\n52302 RUNNING\n"
    backend, runner = _backend("slurm 26.05.5", {tuple(argv.SQUEUE_STATES_ARGV): lines})
    assert await backend.queue_states() == lines
    assert runner.calls == [argv.SQUEUE_STATES_ARGV] and "--all" not in argv.SQUEUE_STATES_ARGV
