"""What the S3 fixtures of tests/conftest.py hand a test: one real s3proxy server per test session (per pytest-xdist
worker, `s3_server`), and a fresh bucket per test with the standard AWS_* variables set to reach it (`s3_bucket`).

A server that cannot start fails the test that asked for it, naming the fix (`make s3proxy`): never a skip.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from millpond.dev.s3_server import S3Server
from millpond.lake.object_store import S3Access, S3Location, client


@dataclass(frozen=True)
class Bucket:
    """A test's own bucket on the session's server, and a boto3 client for checking what landed in it."""

    name: str
    server: S3Server

    @property
    def access(self) -> S3Access:
        return S3Access.from_mapping(self.server.env())

    def location(self, key: str = "") -> S3Location:
        return S3Location(self.name, key.strip("/"))

    def client(self) -> Any:  # a boto3 client: its class is generated at run time
        return client(self.access)

    def put_files(self, files: list[Path], prefix: str, root: Path | None = None) -> None:
        """Local files into the bucket under `prefix` (landing them for a run): each by its name, or by its path
        relative to `root` (layout folders kept)."""
        s3 = self.client()
        for path in files:
            name = path.relative_to(root).as_posix() if root else path.name
            s3.put_object(Bucket=self.name, Key=f"{prefix.strip('/')}/{name}", Body=path.read_bytes())

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def new_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A new bucket, and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_ENDPOINT_URL/AWS_REGION set for the test."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return Bucket(name, s3_server)
