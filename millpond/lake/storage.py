"""What differs between a folder lake and an object-store lake when files are listed, written whole, appended to,
built by a tool that writes local files, or removed: decided here, from the path's kind, and nowhere above.

A `LakePath` (millpond.lake.paths) is a `pathlib.Path` or an `S3Path` with the same few read operations, so most
code reads either lake alike. What cannot be alike is here:

- listing a folder's files with sizes and times as Spark's file source sees them (names starting with `.` or `_`
  hidden, and nothing under a hidden folder): on disk a walk that never enters a hidden folder or follows a linked
  one (so a link loop or an unreadable hidden folder cannot stop it); on the store one recursive listing through
  pyarrow's `S3FileSystem`;
- writing a file whole (a reader sees the old content or the new): a rename on disk, one PUT on the store;
- appending a line: `O_APPEND` on disk; on the store a read and a conditional rewrite of the version read, redone
  when another writer came in between (object_store.read_modify_write, the conditional writes the lease uses too);
- a folder a tool fills with local files (Great Expectations' Data Docs, the sample generators): the folder itself
  on disk; on the store a local folder whose new files are put into the lake when the tool is done;
- removing a folder and all under it;
- a folder's name in OpenLineage's dataset naming.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from millpond.lake.object_store import S3Path, delta_rs_options, read_modify_write

# Imported inside functions: pyarrow's filesystem only for an object-store listing.

LakePath = Path | S3Path  # as millpond.lake.paths names it (which this module sits below)

Listed = tuple[str, int, int]  # (path relative to the listed folder, size in bytes, modification time in ns)


def hidden(name: str) -> bool:
    """A name Spark's file source skips, and what lies under it: writers land files under such a temporary name."""
    return name.startswith((".", "_"))


def listing(folder: LakePath) -> list[Listed]:
    """Every file Spark's file source would list under `folder`, sorted: a name part starting with `.` or `_` is
    hidden, as Spark hides it; a missing folder lists as empty. No JVM."""
    if not isinstance(folder, S3Path):
        return _walk(folder)
    from pyarrow.fs import FileSelector, FileType

    base = folder.location.arrow_path
    found = []
    for info in folder.arrow_filesystem.get_file_info(FileSelector(base, allow_not_found=True, recursive=True)):
        relative = info.path[len(base) :].strip("/")
        if info.type != FileType.File or not relative:
            continue
        if any(map(hidden, relative.split("/"))):
            continue
        found.append((relative, int(info.size or 0), int(info.mtime_ns or 0)))
    return sorted(found)


def _walk(root: Path) -> list[Listed]:
    """A folder lake's listing: hidden folders are never entered (Spark prunes them by name before listing them),
    linked folders never followed (os.walk's default), linked files read through."""
    top = os.path.normpath(root)
    prefix = top.rstrip(os.sep) + os.sep  # os.walk's folders start with it: a name under it is a slice, not relpath's
    found = []
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not hidden(d)]
        under = folder[len(prefix) :] if folder != top else ""
        for name in files:
            if not hidden(name):
                stat_ = os.stat(os.path.join(folder, name))
                found.append((os.path.join(under, name) if under else name, stat_.st_size, stat_.st_mtime_ns))
    return sorted(found)


def present(locations: list[str], folders: list[LakePath]) -> list[str]:
    """Of `locations` (local paths or `s3a://` URLs, as paths.from_uri gives them), those that exist now. On the
    store, one listing per folder in `folders` (which hold them all) rather than a request per file."""
    if not any(isinstance(folder, S3Path) for folder in folders):
        return [location for location in locations if Path(location).is_file()]
    listed = {f"{str(folder).rstrip('/')}/{relative}" for folder in folders for relative, _, _ in listing(folder)}
    return [location for location in locations if location in listed]


def write_whole(path: LakePath, text: str) -> None:
    """Readers see the old text or the new, never a part: a rename on disk, one PUT on the store."""
    if isinstance(path, S3Path):
        path.write_text(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # one per writer: two writers never share a part
    tmp.write_text(text)
    tmp.replace(path)


def append_line(path: LakePath, line: str) -> None:
    """`line` (ending in a newline) added at the end of `path`, with no writer's line lost to another's: one short
    O_APPEND write on disk; on the store (which cannot append) a conditional rewrite, redone if another writer
    wrote in between."""
    if isinstance(path, S3Path):
        read_modify_write(path, lambda previous: previous + line.encode("utf-8"))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)


