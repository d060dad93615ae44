"""Object-store locations and clients: an `s3a://` (or `s3://`) lake, reached with the standard `AWS_*` variables.

Where the credentials come from is settled once here: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and
`AWS_SESSION_TOKEN`), `AWS_ENDPOINT_URL` for an S3-compatible server (path-style addressing, plain http allowed) and
`AWS_REGION`. Never from a spec; `S3Access` never shows the secret in its repr, and nothing here prints or logs it.

Clients of the same kind for every piece that talks to the store without a JVM: boto3 (the lease's conditional
writes, which pyarrow's S3 filesystem does not offer), pyarrow's `S3FileSystem` (listings, reads) and delta-rs's
storage options. Each sends checksums only when the operation requires them: current AWS SDKs add CRC headers by
default that S3-compatible servers such as s3proxy reject with NotImplemented.
"""

from __future__ import annotations

import fnmatch
import functools
import io
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

# Imported inside functions: boto3 and pyarrow's S3 filesystem only when a lake is on the store: a folder lake never
# pays for them.

SCHEMES = ("s3a", "s3")
DELETE_BATCH = 1000  # the most keys one DeleteObjects request takes


class ObjectStoreError(RuntimeError):
    """An object-store location or its access cannot be used; the message names the fix."""


def error_code(error: Exception) -> str:
    """The S3 error code of a botocore error (`NoSuchKey`, `PreconditionFailed`), else its HTTP status, else ""."""
    response: dict[str, Any] = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) or str(
        response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    )


def precondition_failed(error: Exception) -> bool:
    """Whether a conditional write (`If-Match`, `If-None-Match`) was refused because the object changed."""
    return error_code(error) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def is_object_store(location: str | os.PathLike[str]) -> bool:
    """Whether a lake root (or any location) names an object store rather than a local or mounted folder."""
    return str(location).split("://", 1)[0].lower() in SCHEMES if "://" in str(location) else False


@dataclass(frozen=True)
class S3Location:
    """`s3a://bucket/key` split; `s3://` is accepted as the same store (Spark reaches both through s3a)."""

    bucket: str
    key: str  # no leading or trailing slash; "" for the bucket's root

    @classmethod
    def parse(cls, url: str) -> S3Location:
        scheme, _, rest = str(url).partition("://")
        if scheme.lower() not in SCHEMES or not rest:
            raise ObjectStoreError(f"{url!r} is not an object-store location. Fix: write it as s3a://<bucket>/<prefix>")
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise ObjectStoreError(f"{url!r} names no bucket. Fix: write it as s3a://<bucket>/<prefix>")
        return cls(bucket, key.strip("/"))

    def child(self, *parts: str) -> S3Location:
        return S3Location(self.bucket, "/".join(p.strip("/") for p in (self.key, *parts) if p.strip("/")))

    @property
    def url(self) -> str:
        """The s3a:// form Spark and hadoop-aws read."""
        return f"s3a://{self.bucket}/{self.key}" if self.key else f"s3a://{self.bucket}"

    @property
    def arrow_path(self) -> str:
        """The `bucket/key` form pyarrow's S3FileSystem takes."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True)
class S3Access:
    """Where the store is and how to sign for it, from the standard variables; the secret never shows in a repr."""

    access_key: str | None
    secret_key: str | None = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoint: str | None = None  # None: AWS S3 itself, the region's endpoint
    region: str = "us-east-1"

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> S3Access:
        def get(name: str) -> str | None:
            return (env.get(name) or "").strip() or None

        access_key, secret_key = get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")
        if (access_key is None) != (secret_key is None):
            missing = "AWS_SECRET_ACCESS_KEY" if secret_key is None else "AWS_ACCESS_KEY_ID"
            raise ObjectStoreError(f"{missing} is not set while its pair is. Fix: set both, or neither (an IAM role)")
        endpoint = get("AWS_ENDPOINT_URL_S3") or get("AWS_ENDPOINT_URL")
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ObjectStoreError(
                f"AWS_ENDPOINT_URL={endpoint!r} has no scheme. Fix: write it as http://host:port or https://host"
            )
        return cls(
            access_key,
            secret_key,
            get("AWS_SESSION_TOKEN"),
            endpoint,
            get("AWS_REGION") or get("AWS_DEFAULT_REGION") or "us-east-1",
        )

    @classmethod
    def from_environment(cls) -> S3Access:
        return cls.from_mapping(os.environ)

    @property
    def http(self) -> bool:
        """Plain http: allowed only when an endpoint says so (an S3-compatible server on a private network)."""
        return self.endpoint is not None and self.endpoint.startswith("http://")

    @property
    def host(self) -> str | None:
        """The endpoint without its scheme (what pyarrow and hadoop-aws's endpoint option take), or None."""
        return self.endpoint.split("://", 1)[1].rstrip("/") if self.endpoint else None


def client(access: S3Access | None = None) -> Any:
    """A boto3 S3 client: path-style addressing when an endpoint is given, checksums only when required."""
    import boto3
    from botocore.config import Config

    access = access or S3Access.from_environment()
    config = Config(
        region_name=access.region,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"addressing_style": "path" if access.endpoint else "auto"},
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=5,
        read_timeout=30,
    )
    s3 = boto3.session.Session().client(
        "s3",
        aws_access_key_id=access.access_key,
        aws_secret_access_key=access.secret_key,
        aws_session_token=access.session_token,
        endpoint_url=access.endpoint,
        config=config,
    )
    s3.meta.events.register("before-call.s3.DeleteObjects", _content_md5_checksum)
    return s3


