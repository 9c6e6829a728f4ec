"""The supervisor lease between two replicas of one store: who leads, when it changes, and fencing."""

from __future__ import annotations

import asyncio

import pytest

from clusterd.config import ConfigError, HAConfig
from clusterd.ha.fencing import FencedBackend
from clusterd.ha.leadership import Deposed, Leadership
from clusterd.slurm.fake import FakeSlurm
from clusterd.store.store import Store

TTL = 0.3
CONFIG = HAConfig(lease_seconds=TTL, renew_seconds=0.1)


class Clock:
    """A monotonic clock a test moves: a replica frozen for a while, as its own clock sees it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_one_leads_the_other_follows(embedded_store: Store) -> None:
    a, b = Leadership(embedded_store.leases, CONFIG, holder="a"), Leadership(embedded_store.leases, CONFIG, holder="b")
    await a.step()
    await b.step()
    assert a.is_leader and not b.is_leader
    assert a.epoch == 1 and b.epoch == 0
    await a.check()
    await a.step()  # renewing keeps the epoch
    assert a.epoch == 1


async def test_a_leader_that_stops_renewing_is_replaced_and_fenced(embedded_store: Store) -> None:
    clock = Clock()
    a, b = (
        Leadership(embedded_store.leases, CONFIG, holder="a", clock=clock),
        Leadership(embedded_store.leases, CONFIG, holder="b"),
    )
    await a.step()
    await asyncio.sleep(TTL * 1.5)  # a is frozen: it renews nothing
    await b.step()
    assert b.is_leader and b.epoch == 2
    # a's own clock did not move (the worst case): it still believes it leads, until it asks the store
    assert a.is_leader
    fake = FakeSlurm.cluster()
    with pytest.raises(Deposed, match="held by b at epoch 2"):
        await FencedBackend(fake, a).requeue("42")
    assert fake.calls["requeue"] == 0 and not a.is_leader
    await a.step()  # a renews: refused, and b's live lease is not taken
    assert not a.is_leader and b.is_leader


async def test_a_frozen_leader_knows_by_its_own_clock(embedded_store: Store) -> None:
    clock = Clock()
    a = Leadership(embedded_store.leases, CONFIG, holder="a", clock=clock)
    changes: list[bool] = []
    a.subscribe(changes.append)
    await a.step()
    clock.now += TTL  # SIGSTOP for a lease: CLOCK_MONOTONIC runs on while a process is stopped
    assert not a.is_leader
    with pytest.raises(Deposed):
        await a.check()
    assert changes == [True]


async def test_fenced_reads_pass_and_writes_happen_while_leading(embedded_store: Store) -> None:
    a = Leadership(embedded_store.leases, CONFIG, holder="a")
    await a.step()
    fake = FakeSlurm.cluster()
    fenced = FencedBackend(fake, a)
    await fenced.set_node_down("n1", "test")
    assert fake.calls["set_node_down"] == 1
    assert await fenced.list_nodes()


async def test_release_hands_over_at_once(embedded_store: Store) -> None:
    a, b = Leadership(embedded_store.leases, CONFIG, holder="a"), Leadership(embedded_store.leases, CONFIG, holder="b")
    await a.step()
    await a.release()
    await b.step()
    assert b.is_leader and not a.is_leader and b.epoch == 2


async def test_run_renews_until_stopped(embedded_store: Store) -> None:
    a, b = Leadership(embedded_store.leases, CONFIG, holder="a"), Leadership(embedded_store.leases, CONFIG, holder="b")
    stop = asyncio.Event()
    task = asyncio.create_task(a.run(stop))
    await asyncio.sleep(TTL * 3)
    await b.step()
    assert a.is_leader and not b.is_leader  # renewed in time, every time
    stop.set()
    await task
    await b.step()
    assert b.is_leader


def test_renewing_slower_than_the_lease_is_refused(embedded_store: Store) -> None:
    with pytest.raises(ConfigError, match="renew_seconds"):
        Leadership(embedded_store.leases, HAConfig(lease_seconds=1.0, renew_seconds=2.0))
