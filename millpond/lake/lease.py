"""One writer per pipeline across machines: a lease object in the lake's bucket, for a lake on object storage.

The local lock (lock.py, `flock`) only excludes processes that share a filesystem. Delta's S3 log store assumes one
driver per table, so on `s3a://` the pipeline lock is a lease kept in the store itself, at
`<lake>/_system/locks/<pipeline>.lease`, through conditional writes that the store decides atomically:

- acquire: create the object only if it does not exist (`If-None-Match: *`), or replace a released or lapsed one only
  if it is still the version just read (`If-Match: <etag>`). Of two contenders, one write succeeds; the other gets
  412 Precondition Failed and is refused as busy, naming the holder.
- expiry: the holder renews (a conditional replace) every third of the lease's time in a background thread. A lease
  lapses when the store's own clock says it was last written more than its time ago (the response's `Date` against
  the object's `Last-Modified`): no two machines' clocks are compared, so a crashed holder blocks the next run for
  at most MILLPOND_LEASE_SECONDS.
- fencing: each acquisition raises the lease's generation by one (it is never deleted, so the count survives
  releases). `check()`, called before each commit, is itself a conditional replace of the holder's own version:
  it fails with LeaseLost if anyone took the lease over, and when it succeeds no one can for the lease's time.
- release: a conditional replace marking the lease released (a conditional DELETE is not honoured by every server:
  s3proxy 3.0.0 deleted despite a wrong `If-Match`).

Every write carries a fresh nonce: servers compute an ETag from the content, and two identical bodies would share an
ETag, letting a stale `If-Match` succeed. The nonce also tells a holder its own write: when the client retries a PUT
whose first attempt succeeded but whose reply was lost, the retry gets 412; the lease then reads the object back, and
if it holds the very record just sent, the write was ours and its ETag is adopted (no false LeaseLost).

A process may hold several pipelines' leases at once (tests, a server running pipelines side by side): `fence()`
checks the lease of the pipeline it is given, or, given none, every lease the process holds.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from millpond import settings
from millpond.lake.lock_errors import LakeNotWritable, PipelineBusy
from millpond.lake.object_store import S3Access, S3Location, client, error_code, precondition_failed

HELD, RELEASED = "held", "released"


class LeaseLost(RuntimeError):
    """The pipeline's lease was taken over (or could not be renewed in time): this run must not commit."""


@dataclass(frozen=True)
class LeaseRecord:
    """What the lease object holds: who holds it, since when, for how long, and the fencing generation."""

    pipeline: str
    generation: int
    state: str  # HELD or RELEASED
    run_id: str
    pid: int
    host: str
    since: str
    ttl_seconds: float
    nonce: str  # new on every write, so every write has a new ETag
    holding: str = ""  # the taking's own id (PipelineLease.holding): "" in a record written before it was kept

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, body: bytes) -> LeaseRecord | None:
        try:
            data = json.loads(body)
            return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data or name != "holding"})
        except (ValueError, TypeError, KeyError):
            return None  # not a lease millpond wrote: treated as lapsed, replaced only by a conditional write

    def holder(self) -> str:
        return f"run {self.run_id} pid {self.pid} on {self.host} since {self.since}"


@dataclass(frozen=True)
class Observed:
    """The lease object as read: its record, version (ETag) and age by the store's own clock."""

    record: LeaseRecord | None
    etag: str
    age_seconds: float

    def free(self) -> bool:
        record = self.record
        return record is None or record.state == RELEASED or self.age_seconds >= record.ttl_seconds