def _content_md5_checksum(params: dict[str, Any], **_: Any) -> None:
    """DeleteObjects must carry a checksum: botocore sends a CRC32 header, which S3-compatible servers such as
    s3proxy 3.0.0 reject (NotImplemented); Content-MD5, which AWS S3 also accepts, is what they take."""
    from botocore.utils import conditionally_calculate_md5

    checksum = params.get("context", {}).get("checksum", {})
    checksum.pop("request_algorithm", None)
    checksum.pop("request_algorithm_header", None)
    conditionally_calculate_md5(params)


def arrow_filesystem(access: S3Access | None = None) -> S3FileSystem:
    """pyarrow's S3 filesystem for the no-JVM listings and reads (paths are `bucket/key`)."""
    from pyarrow.fs import S3FileSystem

    access = access or S3Access.from_environment()
    return S3FileSystem(
        access_key=access.access_key,
        secret_key=access.secret_key,
        session_token=access.session_token,
        region=access.region,
        endpoint_override=access.host,
        scheme="http" if access.http else "https",
        force_virtual_addressing=False,
        check_directory_existence_before_creation=False,
    )


def delta_rs_options(access: S3Access | None = None) -> dict[str, str]:
    """delta-rs (`deltalake`) storage options. Commits are conditional PUTs (`aws_conditional_put=etag`: a log
    entry is created only if absent) rather than delta-rs's default of refusing S3 without a DynamoDB lock; AWS S3,
    MinIO and s3proxy 3.0.0 honour them."""
    access = access or S3Access.from_environment()
    options = {"AWS_REGION": access.region, "aws_conditional_put": "etag"}
    if access.access_key and access.secret_key:
        options |= {"AWS_ACCESS_KEY_ID": access.access_key, "AWS_SECRET_ACCESS_KEY": access.secret_key}
    if access.session_token:
        options["AWS_SESSION_TOKEN"] = access.session_token
    if access.endpoint:
        options |= {"AWS_ENDPOINT_URL": access.endpoint, "AWS_ALLOW_HTTP": str(access.http).lower()}
    return options


@functools.lru_cache(maxsize=4)
def _cached_filesystem(access: S3Access) -> S3FileSystem:
    return arrow_filesystem(access)


@functools.lru_cache(maxsize=4)
def _cached_client(access: S3Access) -> Any:
    return client(access)


@dataclass(frozen=True)
class ObjectStat:
    """What the lake modules read of `os.stat_result`, for an object."""

    st_size: int
    st_mtime_ns: int

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9


