"""logs, history, hold/release, list --all, adopt and the dashboard's API on the real stack.

Real sbatch, real output files written by slurmstepd as the job's user, read back through a
clusterd of this module's own (web dashboard on its metrics port), bad inputs included.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterctl.errors import ServiceError
from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack
from tests.support.wait import wait_for

pytestmark = pytest.mark.slurm

REQUEUED_SCRIPT = """#!/bin/bash
echo "run ${SLURM_RESTART_COUNT:-0} start"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 120; fi
echo "run ${SLURM_RESTART_COUNT:-0} end"
"""


@pytest.fixture(scope="module")
def views_daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(stack, tmp_path_factory.mktemp("clusterd-views"), extra_env={"CLUSTERD_WEB__ENABLED": "true"})
    d.start()
    yield d
    d.stop()


def _done(client, job_id: str) -> jobs_pb2.JobStatus:  # type: ignore[no-untyped-def]
    return wait_for(lambda: (j := client.get(job_id)).terminal and j, timeout=120, what=f"job {job_id} to end")


def _cli(daemon: Daemon, user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusterctl.cli", *argv],
        capture_output=True,
        text=True,
        env=daemon.cli_env(user),
        timeout=120,
    )


def _http(daemon: Daemon, path: str, user: str | None) -> tuple[int, dict]:  # type: ignore[type-arg]
    headers = {"Authorization": f"Bearer {daemon.stack.tokens[user]}"} if user else {}
    request = urllib.request.Request(f"http://127.0.0.1:{daemon.metrics_port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _text(chunks: list[jobs_pb2.JobLogChunk]) -> str:
    return b"".join(c.data for c in chunks).decode()


def test_logs_tail_and_the_owner_rule(views_daemon: Daemon, alice_dir: Path) -> None:
    alice = views_daemon.client("alice")
    command = ["bash", "-c", "for i in 1 2 3 4 5; do echo line $i; done; echo oops >&2"]
    spec = jobs_pb2.JobSpec(
        name="logs",
        command=command,
        submit_directory=str(alice_dir),
        stdout_path="out-%j.txt",
        stderr_path="err-%j.txt",
    )
    job = alice.submit(spec).job
    _done(alice, job.job_id)
    chunks = list(alice.read_log(job.job_id))
    assert _text(chunks) == "".join(f"line {i}\n" for i in range(1, 6))
    assert chunks[0].path == f"{alice_dir}/out-{job.job_id}.txt"
    assert _text(list(alice.read_log(job.job_id, tail_lines=2))) == "line 4\nline 5\n"
    assert _text(list(alice.read_log(job.job_id, stderr=True))) == "oops\n"
    # Another user's job: refused before any file is touched.
    with pytest.raises(ServiceError) as err:
        list(views_daemon.client("bob").read_log(job.job_id))
    assert err.value.code_name == "PERMISSION_DENIED"
    # The CLI: bytes to stdout, one-line errors, exit 2 for bad input, never a traceback.
    out = _cli(views_daemon, "alice", "logs", job.job_id, "--tail", "1")
    assert (out.returncode, out.stdout) == (0, "line 5\n")
    out = _cli(views_daemon, "bob", "logs", job.job_id)
    assert out.returncode == 1 and "another user" in out.stderr and "Traceback" not in out.stderr
    for bad in (["logs", "x1"], ["logs", job.job_id, "--tail", "-3"], ["logs", job.job_id, "--tail", "999999999"]):
        out = _cli(views_daemon, "alice", *bad)
        assert out.returncode == 2 and out.stderr.startswith("clusterctl: error:") and "Traceback" not in out.stderr


def test_logs_refuse_a_symlinked_output_that_the_user_does_not_own(
    views_daemon: Daemon, alice_dir: Path, tmp_path: Path
) -> None:
    alice = views_daemon.client("alice")
    job = alice.submit(
        jobs_pb2.JobSpec(name="link", command=["echo", "mine"], submit_directory=str(alice_dir), stdout_path="out.txt")
    ).job
    _done(alice, job.job_id)
    secret = tmp_path / "root-only.txt"  # pytest's tmp dirs are root's alone (0700)
    secret.write_text("root's secret\n")
    out = alice_dir / "out.txt"
    uid = pwd.getpwnam("alice").pw_uid
    for target, says in ((secret, "permission denied for alice"), (Path("/etc/hostname"), "not to alice")):
        out.unlink()
        out.symlink_to(target)
        os.lchown(out, uid, -1)  # alice's own link, as if she had made it
        with pytest.raises(ServiceError) as err:
            list(alice.read_log(job.job_id))
        assert err.value.code_name == "PERMISSION_DENIED", err.value
        assert says in err.value.message and "secret" not in err.value.message
        assert f"stdout_path {out}" in err.value.message


def test_logs_follow_keeps_going_across_a_requeue(views_daemon: Daemon, alice_dir: Path) -> None:
    alice = views_daemon.client("alice")
    job = alice.submit(
        jobs_pb2.JobSpec(
            name="follow",
            script=REQUEUED_SCRIPT,
            submit_directory=str(alice_dir),
            stdout_path="follow-%j.out",
            time_limit="5",
        )
    ).job
    chunks: list[jobs_pb2.JobLogChunk] = []
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            for chunk in views_daemon.client("alice").read_log(job.job_id, follow=True):
                chunks.append(chunk)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    wait_for(lambda: "run 0 start" in _text(chunks), timeout=90, what="the first run's output")
    alice.requeue(job.job_id)
    reader.join(timeout=150)
    assert not reader.is_alive(), f"follow did not end with the job: {_text(chunks)!r}"
    assert not errors, errors
    text = _text(chunks)
    assert text.index("run 0 start") < text.index("run 1 start") < text.index("run 1 end"), text
    assert "run 0 end" not in text  # the first run was requeued in its sleep
    assert any("requeued" in c.notice for c in chunks), [c.notice for c in chunks]
    done = alice.get(job.job_id)
    assert done.state == jobs_pb2.JOB_STATE_COMPLETED and done.restart_count == 1
    # ... and history has it: exit code, elapsed, restarts, nodes; Slurm's short state names work.
    out = _cli(views_daemon, "alice", "history", "--state", "CD", "--name", "foll*", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    (entry,) = [j for j in data["jobs"] if j["job_id"] == job.job_id]
    assert entry["state"] == "JOB_STATE_COMPLETED" and entry["restart_count"] == 1 and entry["has_exit_code"]
    assert entry["exit_code"] == 0 and entry["nodes"] and entry["elapsed"] and entry["source"] == "clusterd"
    assert not data["accounting"] and "not configured" in data["accounting_note"]  # the stack has no slurmdbd
    assert _cli(views_daemon, "alice", "history", "--since", "next tuesday").returncode == 2


def test_hold_release_and_the_whole_queue(views_daemon: Daemon) -> None:
    alice, bob = views_daemon.client("alice"), views_daemon.client("bob")
    later = alice.submit(jobs_pb2.JobSpec(name="later", command=["true"], begin="now+1hour")).job
    bobs = bob.submit(jobs_pb2.JobSpec(name=f"bob-{uuid.uuid4().hex[:6]}", command=["sleep", "60"])).job
    try:
        wait_for(lambda: alice.get(later.job_id).reason == "BeginTime", timeout=30, what="pending on BeginTime")
        alice.hold(later.job_id)
        wait_for(lambda: alice.get(later.job_id).reason == "JobHeldUser", timeout=30, what="a user hold")
        alice.release(later.job_id)
        wait_for(lambda: alice.get(later.job_id).reason != "JobHeldUser", timeout=30, what="the release")
        with pytest.raises(ServiceError) as err:
            bob.hold(later.job_id)
        assert err.value.code_name == "PERMISSION_DENIED"
        wait_for(lambda: bob.get(bobs.job_id).state == jobs_pb2.JOB_STATE_RUNNING, timeout=60, what="bob's job")
        # A running job keeps running when held (as under scontrol): the hold only keeps it from
        # starting again after a requeue, until released.
        bob.hold(bobs.job_id)
        assert bob.get(bobs.job_id).state == jobs_pb2.JOB_STATE_RUNNING
        bob.release(bobs.job_id)
        # alice sees bob's job as squeue shows it to everyone, and nothing more.
        # Right after a release Slurm shows the job's reason as None until its scheduler looks again.
        queue = wait_for(
            lambda: (
                (q := {j.job_id: j for j in alice.queue().jobs}).get(later.job_id)
                and q[later.job_id].reason == "BeginTime"
                and q
            ),
            timeout=30,
            what="BeginTime again",
        )
        theirs, mine = queue[bobs.job_id], queue[later.job_id]
        assert (theirs.user, theirs.name, theirs.mine, theirs.supervised) == ("bob", bobs.name, False, False)
        assert theirs.state == jobs_pb2.JOB_STATE_RUNNING and theirs.nodes
        assert mine.mine and mine.supervised and mine.reason == "BeginTime"
        out = _cli(views_daemon, "alice", "list", "--all")
        assert out.returncode == 0 and bobs.job_id in out.stdout and "bob" in out.stdout
        with pytest.raises(ServiceError):
            alice.get(bobs.job_id)  # the record itself stays bob's
    finally:
        alice.cancel(later.job_id)
        bob.cancel(bobs.job_id)


def test_adopt_a_plain_sbatch_job(views_daemon: Daemon, stack: Stack, alice_dir: Path) -> None:
    entry = pwd.getpwnam("alice")
    sbatch = subprocess.run(
        [
            "setpriv",
            f"--reuid={entry.pw_uid}",
            f"--regid={entry.pw_gid}",
            "--init-groups",
            "sbatch",
            "--parsable",
            "--job-name=plain",
            f"--output={alice_dir}/plain-%j.out",
            "--wrap",
            "echo plain start; sleep 60",
        ],
        capture_output=True,
        text=True,
        cwd=alice_dir,
        env=stack.slurm_env(),
        timeout=60,
        check=True,
    )
    job_id = sbatch.stdout.strip().split(";")[0]
    alice, bob = views_daemon.client("alice"), views_daemon.client("bob")
    try:

        def adopted() -> jobs_pb2.AdoptJobResponse | None:
            try:
                return alice.adopt(job_id)
            except ServiceError as exc:  # not yet in the service's last poll
                assert exc.code_name == "NOT_FOUND", exc
                return None

        resp = wait_for(adopted, timeout=30, what="the adoption")
        assert not resp.already and resp.job.user == "alice"
        with pytest.raises(ServiceError) as err:
            bob.adopt(job_id)
        assert err.value.code_name == "PERMISSION_DENIED"
        assert alice.adopt(job_id).already
        comment = json.loads(stack.run("squeue", "--all", "--json").stdout)
        (sj,) = [j for j in comment["jobs"] if str(j["job_id"]) == job_id]
        assert sj["comment"].startswith("clusterctl-record:") and sj["requeue"]
        status = alice.get(job_id)
        assert status.stdout_path == f"{alice_dir}/plain-{job_id}.out"
        wait_for(
            lambda: (
                "plain start" in _text(list(alice.read_log(job_id))) if alice.get(job_id).start_time.seconds else False
            ),
            timeout=60,
            what="the adopted job's output",
        )
        alice.cancel(job_id)
        assert _done(alice, job_id).state == jobs_pb2.JOB_STATE_CANCELLED
    finally:
        stack.run("scancel", job_id, check=False)


def test_dashboard_api_tokens_and_ownership(views_daemon: Daemon, alice_dir: Path) -> None:
    alice = views_daemon.client("alice")
    job = alice.submit(
        jobs_pb2.JobSpec(
            name="web", command=["echo", "from the web"], submit_directory=str(alice_dir), stdout_path="web-%j.out"
        )
    ).job
    _done(alice, job.job_id)
    assert _http(views_daemon, "/api/jobs", None)[0] == 401
    status, body = _http(views_daemon, f"/api/jobs/{job.job_id}", "bob")
    assert status == 403 and body["code"] == "PERMISSION_DENIED"
    assert _http(views_daemon, f"/api/jobs/{job.job_id}/log", "bob")[0] == 403
    status, body = _http(views_daemon, f"/api/jobs/{job.job_id}/log?tail=5", "alice")
    assert status == 200 and body["text"] == "from the web\n"
    status, body = _http(views_daemon, "/api/jobs?finished=1", "alice")
    assert status == 200 and job.job_id in {j["job_id"] for j in body["jobs"]}
    status, body = _http(views_daemon, "/api/topology", "alice")
    assert status == 200 and body["topology"]["nodes"] and body["topology"]["switches"][0]["gpus_total"] > 0


def test_checkpoints_panel_lists_and_verifies_the_newest_step(
    views_daemon: Daemon, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from clusterctl.checkpoint import CheckpointManager

    for key, value in stack.env.items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    uri = f"s3://{stack.env['CLUSTERCTL_BUCKET']}/views-{uuid.uuid4().hex[:8]}"
    ckpt = CheckpointManager(uri, rank=0, world_size=1)
    for step in (1, 2):
        ckpt.save(step, {"w": np.arange(1000, dtype=np.float32) * step}).result(timeout=60)
    ckpt.close()
    alice = views_daemon.client("alice")
    job = alice.submit(jobs_pb2.JobSpec(name="ckpt", command=["true"], checkpoint_uri=uri)).job
    with pytest.raises(ServiceError) as err:
        views_daemon.client("bob").checkpoints(job.job_id)
    assert err.value.code_name == "PERMISSION_DENIED"

    def verified() -> jobs_pb2.ListJobCheckpointsResponse | None:
        listing = alice.checkpoints(job.job_id)
        assert not listing.error, listing.error
        return listing if listing.checkpoints and listing.checkpoints[-1].verification == "verified" else None

    listing = wait_for(verified, timeout=60, what="the newest step verified")
    assert [c.step for c in listing.checkpoints] == [1, 2] and listing.uri == uri
    assert listing.checkpoints[0].verification == "unverified" and listing.checkpoints[-1].bytes >= 4000
    status, body = _http(views_daemon, f"/api/jobs/{job.job_id}/checkpoints", "alice")
    assert status == 200 and body["checkpoints"][-1]["verification"] == "verified"
