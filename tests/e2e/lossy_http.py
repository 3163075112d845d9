"""Streamable HTTP that loses answers: the server runs the call, the client never gets the reply.

An ASGI wrapper around the server's app: the first `drop` `tools/call` POSTs run to the end in
the app, their response is swallowed, and the connection is held open until the client gives
up (its read timeout), as a proxy or load balancer that lost the upstream reply would.
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from .lossy import Loss


class LossyASGI:
    def __init__(self, app: Any, loss: Loss, hold: float = 3.0) -> None:
        self.app, self.loss, self.hold = app, loss, hold

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body, more, messages = b"", True, []
        while more:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            more = message.get("more_body", False)
        replay = iter(messages)

        async def replayed() -> Any:
            for message in replay:
                return message
            return await receive()

        if self.loss.dropped >= self.loss.drop or not _is_tool_call(body):
            await self.app(scope, replayed, send)
            return
        self.loss.dropped += 1

        async def swallow(message: Any) -> None:
            return None

        await self.app(scope, replayed, swallow)  # the tool ran; the reply goes nowhere
        with anyio.move_on_after(self.hold):  # bounded, so that shutdown never waits long
            while (await receive())["type"] != "http.disconnect":
                pass


def _is_tool_call(body: bytes) -> bool:
    try:
        message = json.loads(body)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") == "tools/call"