class S3Path:
    """A lake location on object storage with the few `pathlib.Path` operations the lake modules use, so they read
    and write a local lake and an `s3a://` lake with the same code.

    A "folder" is a key prefix: it exists when some object lies under it; `mkdir` does nothing. `write_text` is one
    PUT, which S3 makes visible whole or not at all, so it is already atomic; `replace` is a copy then a delete (the
    target appears whole). `str()` is the `s3a://` URL Spark reads. Every call goes to the store (pyarrow's S3
    filesystem, one per process and access), with the standard `AWS_*` variables.
    """

    __slots__ = ("location", "_listed")

    def __init__(self, location: S3Location | str, listed: Any = None) -> None:
        self.location = location if isinstance(location, S3Location) else S3Location.parse(location)
        self._listed = listed  # the FileInfo a listing gave: what it is, its size and time, with no request more

    # --- names, as PurePath
    def __truediv__(self, part: str | os.PathLike[str]) -> S3Path:
        return S3Path(self.location.child(*str(part).split("/")))

    def __str__(self) -> str:
        return self.location.url

    def __repr__(self) -> str:
        return f"S3Path({self.location.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, S3Path) and other.location == self.location

    def __hash__(self) -> int:
        return hash(self.location)

    def __lt__(self, other: S3Path) -> bool:
        return self.location.url < other.location.url

    @property
    def name(self) -> str:
        return self.location.key.rsplit("/", 1)[-1]

    @property
    def parent(self) -> S3Path:
        return S3Path(S3Location(self.location.bucket, self.location.key.rpartition("/")[0]))

    @property
    def url(self) -> str:
        return self.location.url

    def with_name(self, name: str) -> S3Path:
        return self.parent / name

    def relative_to(self, other: S3Path) -> str:
        prefix = other.location.key + "/" if other.location.key else ""
        if other.location.bucket != self.location.bucket or not self.location.key.startswith(prefix):
            raise ValueError(f"{self} is not under {other}")
        return self.location.key[len(prefix) :]

    # --- the store
    @property
    def arrow_filesystem(self) -> S3FileSystem:  # listings (millpond.lake.storage.listing)
        return _cached_filesystem(S3Access.from_environment())

    @property
    def _s3(self) -> Any:  # reads and writes: single requests, checksums only when required (pyarrow's uploads
        return _cached_client(S3Access.from_environment())  # are multipart, which s3proxy refuses)

    def _info(self) -> Any:
        return self._listed or self.arrow_filesystem.get_file_info(self.location.arrow_path)

    def exists(self) -> bool:
        from pyarrow.fs import FileType

        return bool(self._info().type != FileType.NotFound)

    def is_file(self) -> bool:
        from pyarrow.fs import FileType

        return bool(self._info().type == FileType.File)

    def is_dir(self) -> bool:
        from pyarrow.fs import FileType

        return bool(self._info().type == FileType.Directory)

    def stat(self) -> ObjectStat:
        from pyarrow.fs import FileType

        info = self._info()
        if info.type == FileType.NotFound:
            raise FileNotFoundError(str(self))
        return ObjectStat(int(info.size or 0), int(info.mtime_ns or 0))

    def iterdir(self) -> Iterator[S3Path]:
        """The objects and prefixes one level down (nothing if there are none, as the store cannot tell)."""
        from pyarrow.fs import FileSelector

        base = self.location.arrow_path
        for info in self.arrow_filesystem.get_file_info(FileSelector(base, allow_not_found=True)):
            name = info.path[len(base) :].strip("/")
            if name:
                yield S3Path(self.location.child(name), info)

    def glob(self, pattern: str) -> Iterator[S3Path]:
        """One level only (`*.json`, `[0-9]*`): all the lake modules ask of a folder."""
        return (p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern))

    def rglob(self, pattern: str) -> Iterator[S3Path]:
        from pyarrow.fs import FileSelector

        base = self.location.arrow_path
        for info in self.arrow_filesystem.get_file_info(FileSelector(base, allow_not_found=True, recursive=True)):
            name = info.path[len(base) :].strip("/")
            if name and fnmatch.fnmatchcase(name.rsplit("/", 1)[-1], pattern):
                yield S3Path(self.location.child(name), info)

    def read_bytes(self) -> bytes:
        body, etag = self.read_versioned()
        if etag is None:
            raise FileNotFoundError(str(self))
        return body

    def read_text(self, encoding: str | None = "utf-8") -> str:
        return self.read_bytes().decode(encoding or "utf-8")

    def read_versioned(self) -> tuple[bytes, str | None]:
        """The object's content and version (ETag), for a `write_if`; (b"", None) when there is no object."""
        try:
            response = self._s3.get_object(Bucket=self.location.bucket, Key=self.location.key)
        except Exception as error:
            if error_code(error) in ("NoSuchKey", "404"):
                return b"", None
            raise
        return bytes(response["Body"].read()), str(response["ETag"])

    def write_if(self, data: bytes, etag: str | None) -> bool:
        """Write `data` only if the object is still the version `etag` (`If-Match`), or, with None, still absent
        (`If-None-Match: *`). False when someone wrote it in between: read it again and redo the change."""
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            self._s3.put_object(Bucket=self.location.bucket, Key=self.location.key, Body=data, **condition)
        except Exception as error:
            if precondition_failed(error):
                return False
            raise
        return True

    def write_bytes(self, data: bytes) -> int:
        self._s3.put_object(Bucket=self.location.bucket, Key=self.location.key, Body=data)
        return len(data)

    def write_text(self, text: str, encoding: str | None = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding or "utf-8"))

    def open(self, mode: str = "r", encoding: str | None = None, newline: str | None = None) -> IO[Any]:
        """Reading only (`r`, `rb`): a lake module that writes does it in one `write_text`."""
        if mode not in ("r", "rb"):
            raise ValueError(f"S3Path.open({mode!r}): object storage is read whole or written whole")
        data = self.read_bytes()
        if mode == "rb":
            return io.BytesIO(data)
        return io.StringIO(data.decode(encoding or "utf-8"), newline=newline)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: a prefix exists once an object lies under it."""

    def unlink(self, missing_ok: bool = False) -> None:
        if not missing_ok and not self.exists():
            raise FileNotFoundError(str(self))
        self._s3.delete_object(Bucket=self.location.bucket, Key=self.location.key)  # a missing key is no error

    def replace(self, target: S3Path) -> S3Path:
        source = {"Bucket": self.location.bucket, "Key": self.location.key}
        self._s3.copy_object(Bucket=target.location.bucket, Key=target.location.key, CopySource=source)
        self.unlink(missing_ok=True)
        return target

    def remove_tree(self, batch_size: int = DELETE_BATCH) -> None:
        """Every object under this prefix (a missing prefix is fine), directory markers included: one DeleteObjects
        request per `batch_size` keys (at most 1000, S3's limit), each response checked for keys it failed to
        delete."""
        if not 0 < batch_size <= DELETE_BATCH:
            raise ValueError(f"remove_tree: batch_size must be 1 to {DELETE_BATCH}, got {batch_size}")
        pages = self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.location.bucket, Prefix=self.location.key + "/"
        )
        keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        for start in range(0, len(keys), batch_size):
            self._delete_objects(keys[start : start + batch_size])
        self.unlink(missing_ok=True)

    def _delete_objects(self, keys: list[str]) -> None:
        response = self._s3.delete_objects(
            Bucket=self.location.bucket, Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True}
        )
        errors = response.get("Errors") or []
        if errors:
            first = errors[0]
            raise ObjectStoreError(
                f"could not delete s3a://{self.location.bucket}/{first.get('Key')} ({first.get('Code')}: "
                f"{first.get('Message')}) while removing {self} ({len(errors)} key(s) of one request failed). "
                f"Fix: give the credentials in AWS_ACCESS_KEY_ID delete access to the bucket "
                f"{self.location.bucket!r}, then run again"
            )


def read_modify_write(target: S3Path, change: Callable[[bytes], bytes], tries: int = 20) -> None:
    """Replace the object at `target` by `change(its content)` (b"" when absent) with a conditional write, read
    again and redone when another writer wrote it in between, so no writer's change is lost. After `tries` lost
    races (each followed by a short random pause), ObjectStoreError naming the object."""
    for attempt in range(tries):
        current, etag = target.read_versioned()
        if target.write_if(change(current), etag):
            return
        time.sleep(random.uniform(0.01, 0.05 * (attempt + 1)))
    raise ObjectStoreError(
        f"{target} changed under every one of {tries} conditional writes (other writers kept writing it). "
        "Fix: run again; if it persists, fewer writers at once, e.g. fewer pipelines gating at the same moment"
    )
