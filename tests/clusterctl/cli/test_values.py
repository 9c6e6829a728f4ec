"""Value parsers: what people type for memory, time, hostlists, env and counts."""

from __future__ import annotations

import pytest

from clusterctl.cli import values


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        ("1024", 1024),
        ("4G", 4096),
        ("4g", 4096),
        ("512M", 512),
        ("512MB", 512),
        ("1T", 1048576),
        ("2048K", 2),
        ("1K", 1),
        ("100K", 1),
    ],
)
def test_memory_mb(text: str, mb: int) -> None:
    assert values.memory_mb(text) == mb


@pytest.mark.parametrize("text", ["5X", "", "G", "-1G", "0", "0M", "4 GiB", "1e3", "1.5G", "0.5G"])
def test_memory_mb_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        values.memory_mb(text)


@pytest.mark.parametrize(
    ("text", "slurm"),
    [
        ("30", "30"),
        ("30:00", "30:00"),
        ("1:00:00", "1:00:00"),
        ("2-00", "2-00"),
        ("1-12:30", "1-12:30"),
        ("1-00:00:01", "1-00:00:01"),
        ("UNLIMITED", "UNLIMITED"),
        ("infinite", "infinite"),
    ],
)
def test_time_limit(text: str, slurm: str) -> None:
    assert values.time_limit(text) == slurm


@pytest.mark.parametrize("text", ["", "1h-2", "abc", "1:2:3:4", "-5", "1.5h", "h", "90m", "2h", "1d"])
def test_time_limit_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="bad time limit"):
        values.time_limit(text)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("node1", ["node1"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("node[1-2,7],gpu5", ["node1", "node2", "node7", "gpu5"]),
        ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a, b ,c", ["a", "b", "c"]),
    ],
)
def test_hostlist(text: str, names: list[str]) -> None:
    assert values.hostlist(text) == names


@pytest.mark.parametrize(
    "text", ["node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "node[[1]]", "", ",", "n[1-9999999]"]
)
def test_hostlist_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        values.hostlist(text)


def test_counts() -> None:
    assert values.positive_int("3") == 3
    assert values.non_negative_int("0") == 0
    for bad in ("0", "-1", "x", "1.5", ""):
        with pytest.raises(ValueError):
            values.positive_int(bad)
    with pytest.raises(ValueError):
        values.non_negative_int("-1")
    with pytest.raises(ValueError):
        values.exit_code("256")


def test_env_and_gres_and_duration() -> None:
    assert values.env_assignment("A=b=c") == ("A", "b=c")
    assert values.env_assignment("EMPTY=") == ("EMPTY", "")
    for bad in ("NOVALUE", "1A=x", "A-B=x", "=x", "A B=x"):
        with pytest.raises(ValueError):
            values.env_assignment(bad)
    assert values.gres_gpus("gpu:4") == ("", 4)
    assert values.gres_gpus("gpu:a100:2") == ("a100", 2)
    assert values.gres_gpus("gpu:tesla") == ("tesla", 1)
    assert values.gres_gpus("gpu") == ("", 1)
    for bad in ("mps:2", "gpu:0", "gpu:a:b:1", "gpu:2,shard:1", "gpu:a b:1"):
        with pytest.raises(ValueError):
            values.gres_gpus(bad)
    assert values.typed_gpus("4") == ("", 4)
    assert values.typed_gpus("a100:2") == ("a100", 2)
    for bad in ("0", "a:b:2", ":2", "x"):
        with pytest.raises(ValueError):
            values.typed_gpus(bad)
    assert values.duration_seconds("600") == 600
    assert values.duration_seconds("10m") == 600
    assert values.duration_seconds("2h") == 7200
    with pytest.raises(ValueError):
        values.duration_seconds("10 minutes")


def test_node_range_and_array() -> None:
    assert values.node_range("4") == (4, 0)
    assert values.node_range("2-4") == (2, 4)
    assert values.node_range("3-3") == (3, 3)
    for bad in ("0", "4-2", "2-", "-2", "a-b"):
        with pytest.raises(ValueError):
            values.node_range(bad)
    for good in ("0-9", "1,3,5", "0-15:4", "0-9%2", "7"):
        assert values.array_indexes(good) == good
    for bad in ("", "1-", "a", "1-9:", "%2", "1;2"):
        with pytest.raises(ValueError):
            values.array_indexes(bad)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (values.positive_int, "4294967296"),
        (values.positive_int, "9" * 5000),  # refused before int() (which has a digit limit of its own)
        (values.non_negative_int, "99999999999"),
        (values.memory_mb, "99999999999999999999T"),
        (values.memory_mb, "9" * 30 + "T"),  # exact: a float would round it
        (values.duration_seconds, "4294967296"),
        (values.duration_seconds, "99999999999d"),
        (values.time_limit, "99999999999999"),
        (values.seconds, "4294967296"),
        (values.step_number, str(2**63)),
        (values.node_range, "1-4294967296"),
    ],
)
def test_numbers_past_the_proto_field_are_refused(parse: object, text: str) -> None:
    with pytest.raises(ValueError, match=r"up to|too large|too long"):
        parse(text)  # type: ignore[operator]


def test_numbers_at_the_proto_limit_pass() -> None:
    assert values.positive_int("4294967295") == 2**32 - 1
    assert values.duration_seconds("4294967295") == 2**32 - 1
    assert values.memory_mb(f"{2**64 - 1}") == 2**64 - 1
    assert values.step_number(str(2**63 - 1)) == 2**63 - 1


@pytest.mark.parametrize("text", ["\u0661\u0662", "1_000", "\u00b2", "+3", "1e3", "0x10", "12 3"])
def test_only_ascii_digits_are_numbers(text: str) -> None:
    for parse in (
        values.positive_int,
        values.non_negative_int,
        values.exit_code,
        values.step_number,
        values.duration_seconds,
        values.seconds,
        values.memory_mb,
    ):
        with pytest.raises(ValueError):
            parse(text)
    with pytest.raises(ValueError):
        values.gres_gpus(f"gpu:a:{text}")


@pytest.mark.parametrize("text", ["inf", "nan", "-1", "1e3", "\u0661"])
def test_seconds_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        values.seconds(text)
    with pytest.raises(ValueError):
        values.positive_seconds(text)
    assert values.seconds("0") == 0 and values.positive_seconds("2.5") == 2.5


def test_env_name_is_one_rule() -> None:
    from clusterctl.cli import environment

    assert values.is_env_name("_A1") and not values.is_env_name("1A") and not values.is_env_name("É")
    assert environment.sendable("_A1", "x") and not environment.sendable("É", "x")
