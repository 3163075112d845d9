"""mcp 2.x serves both eras: a retry in the other era replays, re-enveloped for that era."""

from __future__ import annotations

import pytest

from .harness import LEGACY, LINE, MODERN, http_wire, make_app, serve_http

pytestmark = pytest.mark.skipif(LINE != 2, reason="two protocol eras exist on mcp 2.x")
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


@pytest.mark.parametrize(("first_era", "retry_era"), [(LEGACY, MODERN), (MODERN, LEGACY)])
async def test_retry_in_the_other_era_replays(first_era: str, retry_era: str) -> None:
    app = make_app(auth=True, stateless=True)
    params = {"name": "report", "arguments": {"n": 4}, "idempotencyKey": "k-era"}
    with serve_http(app, stateless=True) as url:
        async with http_wire(url, first_era, token="tok-alice") as first_wire:
            first = (await first_wire.call(params))["result"]
        async with http_wire(url, retry_era, token="tok-alice") as retry_wire:
            again = (await retry_wire.call(params))["result"]
        async with http_wire(url, retry_era, token="tok-alice") as native_wire:
            native = (await native_wire.call({**params, "idempotencyKey": "k-native"}))["result"]
    assert app.count("report") == 2  # k-era once, k-native once
    # The replay has exactly the shape a fresh answer in the retry's era has...
    assert set(again) == set(native)
    assert again["structuredContent"] == first["structuredContent"] == {"n": 4, "double": 8}
    assert again["content"] == first["content"]
    if retry_era == MODERN:
        assert again["resultType"] == "complete" and SERVER_INFO in again["_meta"]
    else:
        assert "resultType" not in again and SERVER_INFO not in again.get("_meta", {})
