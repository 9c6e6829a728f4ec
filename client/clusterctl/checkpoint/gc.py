"""Retention (keep the newest N committed steps) and garbage collection.

Garbage is everything under ``steps/`` that no commit marker references: shards and manifests of
failed or abandoned attempts, and orphaned multipart uploads / temp files. It is deleted only when
older than a grace period and not part of a save this process has in flight, so a save that is
uploading right now (on any rank) is never touched. Retention deletes a step's commit marker
*first* (the step disappears from discovery at once), then its objects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ..storage import IncompleteUpload, ObjectInfo, Storage
from . import layout
from .commit import read_marker_or_none

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done, total)


def list_committed(storage: Storage) -> list[int]:
    """Committed steps, ascending: one LIST of ``commits/``."""
    steps = []
    for obj in storage.list_objects(layout.COMMITS):
        step = layout.parse_commit_key(obj.key)
        if step is not None:
            steps.append(step)
    return sorted(steps)


def latest_committed(storage: Storage) -> int | None:
    """The newest committed step, or None: what a resuming job (or its supervisor) asks first."""
    steps = list_committed(storage)
    return steps[-1] if steps else None


def apply_retention(storage: Storage, keep: int, *, protect: Collection[int] = ()) -> list[int]:
    """Delete all but the newest ``keep`` committed steps (``keep <= 0`` keeps everything).

    Returns the steps removed.
    """
    if keep <= 0:
        return []
    committed = list_committed(storage)
    victims = [s for s in committed[:-keep] if s not in protect]
    for step in victims:
        storage.delete([layout.commit_key(step)])
        storage.delete([o.key for o in storage.list_objects(layout.step_prefix(step))])
        log.info("retention: removed step %d", step)
    return victims


@dataclass
class GarbageReport:
    """What a GC pass found (and, unless dry_run, removed)."""

    objects: list[ObjectInfo] = field(default_factory=list)
    uploads: list[IncompleteUpload] = field(default_factory=list)
    young: int = 0
    in_flight: int = 0

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)


def find_garbage(
    storage: Storage, *, grace: float, in_flight: Collection[tuple[int, str]] = (), now: float | None = None
) -> GarbageReport:
    """Objects under ``steps/`` not referenced by a commit marker, older than ``grace`` seconds."""
    now = time.time() if now is None else now
    live: dict[int, str | None] = {}
    for step in list_committed(storage):
        marker = read_marker_or_none(storage, step)
        # An unreadable marker: keep every attempt of that step rather than guess.
        live[step] = marker.attempt if marker is not None else None
    report = GarbageReport()
    flight = set(in_flight)
    for obj in storage.list_objects(layout.STEPS):
        parsed = layout.parse_step_key(obj.key)
        if parsed is not None:
            step, attempt = parsed
            if step in live and (live[step] is None or live[step] == attempt):
                continue
            if (step, attempt) in flight:
                report.in_flight += 1
                continue
        if now - obj.mtime < grace:
            report.young += 1
            continue
        report.objects.append(obj)
    for upload in storage.list_incomplete(layout.STEPS):
        parsed = layout.parse_step_key(upload.key)
        if parsed is not None and parsed in flight:
            report.in_flight += 1
        elif now - upload.started < grace:
            report.young += 1
        else:
            report.uploads.append(upload)
    return report


def collect_garbage(
    storage: Storage,
    *,
    grace: float,
    in_flight: Collection[tuple[int, str]] = (),
    dry_run: bool = False,
    progress: Progress | None = None,
    now: float | None = None,
) -> GarbageReport:
    """Find garbage and (unless ``dry_run``) delete it; ``progress(done, total)`` after each batch."""
    report = find_garbage(storage, grace=grace, in_flight=in_flight, now=now)
    total = len(report.objects) + len(report.uploads)
    if dry_run:
        return report
    done = 0
    keys = [o.key for o in report.objects]
    for i in range(0, len(keys), 500):
        batch = keys[i : i + 500]
        storage.delete(batch)
        done += len(batch)
        if progress:
            progress(done, total)
    for upload in report.uploads:
        storage.abort_incomplete(upload)
        done += 1
        if progress:
            progress(done, total)
    if total:
        log.info(
            "gc: removed %d objects (%d bytes) and %d incomplete uploads under %s",
            len(report.objects),
            report.bytes,
            len(report.uploads),
            storage.uri,
        )
    return report
