"""The per-tool metadata builder (server) and reader (client) agree, and the reader is strict.

`_meta["io.github.idemtools/idempotency"]` in `tools/list`. The builder lives in
`idemtools.policy` (transport-free, shared by every adapter); `ToolIdempotency.from_meta` reads
what any server sent, so a malformed value must read as "no metadata", never as a guarantee.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools import Policy, by_auth_subject, by_client_id, local_user, per_session, scope, shared
from idemtools.client import ToolIdempotency
from idemtools.policy import TOOL_META_KEY, tool_metadata
from tests.budget import examples


@scope("per tenant")
def per_tenant(ctx: Any) -> str:
    return "t"


SCOPES = {
    "auth_subject": by_auth_subject,
    "client_id": by_client_id,
    "session": per_session,
    "shared": shared,
    "local_user": local_user,
    "custom": per_tenant,
    "composite": by_client_id | shared,
}


@settings(max_examples=examples(200), deadline=None)
@given(
    st.floats(min_value=1e-3, max_value=1e9) | st.timedeltas(min_value=timedelta(seconds=1)),
    st.sampled_from(sorted(SCOPES)),
)
def test_builder_and_reader_round_trip(retention: float | timedelta, kind: str) -> None:
    policy = Policy.of(retention=retention, scope=SCOPES[kind])
    meta = {"other/key": 1, TOOL_META_KEY: tool_metadata(policy)}
    info = ToolIdempotency.from_meta(meta)
    assert info is not None
    assert info.scope == kind
    assert isinstance(info.retention, int)
    assert info.retention == math.floor(policy.retention)  # never more than is kept
    assert info.retention <= policy.retention < info.retention + 1


def test_plain_function_scope_is_custom() -> None:
    def by_team(ctx: Any) -> str:
        return "team"

    assert tool_metadata(Policy.of(scope=by_team)) == {
        "retentionSeconds": 86400,
        "scope": "custom",
        "keySources": ["sep"],
    }


MALFORMED = st.one_of(
    st.none(),
    st.integers(),
    st.text(),
    st.lists(st.integers()),
    st.fixed_dictionaries({}),
    st.fixed_dictionaries({TOOL_META_KEY: st.none() | st.text() | st.integers()}),
    st.fixed_dictionaries(
        {
            TOOL_META_KEY: st.fixed_dictionaries(
                {
                    "retentionSeconds": st.none()
                    | st.booleans()
                    | st.floats()
                    | st.text()
                    | st.integers(max_value=-1),
                    "scope": st.text(),
                }
            )
        }
    ),
)


@settings(max_examples=examples(300), deadline=None)
@given(MALFORMED)
def test_malformed_metadata_reads_as_none(meta: object) -> None:
    assert ToolIdempotency.from_meta(meta) is None
