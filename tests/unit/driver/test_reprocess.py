"""Which landing files a reprocess slice reads, and the guard against replacing an interval's rows with nothing."""

from __future__ import annotations

import pytest

from millpond.driver.reprocess import FilesGone, covering_sql, interval_files
from millpond.lake import paths
from millpond.spec.reprocess import parse_interval

pytestmark = pytest.mark.unit

HOUR_1 = "date=2026-11-01/hour=01/"


def land(root, *names: str) -> list[str]:
    """Files under the landing root, and their URIs as Spark's seen-files log holds them (percent-encoded)."""
    uris = []
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
        uris.append(path.as_uri())
    return uris


def test_the_interval_folders_files_still_landed_are_read_and_a_removed_one_is_named_as_gone(tmp_path):
    root = tmp_path / "landing"
    seen = land(root, "date=2026-11-01/hour=00/a.json", f"{HOUR_1}b c.json", f"{HOUR_1}d.json")
    (root / HOUR_1 / "d.json").unlink()  # its rows go only with --allow-missing-files (check_landing_files)
    gone = [f"{root}/{HOUR_1}d.json"]
    assert interval_files(seen, root, [f"{root}/{HOUR_1}"]) == ([f"{root}/{HOUR_1}b c.json"], gone)
    assert interval_files(seen, root, []) == (
        [f"{root}/date=2026-11-01/hour=00/a.json", f"{root}/{HOUR_1}b c.json"],
        gone,
    )


def test_a_log_naming_files_the_store_does_not_return_fails_naming_them_instead_of_replacing_rows(tmp_path):
    """The data-loss class: the stream logged files of the interval as read, none is found (the store as configured
    does not reach them, or their names were mapped wrongly): a slice read from nothing would replace the interval's
    rows with nothing."""
    root = tmp_path / "landing"
    seen = land(root, "date=2026-11-01/hour=00/a.json", f"{HOUR_1}b.json", f"{HOUR_1}c.json")
    for name in ("b.json", "c.json"):
        (root / HOUR_1 / name).unlink()
    with pytest.raises(FilesGone) as raised:
        interval_files(seen, root, [f"{root}/{HOUR_1}"])
    message = str(raised.value)
    assert f"{root}/{HOUR_1}b.json" in message and f"{root}/{HOUR_1}c.json" in message
    assert "Nothing was replaced" in message and "--full-refresh" in message
    assert "\n" not in message  # the run's error is the message's first line: every name is in it
    # Files logged under another root (a lake moved or misnamed): none is found, so the same stop.
    with pytest.raises(FilesGone):
        interval_files([uri.replace("/landing/", "/elsewhere/") for uri in seen], root, [])


def test_an_interval_the_log_names_no_file_of_reads_nothing_without_failing(tmp_path):
    root = tmp_path / "landing"
    seen = land(root, "date=2026-11-01/hour=00/a.json")
    assert interval_files(seen, root, [f"{root}/{HOUR_1}"]) == ([], [])
    assert interval_files([], root, []) == ([], [])


def test_logged_uris_name_store_locations_decoded_and_local_paths_decoded():
    assert paths.from_uri("s3a://bucket/lake/landing/date=2026-11-01/b%20c.json") == (
        "s3a://bucket/lake/landing/date=2026-11-01/b c.json"
    )
    assert paths.from_uri("s3://bucket/lake/x.json") == "s3a://bucket/lake/x.json"
    assert paths.from_uri("file:///tmp/lake/landing/b%20c.json") == "/tmp/lake/landing/b c.json"
    assert str(paths.as_lake_path(paths.from_uri("s3a://bucket/lake/a.json"))) == "s3a://bucket/lake/a.json"


def test_the_intervals_a_correction_touched_are_one_predicate_adjacent_ones_merged():
    """Silver rebuilds every interval the re-read files hold rows of, before or after: hours 1, 2 and 4 are two
    ranges, and the rows with no event time only where the table keeps no state."""
    hours = [parse_interval(f"2026-11-01T0{h}:00:00Z/2026-11-01T0{h + 1}:00:00Z") for h in (4, 1, 2, 1)]
    stateful = covering_sql(tuple(hours), "Recorded_At", with_nulls=False)
    assert stateful == (
        "((`Recorded_At` >= TIMESTAMP'2026-11-01 01:00:00.000000+00:00' AND "
        "`Recorded_At` < TIMESTAMP'2026-11-01 03:00:00.000000+00:00') OR "
        "(`Recorded_At` >= TIMESTAMP'2026-11-01 04:00:00.000000+00:00' AND "
        "`Recorded_At` < TIMESTAMP'2026-11-01 05:00:00.000000+00:00'))"
    )
    assert covering_sql(tuple(hours), "Recorded_At", with_nulls=True) == stateful[:-1] + " OR `Recorded_At` IS NULL)"
