"""Filesystems: one resolution of a path or URI to a pyarrow filesystem, for dumps read by the
decoder and outputs written by the jobs alike.

Local paths and `file://` stay on the local disk (read with positional reads by the decoder);
`s3://`, `gs://`, `hdfs://` go through pyarrow's own filesystems; other schemes (`memory://`,
...) through fsspec. pip's PySpark has no Hadoop S3 connector, so this module, running in the
driver and in Spark's Python workers, is how the project reaches object storage.

S3 settings come from the standard AWS environment variables (`AWS_ENDPOINT_URL` or
`AWS_ENDPOINT_URL_S3`, `AWS_REGION` or `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`); a job's `storage.s3.*` configuration keys are
exported into those variables (:func:`export_s3_settings`). The endpoint is passed to
`S3FileSystem` explicitly: a directly built `S3FileSystem()` does not read `AWS_ENDPOINT_URL`.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pyarrow.fs as pafs

# configuration key (storage.s3.<key>) -> the environment variable it sets
S3_ENV = {
    "endpoint_url": "AWS_ENDPOINT_URL",
    "region": "AWS_REGION",
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
}
# the variables Spark's Python workers need to reach the same store as the driver
FORWARDED_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


def resolve(root: str) -> tuple[pafs.FileSystem | None, str]:
    """(filesystem, path) for a local path or a URI; None stands for the local disk."""
    if "://" not in root:
        return None, os.path.abspath(root)
    if root.startswith("file://"):
        return None, pafs.LocalFileSystem().normalize_path(root[len("file://") :]) or "/"
    if root.startswith(("s3://", "s3a://")):
        split = urlsplit(root)
        return s3_filesystem(), f"{split.netloc}{split.path}".rstrip("/") or split.netloc
    try:
        fs, path = pafs.FileSystem.from_uri(root)
        return fs, path
    except (ValueError, OSError):  # ArrowInvalid is a ValueError
        import fsspec  # schemes pyarrow does not know (memory://, ...) through fsspec

        protocol, path = root.split("://", 1)
        handler = pafs.FSSpecHandler(fsspec.filesystem(protocol))
        return pafs.PyFileSystem(handler), "/" + path.lstrip("/") if protocol == "memory" else path


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """Like :func:`resolve`, with the local disk as a pyarrow LocalFileSystem (for writers)."""
    fs, path = resolve(root)
    return (fs if fs is not None else pafs.LocalFileSystem()), path


def is_local(root: str) -> bool:
    return "://" not in root or root.startswith("file://")


def s3_filesystem() -> pafs.S3FileSystem:
    """An S3 filesystem configured from the AWS environment variables, endpoint included."""
    env = os.environ
    kwargs: dict = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        split = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = split.netloc + split.path.rstrip("/")
        kwargs["scheme"] = split.scheme or "https"
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        kwargs["access_key"] = env["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            kwargs["session_token"] = env["AWS_SESSION_TOKEN"]
    return pafs.S3FileSystem(**kwargs)


def export_s3_settings(settings: dict | None) -> dict[str, str]:
    """Set the AWS variables from `storage.s3` keys (a key given wins over the environment);
    return the variables Spark's Python workers must be given (see :data:`FORWARDED_ENV`)."""
    for key, var in S3_ENV.items():
        if (settings or {}).get(key):
            os.environ[var] = str(settings[key])
    return {var: os.environ[var] for var in FORWARDED_ENV if os.environ.get(var)}
