"""The options a request is read from, merged with sbatch's precedence, and the bounds they get.

``#SBATCH`` lines first, then ``spec.sbatch_options`` (the CLI's command line and ``SBATCH_*``
variables), later ones winning; the JobSpec's typed fields win over all of them (:mod:`validate`).
A value a reader refuses is an :class:`~clusterd.errors.InvalidArgument` naming where it was written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from clusterd.errors import InvalidArgument
from clusterd.jobs.directives import Directive

T = TypeVar("T")
# The most a request may ask for (a directive may not ask for more than the matching spec field).
MAX_TASKS = 1024  # per node
MAX_GPUS = 64  # per node
MAX_CPUS = 4096
MAX_MEMORY_MB = 64 << 20  # 64 TiB


def bounded(value: int, maximum: int) -> int:
    if value > maximum:
        raise ValueError(f"{value} exceeds the maximum of {maximum}")
    return value


def upto(reader: Callable[[str], int], maximum: int) -> Callable[[str], int]:
    """``reader`` with the bound the matching spec field has (a directive may not ask for more)."""
    return lambda text: bounded(reader(text), maximum)


def typed_upto(reader: Callable[[str], tuple[str, int]], maximum: int) -> Callable[[str], tuple[str, int]]:
    def read(text: str) -> tuple[str, int]:
        kind, number = reader(text)
        return kind, bounded(number, maximum)

    return read


class Merged:
    """The options of one request, the last of each kept (``#SBATCH`` lines, then spec.sbatch_options)."""

    def __init__(self, directives: list[Directive]) -> None:
        self.values: dict[str, Directive] = {}
        self.order: dict[str, int] = {}  # where each option was given last: which of two rivals wins
        for i, d in enumerate(directives):
            self.values[d.option] = d
            self.order[d.option] = i

    def last_of(self, *options: str) -> str | None:
        """Of rival options (``--exclusive``/``--oversubscribe``), the one given last, or None."""
        given = [o for o in options if o in self.order]
        return max(given, key=self.order.__getitem__) if given else None

    def flag(self, option: str) -> bool:
        return option in self.values

    def get(self, option: str) -> Directive | None:
        return self.values.get(option)

    def read(self, option: str, reader: Callable[[str], T]) -> T | None:
        """The directive's value read by ``reader``; a bad value names the line."""
        d = self.values.get(option)
        if d is None:
            return None
        if d.value is None:
            raise InvalidArgument(d.field, f"{d.where}: --{option} needs a value")
        try:
            return reader(d.value)
        except ValueError as exc:
            raise InvalidArgument(d.field, f"{d.where}: {exc}") from None

    def read_optional(self, option: str, reader: Callable[[str | None], T]) -> T | None:
        """Like :meth:`read` for an option whose value is optional (``--no-kill[=off]``)."""
        d = self.values.get(option)
        if d is None:
            return None
        try:
            return reader(d.value)
        except ValueError as exc:
            raise InvalidArgument(d.field, f"{d.where}: {exc}") from None

    def text(self, option: str, spec_value: str, field_name: str, check: Callable[[str, str], None]) -> str:
        if spec_value:
            check(field_name, spec_value)
            return spec_value
        value = self.read(option, lambda v: v) or ""
        if value:
            d = self.values[option]
            try:
                check(d.where, value)
            except InvalidArgument as exc:
                raise InvalidArgument(d.field, f"{d.where}: {exc.message}") from None
        return value
