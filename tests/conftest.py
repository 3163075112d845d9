"""Fixtures shared by store and end-to-end tests, and the directory rule for `sdk_free`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# Not test modules, so pytest would not rewrite their asserts by itself; registered before any
# test module imports them (tests/engine uses the store fixtures too).
pytest.register_assert_rewrite("tests.stores.conformance", "tests.stores.fixtures")

from tests.services import LocalCluster, need_redis_server  # noqa: E402


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One private Redis Cluster (3 primaries, 1 replica each) for every cluster test of the run.

    Started on first use (about 3 s), on free ports ≤ 55535 (the cluster bus listens on
    port + 10000), no persistence; stopped at the end of the session even when tests fail.
    Tests may move slots or fail a primary over, but leave six live nodes behind.
    """
    need_redis_server()
    cluster = LocalCluster(str(tmp_path_factory.mktemp("redis-cluster")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


SDK_FREE_DIRS = ("engine", "proxy", "stores")
"""Folders whose tests never touch the MCP SDK: the transport-free engine, the stores, and the
proxy (it relays raw JSON-RPC; its upstreams are the TypeScript SDK and a Python server that
says nothing new per mcp release). A test there that does touch the SDK says so with
`@pytest.mark.sdk`."""

_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # CI runs `sdk_free` tests once (the README leg), not again on every mcp release.
    for item in items:
        try:
            folder = Path(item.path).resolve().relative_to(_TESTS).parts[0]
        except ValueError:
            continue
        if folder in SDK_FREE_DIRS and item.get_closest_marker("sdk") is None:
            item.add_marker(pytest.mark.sdk_free)
