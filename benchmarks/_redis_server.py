"""A private `redis-server` for the benchmarks: the shared one on 6379 is never loaded with
their records or connections. Imported by the benchmark scripts (run as `python benchmarks/…`,
so this folder is on `sys.path`)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def private_redis(*options: str) -> Iterator[int]:
    """A redis-server on a free 127.0.0.1 port, no persistence, in a temporary directory, with
    `options` (e.g. "--maxclients", "2000"); yields its port, stops it on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed; this benchmark starts a private one")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", tmp,
             "--save", "", "--appendonly", "no", *options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            client = redis.Redis(port=port, socket_connect_timeout=0.2)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("private redis-server did not start") from None
                    time.sleep(0.05)
            client.close()
            yield port
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
