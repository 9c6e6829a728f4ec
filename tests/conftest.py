"""Suite-wide fixtures on the real local stack (deploy/local/stack.sh up); helpers live in tests.support.

``stack`` is the running stack; ``daemon`` is a clusterd process of this module's own (own unix socket,
own state dir) in front of the stack's Slurm, so that tests can kill and restart it without disturbing
the stack's demo service. Without a stack these skip, unless CLUSTERCTL_REQUIRE_STACK=1 (set by
.ci/run), where a missing stack is a failure: a skipped integration test proves nothing.

Every test that needs the stack, a real server process (SeaweedFS, PostgreSQL, clusterd, a browser) or
seconds of torch.distributed processes is marked ``stack`` here, in one place, so that
``pytest -m "not stack"`` is the fast loop: no root, no stack, no network.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.stack import Stack, load_stack
from tests.support.users import user_dir

# A test is a stack test when it carries one of these markers ("slow": seconds of work on its own) ...
STACK_MARKERS = frozenset({"slurm", "s3", "compat", "slow"})
# ... uses one of these fixtures (the stack, a clusterd process, SeaweedFS, PostgreSQL, a browser) ...
STACK_FIXTURES = frozenset({"stack", "daemon", "s3_server", "pg_url", "pg_stores", "browser"})
# ... takes one of these parameter values (the store fixtures' PostgreSQL half) ...
STACK_PARAMS = frozenset({"postgres"})
# ... or starts processes that run torch.distributed (gloo process groups, torchrun): seconds each.
# A node id prefix: a whole module, or one test function with all its parameters.
STACK_TESTS = (
    "tests/clusterctl/checkpoint/test_dtensor.py::",
    "tests/clusterctl/checkpoint/test_due_ranks.py::",
    "tests/clusterctl/checkpoint/test_ranks.py::test_torchrun_under_one_srun_task",
    "tests/clusterctl/checkpoint/test_ranks.py::test_manager_created_before_the_process_group",
    "tests/clusterctl/checkpoint/test_ranks.py::test_two_processes_with_one_slurm_rank_do_not_commit",
    "tests/clusterctl/checkpoint/test_stateful.py::test_data_parallel_state_restores_at_another_world_size",
    "tests/clusterctl/checkpoint/test_stop.py::",
    "tests/clusterctl/checkpoint/test_torch.py::test_torch_distributed_",
    "tests/clusterctl/checkpoint/test_train_elastic.py::",
    "tests/clusterctl/checkpoint/test_train_torch.py::",
    "tests/clusterctl/tier/test_tier.py::test_two_ranks_",
    "tests/clusterctl/tier/test_tier.py::test_save_commits_in_peer_memory_",
)

# The S3-behaviour tests that also run against Ceph's RADOS Gateway (tests/support/cephs3.py): what
# differs between S3 servers (create-only puts, racing writers, multipart uploads, outages, the
# probes that refuse a server). Every other S3 test runs against SeaweedFS alone.
CEPH_TESTS = (
    "tests/clusterctl/storage/",
    "tests/clusterctl/checkpoint/test_faults.py::",
    "tests/clusterctl/checkpoint/test_ranks.py::test_duplicate_writers_on_real_storage",
    "tests/clusterctl/checkpoint/test_roundtrip.py::test_large_parts_round_trip",
    "tests/clusterctl/checkpoint/test_multiprocess.py::test_kill_9_of_a_rank_mid_upload",
    "tests/clusterd/test_check.py::test_s3_conditional_put_probe",
)
CEPH_PARAMS = frozenset({"ceph", "s3-ceph"})  # the S3 fixtures' parameter values for Ceph


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Runs after the folders' own conftest hooks (registered later, called first: tests/compat adds
    # its markers there) and before -m deselects.
    def ceph_elsewhere(item: pytest.Item) -> bool:
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_ceph = any(isinstance(v, str) and v in CEPH_PARAMS for v in params.values())
        return on_ceph and not item.nodeid.startswith(CEPH_TESTS)

    dropped = [item for item in items if ceph_elsewhere(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not ceph_elsewhere(item)]
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(isinstance(v, str) and v in CEPH_PARAMS for v in params.values()):
            item.add_marker(pytest.mark.ceph)
        if (
            any(item.get_closest_marker(name) for name in STACK_MARKERS)
            or STACK_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or any(isinstance(v, str) and v in STACK_PARAMS for v in params.values())
            or item.nodeid.startswith(STACK_TESTS)
        ):
            item.add_marker(pytest.mark.stack)


@pytest.fixture(scope="session")
def stack() -> Stack:
    return load_stack()


@pytest.fixture(scope="module")
def daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon.reachable_by_jobs(stack, tmp_path_factory.mktemp("clusterd"))
    d.start()
    yield d
    d.stop()
    assert d.socket_dir is not None
    shutil.rmtree(d.socket_dir, ignore_errors=True)


@pytest.fixture
def alice_dir() -> Iterator[Path]:
    """A directory of alice's own (the stack's default token user), as her submit directory would be."""
    with user_dir("alice") as path:
        yield path


@pytest.fixture
def killed_nodes(stack: Stack) -> Iterator[list[str]]:
    """Nodes a test killed (stack.sh kill-node): revived afterwards, whatever the test's outcome."""
    nodes: list[str] = []
    yield nodes
    for node in nodes:
        stack.stack_sh("revive-node", node)
