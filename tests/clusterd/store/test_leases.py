"""Leases: one live holder, epochs bumped on every new acquisition, a deposed holder cannot renew."""

from __future__ import annotations

import asyncio

from clusterd.store.store import Store


async def test_one_holder_at_a_time_and_the_epoch_fences_the_old_one(replicas: tuple[Store, Store]) -> None:
    a, b = replicas
    assert await a.leases.current("supervisor") is None
    first = await a.leases.acquire("supervisor", "r1", 0.5)
    assert first is not None and first.holder == "r1" and first.epoch == 1 and 0.3 < first.expires_in <= 0.5
    assert await b.leases.acquire("supervisor", "r2", 0.5) is None  # r1's lease is live
    kept = await a.leases.acquire("supervisor", "r1", 0.5)  # the holder acquiring again keeps its epoch
    assert kept is not None and kept.epoch == 1
    assert await a.leases.renew("supervisor", "r1", 1, 0.5)
    assert not await b.leases.renew("supervisor", "r2", 1, 0.5)  # not the holder
    assert not await a.leases.renew("supervisor", "r1", 2, 0.5)  # not the epoch
    seen = await b.leases.current("supervisor")
    assert seen is not None and seen.holder == "r1" and seen.epoch == 1 and seen.expires_in > 0
    await asyncio.sleep(0.6)  # r1 stops renewing (frozen, dead)
    expired = await b.leases.current("supervisor")
    assert expired is not None and expired.expires_in <= 0
    assert not await a.leases.renew("supervisor", "r1", 1, 0.5)  # too late: it expired
    second = await b.leases.acquire("supervisor", "r2", 0.5)
    assert second is not None and second.holder == "r2" and second.epoch == 2
    assert not await a.leases.renew("supervisor", "r1", 1, 5.0)  # the deposed leader wakes up: fenced
    assert await a.leases.acquire("supervisor", "r1", 0.5) is None
    assert await b.leases.renew("supervisor", "r2", 2, 0.5)


async def test_release_hands_over_at_once_and_a_return_is_a_new_epoch(store: Store) -> None:
    lease = await store.leases.acquire("supervisor", "r1", 30.0)
    assert lease is not None
    await store.leases.release("supervisor", "r2", lease.epoch)  # not r2's to release: nothing changes
    assert (await store.leases.acquire("supervisor", "r2", 30.0)) is None
    await store.leases.release("supervisor", "r1", lease.epoch)
    released = await store.leases.current("supervisor")
    assert released is not None and released.expires_in <= 0
    back = await store.leases.acquire("supervisor", "r1", 30.0)  # even the same holder: a new term
    assert back is not None and back.epoch == lease.epoch + 1
    other = await store.leases.acquire("other", "r9", 30.0)  # leases are independent by name
    assert other is not None and other.epoch == 1


async def test_racing_acquirers_get_one_winner(replicas: tuple[Store, Store]) -> None:
    a, b = replicas
    for round_ in range(5):
        got = await asyncio.gather(*(s.leases.acquire("race", f"r{i}", 30.0) for i, s in enumerate((a, b, a, b))))
        winners = [lease for lease in got if lease is not None]
        assert len({w.holder for w in winners}) == 1, got
        assert {w.epoch for w in winners} == {round_ + 1}
        await a.leases.release("race", winners[0].holder, winners[0].epoch)  # free again, however slow the race
