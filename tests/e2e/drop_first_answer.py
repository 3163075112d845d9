"""A stdio relay that loses the first `tools/call` answer: the tool ran, its answer never came.

    python drop_first_answer.py MARKER SERVER_COMMAND...

Starts SERVER_COMMAND, passes the client's messages to it and its messages back, one JSON-RPC
message a line, except the answer to the first `tools/call`: that one is swallowed and the
relay keeps the connection open, as a network that lost a reply does. MARKER is a file the relay
creates when it drops the answer; a relay that finds it passes everything, so a client that
starts a new server process per call (langchain-mcp-adapters) loses only its first answer.
Standard library only: it must start fast and touch no SDK.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


def _message(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def main() -> int:
    marker = Path(sys.argv[1])
    server = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    to_drop: list[Any] = []  # the id of the first tools/call, once the client sent it
    dropping = not marker.exists()

    def client_to_server() -> None:
        assert server.stdin is not None
        for line in sys.stdin.buffer:
            message = _message(line)
            if (
                dropping
                and not to_drop
                and isinstance(message, dict)
                and message.get("method") == "tools/call"
            ):
                to_drop.append(message.get("id"))
            server.stdin.write(line)
            server.stdin.flush()
        server.stdin.close()

    threading.Thread(target=client_to_server, daemon=True).start()
    dropped = False
    for line in server.stdout:
        message = _message(line)
        if (
            not dropped
            and to_drop
            and isinstance(message, dict)
            and "method" not in message
            and message.get("id") == to_drop[0]
        ):
            dropped = True
            marker.touch()
            continue  # the tool ran; its answer is lost on the way
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
