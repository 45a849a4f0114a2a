"""A real S3 API on loopback for the tests: moto's server mode, one per test session.

Use it from a test module with ``from s3server import s3  # noqa: F401`` (a session-scoped
fixture). It starts the server on 127.0.0.1 with a free port, creates a bucket, and sets ONLY
the standard AWS environment variables, so the code under test finds the endpoint the way a
user's job would: the driver reads them, Spark's Python workers inherit them (subprocesses the
test starts too). Everything is stopped and restored afterwards.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import pytest

BUCKET = "logreplay-test"
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}


@dataclass
class S3:
    endpoint: str
    bucket: str

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key.lstrip('/')}"

    def filesystem(self):
        from decoders.filesystems import s3_filesystem

        return s3_filesystem()

    def upload(self, local_root, key: str) -> str:
        """Copy a local directory tree under ``key``; its URI."""
        fs = self.filesystem()
        for folder, _dirs, names in os.walk(local_root):
            for name in names:
                src = os.path.join(folder, name)
                rel = os.path.relpath(src, local_root).replace(os.sep, "/")
                with open(src, "rb") as f, fs.open_output_stream(f"{self.bucket}/{key}/{rel}") as o:
                    o.write(f.read())
        return self.uri(key)

    def keys(self, prefix: str) -> dict[str, int]:
        """Every object under ``prefix``: key (relative to the prefix) -> size."""
        from pyarrow import fs as pafs

        root = f"{self.bucket}/{prefix.strip('/')}"
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        return {
            i.path[len(root) + 1 :]: i.size
            for i in self.filesystem().get_file_info(selector)
            if i.type == pafs.FileType.File
        }

    def read(self, key: str) -> bytes:
        with self.filesystem().open_input_stream(f"{self.bucket}/{key}") as f:
            return f.read()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3():
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in [*ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(ENV, AWS_ENDPOINT_URL=endpoint)
    try:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name=ENV["AWS_REGION"]).create_bucket(
            Bucket=BUCKET
        )
        yield S3(endpoint, BUCKET)
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
