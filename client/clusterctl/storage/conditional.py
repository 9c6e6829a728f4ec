"""Whether a store's create-only put holds: probed, never assumed.

S3 servers differ exactly here (a server may ignore ``If-None-Match: *``, or honour it on one kind of
write and not another), and a checkpoint step is committed by one create-only put. Both the
checkpoint manager (before its first commit) and ``clusterd check`` ask this one probe.
"""

from __future__ import annotations

import contextlib

from .base import Storage
from .errors import ObjectExistsError


def create_only_refusal(storage: Storage, key: str) -> str | None:
    """Why ``storage`` does not make create-only puts exclusive, or None when it does.

    Puts ``key`` create-only twice (the way every commit marker is written: one small object, one
    request); the first must succeed, the second be refused. ``key`` must be fresh (a random name):
    then a refused first put means a retry of it, after a lost reply, found our own object, so it
    counts as created. The probe object is deleted afterwards.

    Raises:
        StorageError: the first put failed (the store is unreachable, denies writes, ...).
    """
    try:
        with contextlib.suppress(ObjectExistsError):
            storage.put(key, b"1", if_absent=True)
        try:
            storage.put(key, b"2", if_absent=True)
        except ObjectExistsError:
            return None
        return (
            "the server accepted a second create-only PUT of one object (S3 If-None-Match: *; "
            "expected 412 Precondition Failed)"
        )
    finally:
        with contextlib.suppress(Exception):
            storage.delete([key])
