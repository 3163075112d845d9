"""Owner tokens (the fencing of every claim): unique per execution, in a forked worker too."""

from __future__ import annotations

import os
import sys
import time

import pytest

from idemtools.engine import claimed_at, new_owner


def test_owner_tokens_are_unique_and_carry_their_claim_time() -> None:
    now = time.time()
    owners = [new_owner(now) for _ in range(1000)]  # several batches of spare random parts
    assert len(set(owners)) == 1000
    assert all(len(o) == 32 and int(o, 16) >= 0 for o in owners)
    assert {claimed_at(o) for o in owners} == {int(now * 1000) / 1000}


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* fork:DeprecationWarning")  # 3.12+, threads
def test_a_forked_worker_never_reuses_its_parents_spare_random_parts() -> None:
    now = time.time()
    new_owner(now)  # the parent now holds spare random parts
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a server worker forked after the parent made a claim
        try:
            os.write(write, "".join(new_owner(now)[12:] for _ in range(8)).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = "".join(new_owner(now)[12:] for _ in range(8))
    assert len(child) == len(parent) == 160
    assert child != parent, "the child handed out the parent's owner tokens"