@contextmanager
def local_folder(folder: LakePath, kept_as: str = "", stand_ins: bool = False) -> Iterator[Path]:
    """A local folder for a tool that writes files into `folder`: on a folder lake the folder itself. On the store a
    local folder (with `kept_as`, one per lake folder and user kept between runs, so what the tool copies once
    stays; else a temporary one) whose files written in the block are put into `folder` when the block ends
    without an error, one PUT each, so a reader sees each file whole or not at all. With `stand_ins` the local
    folder first holds an empty file named as each file already in `folder` (a generator numbers new files after
    them); those are never put."""
    if not isinstance(folder, S3Path):
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="millpond-staging-") as temporary:
        local = _kept_folder(folder, kept_as) if kept_as else Path(temporary)
        existing = {entry.name for entry in folder.iterdir()} if stand_ins else set()
        for name in existing:
            (local / name).touch()
        started = time.time() - 1  # file times may round down
        yield local
        for file in sorted(local.rglob("*")):
            relative = file.relative_to(local).as_posix()
            if file.is_file() and relative not in existing and not file.name.startswith("."):
                if file.stat().st_mtime >= started:
                    (folder / relative).write_bytes(file.read_bytes())


def _kept_folder(folder: S3Path, purpose: str) -> Path:
    """A local folder of this user's for `folder` of the lake, kept between runs; a temporary one if the kept one
    is not safely this user's (another user made it first, or left a link there)."""
    key = hashlib.sha256(str(folder).encode()).hexdigest()[:16]
    local = Path(tempfile.gettempdir()) / f"millpond-{purpose}-{os.getuid()}-{key}"
    local.mkdir(mode=0o700, exist_ok=True)
    found = local.lstat()
    if stat.S_ISLNK(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        return Path(tempfile.mkdtemp(prefix=f"millpond-{purpose}-"))
    return local


def remove_tree(path: LakePath) -> None:
    """A folder and everything under it, if it is there."""
    if isinstance(path, S3Path):
        path.remove_tree()
    else:
        shutil.rmtree(path, ignore_errors=True)


def location(folder: LakePath, relative: str) -> str:
    """A file's location as paths.from_uri gives a URI Spark logged: an absolute local path, or an `s3a://` URL."""
    joined = folder / relative
    return str(joined) if isinstance(joined, S3Path) else os.path.abspath(joined)


def folder_location(folder: LakePath) -> str:
    """`folder` as location() writes it, so `f"{folder_location(folder)}/{relative}"` equals
    `location(folder, relative)` without a path join per file (a backlog lists thousands)."""
    return str(folder) if isinstance(folder, S3Path) else os.path.abspath(folder)


def relative_location(path: LakePath, folder: LakePath) -> str:
    """`path` below `folder` as a `/`-separated relative path; ValueError when it is not below it (or on the other
    kind of lake)."""
    if isinstance(path, S3Path) and isinstance(folder, S3Path):
        return path.relative_to(folder)
    if isinstance(path, Path) and isinstance(folder, Path):
        return path.resolve().relative_to(folder.resolve()).as_posix()
    raise ValueError(f"{path} is not under {folder}")


def file_under(folder: LakePath, relative: str) -> LakePath | None:
    """The file a URL path names inside `folder` (`dir/` names its index.html), or None: no `..`, no absolute path,
    no symlink out of the folder, nothing but a file. On the store keys are not folders: a page is an object."""
    if "\\" in relative or "\x00" in relative:
        return None
    parts = PurePosixPath(relative).parts
    if relative.startswith("/") or any(p in ("..", ".") for p in parts):
        return None
    if isinstance(folder, S3Path):
        page = folder / "/".join([*parts, *(["index.html"] if not parts or relative.endswith("/") else [])])
        return page if page.is_file() else None
    base = folder.resolve()
    target = base.joinpath(*parts) if parts else base
    if target.is_dir():  # only as `dir/`: the page's relative links would miss the folder otherwise
        if relative and not relative.endswith("/"):
            return None
        target = target / "index.html"
    try:
        resolved = target.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        return None
    if not resolved.is_relative_to(base) or not resolved.is_file():
        return None
    return resolved


def children(folder: LakePath) -> list[LakePath]:
    """What lies one level below `folder` (files and folders); nothing for a missing folder."""
    if isinstance(folder, S3Path):
        return list(folder.iterdir())  # a listing of a missing prefix is empty
    return list(folder.iterdir()) if folder.is_dir() else []


def delta_rs_location(path: LakePath) -> tuple[str, dict[str, str] | None]:
    """What delta-rs opens: the folder, or for an object-store lake its `s3://` URL and storage options."""
    if isinstance(path, S3Path):
        return f"s3://{path.location.arrow_path}", delta_rs_options()
    return str(path), None


def lineage_name(path: LakePath) -> tuple[str, str]:
    """(namespace, name) by OpenLineage's dataset naming: `file` and the absolute path on disk, `s3://<bucket>` and
    the key on the store (s3a:// and s3n:// name the same objects)."""
    if isinstance(path, S3Path):
        return f"s3://{path.location.bucket}", path.location.key.strip("/")
    return "file", os.path.abspath(path)


def lineage_uri(path: LakePath) -> str:
    """The folder as one URI (`file:///abs/lake`, `s3://bucket/prefix`): a namespace naming one lake."""
    namespace, name = lineage_name(path)
    return f"{namespace}/{name}" if isinstance(path, S3Path) else f"file://{name}"
