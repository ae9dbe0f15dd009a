"""A real S3-compatible HTTP server for the URL-store tests: `moto_server` in its own process on 127.0.0.1.

A separate process (not moto's in-process mock) because dask worker processes write to it too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MOTO = Path(sys.executable).parent / "moto_server"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]

    def env(self) -> dict[str, str]:
        """The standard AWS variables pointing at this server."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def make_bucket(self, name: str) -> None:
        import fsspec

        fsspec.filesystem("s3", endpoint_url=self.endpoint, key="testing", secret="testing",
                          skip_instance_cache=True).mkdir(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def moto_server(log: Path) -> Iterator[S3Server]:
    """Start `moto_server` on a free port, wait until it answers, stop it on exit."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen([str(MOTO), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"moto_server did not start: {tail}") from None
                time.sleep(0.1)
        yield S3Server(endpoint=f"http://127.0.0.1:{port}", process=proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block (worker processes started in it inherit them)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
