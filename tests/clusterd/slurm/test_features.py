"""Release features read from real ``scontrol show config`` output of 22.05, 24.11 and 26.05 (captured
on deploy/local/stack.sh up --slurm VER; the 26.05 stack sets requeue_delay and expedited requeue)."""

from __future__ import annotations

import pytest

from clusterd.config import SlurmConfig
from clusterd.slurm.fake import FakeSlurm
from clusterd.slurm.features import SlurmFeatures, detect, from_config, option, parse_show_config
from tests.support.paths import SLURM_FIXTURES


def captured(version: str) -> dict[str, str]:
    return parse_show_config((SLURM_FIXTURES / f"scontrol_show_config_{version}.txt").read_text())


@pytest.mark.parametrize(
    ("version", "delay", "expedite", "filters"),
    [("22.05", None, False, False), ("24.11", None, False, True), ("26.05", 5, True, True)],
)
def test_features_of_each_release(version: str, delay: int | None, expedite: bool, filters: bool) -> None:
    config = captured(version)
    assert config["SLURM_VERSION"].startswith(version)
    features = from_config(config["SLURM_VERSION"], config)
    assert (features.requeue_delay_seconds, features.expedited_requeue, features.json_filters) == (
        delay,
        expedite,
        filters,
    )
    text = "; ".join(features.describe())
    assert ("--states=all" in text) is filters
    assert ("requeue_delay=5s" in text) is (delay == 5)
    assert ("expedited requeue enabled" in text) is expedite


def test_options_older_releases_do_not_have_are_ignored() -> None:
    """requeue_delay written into a 24.11 config means nothing to 24.11."""
    config = {"SchedulerParameters": "bf_interval=5,requeue_delay=5", "SlurmctldParameters": "enable_expedited_requeue"}
    assert from_config("24.11.5", config) == SlurmFeatures("24.11.5")
    assert from_config("25.11.0", config).requeue_delay_seconds == 5


def test_parse_show_config_and_options() -> None:
    config = parse_show_config("SlurmctldParameters     = (null)\nSchedulerParameters = a=1,b\nnot a setting\n")
    assert config == {"SlurmctldParameters": "", "SchedulerParameters": "a=1,b"}
    assert (option("a=1,b", "a"), option("a=1,b", "b"), option("a=1,b", "c")) == ("1", "", None)


async def test_a_test_double_is_not_asked_for_its_config() -> None:
    features = await detect(SlurmConfig(), FakeSlurm.cluster())
    assert features.requeue_delay_seconds is None and not features.rest_used


def test_private_data_is_read_from_the_config() -> None:
    assert from_config("22.05.8", captured("22.05")).private_data == frozenset()
    features = from_config("22.05.8", {"PrivateData": "jobs,usage"})
    assert features.private_data == {"jobs", "usage"}
    assert any("PrivateData=jobs" in line for line in features.describe())
