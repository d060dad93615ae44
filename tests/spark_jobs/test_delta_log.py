"""millpond's replay check reads which batch an app last committed straight from a Delta table's commit files."""

from __future__ import annotations

import pytest

from millpond.delta_log import committed_batch, txn_marker

pytestmark = pytest.mark.integration


def test_the_newest_batch_of_an_app_is_found_in_delta_txn_actions_and_millpond_markers(spark, tmp_path):
    table = str(tmp_path / "t")
    rows = spark.range(3)
    assert committed_batch(tmp_path / "t", "app") is None  # no table yet

    # A lake written before the marker: Delta's own txnAppId/txnVersion options record a `txn` action.
    rows.write.format("delta").option("txnAppId", "app").option("txnVersion", 3).save(table)
    assert committed_batch(tmp_path / "t", "app") == 3
    assert committed_batch(tmp_path / "t", "other-app") is None

    rows.write.format("delta").mode("append").option("userMetadata", txn_marker("app", 4)).save(table)
    assert committed_batch(tmp_path / "t", "app") == 4

    # Other writers on top: a compaction, a plain append, someone's userMetadata that only looks like a marker.
    spark.sql(f"OPTIMIZE delta.`{table}`")
    rows.write.format("delta").mode("append").save(table)
    rows.write.format("delta").mode("append").option("userMetadata", '{"txnAppId": oops').save(table)
    rows.write.format("delta").mode("append").option("userMetadata", txn_marker("other-app", 9)).save(table)
    assert committed_batch(tmp_path / "t", "app") == 4
    assert committed_batch(tmp_path / "t", "other-app") == 9

    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where("version = 1").first()
    assert history.userMetadata == '{"txnAppId": "app", "txnVersion": 4}'  # what a user sees in the history