class PipelineLease:
    """The lease of one pipeline on one lake; `acquire()`, then `check()` before each commit, then `release()`."""

    def __init__(
        self,
        lake: S3Location,
        pipeline: str,
        run_id: str,
        ttl_seconds: float | None = None,
        access: S3Access | None = None,
        renew: bool = True,
    ):
        self.location = lake.child("_system", "locks", f"{pipeline}.lease")
        self.pipeline, self.run_id = pipeline, run_id
        self.ttl_seconds = ttl_seconds if ttl_seconds is not None else settings.LEASE_SECONDS.seconds()
        if self.ttl_seconds <= 0:
            raise ValueError(f"a lease's time must be positive, got {self.ttl_seconds}")
        self._s3 = client(access)
        self._renew_in_background = renew  # False only in tests: a holder that stalls (a long GC pause)
        self.generation: int | None = None
        self.holding = uuid.uuid4().hex[:12]  # this taking's own id, even if the lease object were ever recreated
        self._etag: str | None = None
        self._since = ""
        self._valid_until = 0.0  # monotonic: no one can take the lease over before this
        self._lost: str | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.location.url

    # ------------------------------------------------------------------------------------------------- acquiring

    def acquire(self, wait_seconds: float = 0.0) -> int:
        """Take the lease (waiting up to `wait_seconds` for its holder) and return its generation, or raise
        PipelineBusy naming the holder."""
        deadline = time.monotonic() + wait_seconds
        while True:
            busy = self._try_acquire()
            if busy is None:
                break
            if time.monotonic() >= deadline:
                raise PipelineBusy(self._busy_message(busy)) from None
            time.sleep(min(1.0, max(0.1, deadline - time.monotonic())))
        if self._renew_in_background:
            self._renewer = threading.Thread(target=self._renew_loop, name=f"lease-{self.pipeline}", daemon=True)
            self._renewer.start()
        assert self.generation is not None
        return self.generation

    def _try_acquire(self) -> Observed | None:
        """None when the lease is now ours; else what holds it."""
        current = self._read()
        if current is not None and not current.free():
            return current
        last = current.record.generation if current is not None and current.record is not None else 0
        record = self._record(last + 1, HELD, since=datetime.now(UTC).isoformat())
        condition = {"IfMatch": current.etag} if current is not None else {"IfNoneMatch": "*"}
        sent = time.monotonic()
        try:
            etag = self._put(record, condition)
        except Exception as error:
            if not precondition_failed(error):
                raise
            now = self._read()
            if now is None or now.record != record:  # another contender wrote first
                return now or Observed(None, "", 0.0)
            etag = now.etag  # our own write, retried after its reply was lost
        self.generation, self._etag, self._since = record.generation, etag, record.since
        self._valid_until = sent + self.ttl_seconds
        return None

    def _busy_message(self, busy: Observed) -> str:
        holder = busy.record.holder() if busy.record is not None else "holder unknown"
        ttl = busy.record.ttl_seconds if busy.record is not None else self.ttl_seconds
        lapses = max(0.0, ttl - busy.age_seconds)
        return (
            f"pipeline {self.pipeline!r} is already running ({holder}); one writer at a time. "
            f"Fix: wait for it to finish, or pass --wait SECONDS to queue behind it (its lease {self.url} "
            f"lapses in {lapses:.0f} s if its holder stopped renewing it)"
        )

    # ------------------------------------------------------------------------------------------------- holding

    def check(self) -> int:
        """Before a commit: renew the lease with a conditional write of our own version. Returns the generation
        (the fencing token); raises LeaseLost if the lease was taken over, released or never held."""
        with self._mutex:
            if self._lost is not None:
                raise LeaseLost(self._lost)
            if self._etag is None or self.generation is None:
                raise LeaseLost(f"pipeline {self.pipeline!r}: the lease {self.url} is not held by this run")
            record = self._record(self.generation, HELD, since=self._since)
            sent = time.monotonic()
            try:
                self._etag = self._put(record, {"IfMatch": self._etag})
            except Exception as error:
                if not precondition_failed(error):
                    raise
                now = self._read()
                if now is None or now.record != record:
                    self._lost = self._lost_message(now)
                    raise LeaseLost(self._lost) from None
                self._etag = now.etag  # our own renewal, retried after its reply was lost
            self._valid_until = sent + self.ttl_seconds
            return self.generation

    def _lost_message(self, now: Observed | None) -> str:
        who = now.record.holder() if now is not None and now.record is not None else "no holder"
        generation = now.record.generation if now is not None and now.record is not None else "?"
        return (
            f"pipeline {self.pipeline!r}: run {self.run_id} lost its lease {self.url} (generation "
            f"{self.generation}); it is now generation {generation}, {who}. This run must not commit. Fix: let "
            "the new holder finish; if this run was paused or cut off longer than MILLPOND_LEASE_SECONDS, raise it"
        )

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_seconds / 3):
            try:
                self.check()
            except LeaseLost:
                return
            except Exception as error:  # the store unreachable for a moment: retried until the lease would lapse
                if time.monotonic() >= self._valid_until:
                    with self._mutex:
                        self._lost = (
                            f"pipeline {self.pipeline!r}: run {self.run_id} could not renew its lease {self.url} "
                            f"within {self.ttl_seconds:.0f} s ({type(error).__name__}: {error}); another run may "
                            "hold it now. This run must not commit. Fix: check that the object store is reachable"
                        )
                    return

    def release(self) -> None:
        """Mark the lease released so the next run need not wait for it to lapse. A lease already taken over is
        left alone; a store that cannot be reached leaves it to lapse."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=30)
        with self._mutex:
            if self._etag is None or self.generation is None or self._lost is not None:
                return
            try:
                self._put(self._record(self.generation, RELEASED, since=self._since), {"IfMatch": self._etag})
            except Exception:  # taken over or unreachable: it lapses on its own
                pass
            self._etag = None

    # ------------------------------------------------------------------------------------------------- the store

    def _record(self, generation: int, state: str, since: str) -> LeaseRecord:
        return LeaseRecord(
            pipeline=self.pipeline,
            generation=generation,
            state=state,
            run_id=self.run_id,
            pid=os.getpid(),
            host=socket.gethostname(),
            since=since,
            ttl_seconds=self.ttl_seconds,
            nonce=uuid.uuid4().hex,
            holding=self.holding,
        )

    def _put(self, record: LeaseRecord, condition: dict[str, str]) -> str:
        try:
            response = self._s3.put_object(
                Bucket=self.location.bucket,
                Key=self.location.key,
                Body=record.to_json(),
                ContentType="application/json",
                **condition,
            )
        except Exception as error:
            self._raise_if_unwritable(error)
            raise
        return str(response["ETag"])

    def _read(self) -> Observed | None:
        try:
            return _observe(self._s3, self.location)
        except Exception as error:
            self._raise_if_unwritable(error)
            raise

    def _raise_if_unwritable(self, error: Exception) -> None:
        code = error_code(error)
        if code in ("NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
            raise LakeNotWritable(
                f"cannot create the pipeline lease {self.url}: {code}. Fix: create the bucket "
                f"{self.location.bucket!r} and give the credentials in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                "read and write access to it"
            ) from None


def _observe(s3: Any, location: S3Location) -> Observed | None:
    """The lease object as the store has it now (None if never written), aged by the store's own clock."""
    try:
        response = s3.get_object(Bucket=location.bucket, Key=location.key)
    except Exception as error:
        if error_code(error) in ("NoSuchKey", "404"):
            return None
        raise
    body = response["Body"].read()
    server_now = parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"])
    age = (server_now - response["LastModified"]).total_seconds()
    return Observed(LeaseRecord.from_json(body), str(response["ETag"]), age)


