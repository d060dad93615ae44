"""The folder lake's side of millpond.lake.storage (the object store's is tests/integration/object_store/), and the
rule that nothing outside the modules listed below, each with its reason, asks which kind of lake it is."""

from __future__ import annotations

import ast
import os
import threading
from pathlib import Path

import pytest

import millpond
from millpond.lake import storage

pytestmark = pytest.mark.unit

PACKAGE = Path(millpond.__file__).resolve().parent
# The modules that own the object-store question, and why each must ask it.
OWNERS = {
    "lake/object_store.py": "the object store's locations, clients and S3Path",
    "lake/storage.py": "what differs between the two kinds of lake when files are listed, written or removed",
    "lake/paths.py": "where the lake is: it makes an S3Path of an s3a:// URL, and puts an object-store lake's "
    "engine state and flocks in a local folder",
    "lake/lock.py": "which lock a run takes: a flock on a folder lake, a lease (conditional writes) on the store",
    "lake/lease.py": "the lease itself, which exists only on the store",
    "driver/s3a.py": "the hadoop-aws jars and s3a settings Spark needs for an object-store lake, and whether an "
    "engine has them",
    "settings.py": "reads MILLPOND_LAKE, a folder or an object-store URL",
    "airflow/spark_app.py": "an object-store lake's credentials come from the Airflow AWS connection",
    "spec/loader/pipeline.py": "the lake root the spec's paths are checked against, by name only, for either kind",
}
# The names that ask which kind of lake it is.
QUESTIONS = {"S3Path", "S3Location", "is_object_store", "lake_on_object_store", "lake_url"}


def test_only_the_storage_modules_ask_which_kind_of_lake_it_is():
    asking = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            name = {ast.Name: "id", ast.alias: "name", ast.Attribute: "attr"}.get(type(node))
            if name and getattr(node, name) in QUESTIONS:
                asking.add(relative)
    assert sorted(asking) == []
    assert all((PACKAGE / owner).is_file() for owner in OWNERS)  # a renamed owner leaves the list too


def walk_reference(root: Path) -> list[tuple[str, int]]:
    """What Spark's file source lists, by os.walk: hidden names (`.`, `_`) and what lies under them left out."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if not name.startswith((".", "_")):
                full = os.path.join(folder, name)
                found.append((os.path.relpath(full, root), os.stat(full).st_size))
    return sorted(found)


def test_a_folder_lists_as_sparks_file_source_sees_it(tmp_path, monkeypatch):
    for name, body in {
        "2026/01/01/a.json": "{}\n",
        "2026/01/02/b.json": "{}\n{}\n",
        "c.json": "",
        "_spark_metadata/0": "v1",
        "2026/.tmp/d.json": "partial",
        ".e.json.crc": "x",
        "2026/_hidden.json": "x",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    listed = storage.listing(tmp_path)
    assert [(name, size) for name, size, _ in listed] == walk_reference(tmp_path)
    assert [name for name, _, _ in listed] == ["2026/01/01/a.json", "2026/01/02/b.json", "c.json"]
    assert all(mtime > 0 for _, _, mtime in listed)
    monkeypatch.chdir(tmp_path.parent)  # names are relative to the folder however it is written
    assert storage.listing(Path(tmp_path.name)) == listed
    assert storage.listing(Path(tmp_path.name) / "2026" / "..") == listed
    assert storage.listing(tmp_path / "nothing-here") == []
    assert storage.present([str(tmp_path / "c.json"), str(tmp_path / "gone.json")], [tmp_path]) == [
        str(tmp_path / "c.json")
    ]
    assert storage.location(tmp_path, "2026/01/01/a.json") == str(tmp_path / "2026" / "01" / "01" / "a.json")


def test_appends_from_many_writers_lose_no_line(tmp_path):
    target = tmp_path / "history" / "lines.jsonl"

    def writer(n: int) -> None:
        for i in range(200):
            storage.append_line(target, f"{n}:{i}\n")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(target.read_text().splitlines()) == sorted(f"{n}:{i}" for n in range(4) for i in range(200))


def test_a_whole_write_leaves_no_part_behind(tmp_path):
    target = tmp_path / "new" / "state.json"
    storage.write_whole(target, "one")
    storage.write_whole(target, "two")
    assert target.read_text() == "two" and [p.name for p in target.parent.iterdir()] == ["state.json"]
    storage.remove_tree(tmp_path / "new")
    storage.remove_tree(tmp_path / "new")  # gone already: fine
    assert not (tmp_path / "new").exists()


def test_a_folder_lakes_tool_writes_into_the_folder_itself(tmp_path):
    folder = tmp_path / "docs"
    with storage.local_folder(folder, kept_as="datadocs", stand_ins=True) as local:
        assert local == folder and folder.is_dir()
        (local / "page.html").write_text("<p>")
    assert [p.name for p in folder.iterdir()] == ["page.html"]
    assert storage.children(folder) == [folder / "page.html"] and storage.children(tmp_path / "none") == []


def test_a_link_loop_in_a_folder_lake_is_listed_once(tmp_path):
    """A link to a folder above (`loop -> .`) is not followed: each file is listed, and sized, once."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.json").write_text("{}\n")
    (landing / "loop").symlink_to(landing)
    (tmp_path / "b.json").write_text("{}\n{}\n")
    (landing / "linked.json").symlink_to(tmp_path / "b.json")  # a linked file is read through, as Spark reads it
    assert [(name, size) for name, size, _ in storage.listing(landing)] == [("a.json", 3), ("linked.json", 6)]


def test_a_folder_location_and_a_relative_name_give_the_files_location(tmp_path, monkeypatch):
    """millpond backlog joins each listed name to its folder's location once, where Spark's logged URIs are matched:
    the same string storage.location makes per file, for a relative folder, one with `..`, and an s3a:// one."""
    from millpond.lake.object_store import S3Path

    monkeypatch.chdir(tmp_path)
    folders = [Path("landing/activity"), tmp_path / "x" / ".." / "landing", S3Path("s3a://bucket/lake/landing")]
    for folder in folders:
        for relative in ("a.csv", "2026/11/b.csv"):
            assert storage.location(folder, relative) == f"{storage.folder_location(folder)}/{relative}", folder
