"""Memory tier bench: restore from a peer's memory vs today's verified restore from S3, same run.

One rank saves an N GiB float32 state through its node's tier (a ``python -m clusterctl.tier``
process replicating to a second tier); then a rank whose own tier is empty (its node lost its
memory) restores it from the peer, and the anchor restores the same step from S3 without a tier
(both verify every chunk's xxh3). Also: ``save()`` blocking vs the ``np.copyto`` floor, and the
speed of a CPU loop in the trainer while the tier uploads the step to S3 and to a local dir, vs idle.
S3: the AWS_* variables when AWS_ENDPOINT_URL is set (plus --bucket), else a private SeaweedFS.

    python -m bench.tier                 # 1 GiB
    python -m bench.tier --size-gib 0.25
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import tempfile
import threading
import time
import uuid

import numpy as np

from bench.checkpoint import cpu_loop, make_state
from clusterctl.checkpoint import CheckpointConfig, CheckpointManager
from clusterctl.tier import TierClient, spawn_tier
from clusterctl.tier.process import ENV_ADDR, ENV_JOB, ENV_PEERS, ENV_SECRET
from tests.support.s3server import get_server

JOB = "bench"
CONFIG = CheckpointConfig(gc_on_commit=False, commit_timeout=600)


def _point(local: str, peers: list[str], secret: bytes) -> None:
    os.environ.update({ENV_ADDR: local, ENV_PEERS: ",".join(peers), ENV_JOB: JOB, ENV_SECRET: secret.hex()})


def _loop_while_durable(ckpt: CheckpointManager, state: dict[str, np.ndarray], step: int) -> float:
    """Loop steps/s from save() until the step is on the URI."""
    done = threading.Event()
    ckpt.save(step, state).result()

    def wait() -> None:
        ckpt.wait_durable(step)
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    return cpu_loop(0, until=done)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket", default=None, help="bucket to use with AWS_ENDPOINT_URL")
    opts = ap.parse_args()
    if os.environ.get("AWS_ENDPOINT_URL"):
        bucket = opts.bucket or "clusterctl"
    else:
        server = get_server()
        os.environ.update(server.env())
        bucket = server.bucket
    nbytes = int(opts.size_gib * (1 << 30))
    state = make_state(0, nbytes)
    secret = secrets.token_bytes(32)
    # The peer holds replicas of 3 namespaces' steps, not droppable until uploaded (slow on a busy machine).
    tiers = [spawn_tier(job=JOB, secret=secret, replicas=1, cap_bytes=nbytes * 8) for _ in range(3)]
    a, b, c = (t.address for t in tiers)
    for addr, peers in ((a, [b]), (b, [a])):
        TierClient(addr, secret=secret, job=JOB).configure(peers, 1)
    uri = f"s3://{bucket}/bench-tier/{uuid.uuid4().hex[:8]}"
    local_dir = tempfile.mkdtemp(prefix="tier-bench-")
    rows: dict[str, list[float]] = {k: [] for k in ("block", "floor", "peer", "s3", "idle", "s3loop", "dirloop")}
    try:
        floor_buf = np.empty(nbytes, dtype=np.uint8)
        _point(a, [b], secret)
        with CheckpointManager(uri, rank=0, world_size=1, keep=2, config=CONFIG, tier="memory") as ckpt:
            for i in range(opts.repeats + 1):
                t0 = time.perf_counter()
                handle = ckpt.save(i, state)
                blocked = time.perf_counter() - t0
                handle.result()
                ckpt.wait_durable(i)
                t0 = time.perf_counter()
                off = 0
                for arr in state.values():
                    raw = arr.view(np.uint8)
                    np.copyto(floor_buf[off : off + raw.size], raw)
                    off += raw.size
                if i:  # the first save pays page faults on both sides
                    rows["floor"].append(time.perf_counter() - t0)
                    rows["block"].append(blocked)
            last = opts.repeats
        _point(c, [b], secret)  # a restarted rank on a node whose memory was lost: only the peer has it
        for _ in range(opts.repeats):
            with CheckpointManager(uri, rank=0, world_size=1, config=CONFIG, tier="memory") as ckpt:
                t0 = time.perf_counter()
                got = ckpt.restore(last)
                rows["peer"].append(time.perf_counter() - t0)
                assert np.array_equal(got["layer00"], state["layer00"])
                del got
            with CheckpointManager(uri, rank=0, world_size=1, config=CONFIG) as plain:
                t0 = time.perf_counter()
                got = plain.restore(last)
                rows["s3"].append(time.perf_counter() - t0)
                del got
        _point(a, [b], secret)
        for target, key in ((uri + "-loop", "s3loop"), (local_dir, "dirloop")):
            with CheckpointManager(target, rank=0, world_size=1, keep=1, config=CONFIG, tier="memory") as ckpt:
                for i in range(opts.repeats):
                    rows["idle"].append(cpu_loop(2.0))
                    rows[key].append(_loop_while_durable(ckpt, state, 100 + i))
    finally:
        for t in tiers:
            t.stop()
        shutil.rmtree(local_dir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    gb = nbytes / 1e9
    print(f"tier bench: {nbytes / (1 << 30):.2f} GiB float32, 1 rank, replicas 1, {opts.repeats} repeats (medians)")
    print(f" {'metric':<48}{'ours':>10}{'anchor':>10}{'ratio':>9}   target")
    print(
        f" {'restore from peer memory vs from S3 (GB/s)':<48}{gb / med['peer']:>10.2f}{gb / med['s3']:>10.2f}"
        f"{med['s3'] / med['peer']:>8.2f}x   >= 5x"
    )
    print(
        f" {'save() blocking vs np.copyto floor':<48}{med['block']:>9.3f}s{med['floor']:>9.3f}s"
        f"{med['block'] / med['floor']:>8.2f}x   <= 1.1x"
    )
    print(
        f" {'loop steps/s while the tier uploads to S3 / idle':<48}{med['s3loop']:>10.0f}{med['idle']:>10.0f}"
        f"{med['s3loop'] / med['idle']:>8.2f}x   >= 0.9x"
    )
    print(
        f" {'  same, to a local dir':<48}{med['dirloop']:>10.0f}{med['idle']:>10.0f}"
        f"{med['dirloop'] / med['idle']:>8.2f}x   >= 0.9x"
    )


if __name__ == "__main__":
    main()