def observe(url: str) -> Observed | None:
    """The lease at `url` as the store has it now, for a reader that does not hold it: an engine's batch worker
    checking that the run it belongs to still renews its lease (millpond.driver.connect_batch)."""
    return _observe(client(), S3Location.parse(url))


@contextmanager
def pipeline_lease(
    lake: str, pipeline: str, run_id: str, wait_seconds: float = 0.0, ttl_seconds: float | None = None
) -> Iterator[PipelineLease]:
    """The object-store counterpart of lock.pipeline_lock: held (and renewed) for the block, released after it."""
    lease = PipelineLease(S3Location.parse(lake), pipeline, run_id, ttl_seconds)
    lease.acquire(wait_seconds)
    with _held_mutex:
        _held[pipeline] = lease
    try:
        yield lease
    finally:
        with _held_mutex:
            if _held.get(pipeline) is lease:
                del _held[pipeline]
        lease.release()


_held: dict[str, PipelineLease] = {}  # pipeline -> the lease this process holds for it, for fence()
_held_mutex = threading.Lock()


def held(pipeline: str) -> PipelineLease | None:
    """The lease this process holds for `pipeline`, if any."""
    with _held_mutex:
        return _held.get(pipeline)


def fence(pipeline: str | None = None) -> int | None:
    """Before a commit to the lake: `check()` the lease this process holds for `pipeline` (LeaseLost if it was
    taken over), returning its generation; None where there is none to check (a local lake, whose `flock` cannot be
    lost). Without a pipeline, every lease the process holds is checked (a run's process holds one, its own) and
    the generation returned is that of the last one checked."""
    with _held_mutex:
        leases = list(_held.values()) if pipeline is None else [_held[pipeline]] if pipeline in _held else []
    generation = None
    for lease in leases:
        generation = lease.check()
    return generation
