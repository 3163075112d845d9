"""Fixtures shared by store and end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services import LocalCluster, need_redis_server


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
