"""Object-store locations, and access read from the standard AWS_* variables without ever showing the secret."""

from __future__ import annotations

import pytest

from millpond.driver import s3a
from millpond.lake.object_store import ObjectStoreError, S3Access, S3Location, delta_rs_options, is_object_store

pytestmark = pytest.mark.unit

SERVER = {
    "AWS_ACCESS_KEY_ID": "MPKEY",
    "AWS_SECRET_ACCESS_KEY": "very-secret-value",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_REGION": "eu-west-1",
}


@pytest.mark.parametrize(
    ("location", "expected"),
    [("s3a://b/lake", True), ("S3://b", True), ("/srv/lake", False), ("lake", False), ("gs://b/x", False)],
)
def test_object_store_locations_are_told_from_local_folders(location, expected):
    assert is_object_store(location) is expected


def test_s3_and_s3a_name_the_same_place():
    assert (
        S3Location.parse("s3://bucket/a/lake/")
        == S3Location.parse("s3a://bucket/a/lake")
        == S3Location("bucket", "a/lake")
    )
    lake = S3Location.parse("s3a://bucket")
    assert lake.child("_system", "locks", "x.lease").url == "s3a://bucket/_system/locks/x.lease"
    assert lake.child("t").arrow_path == "bucket/t"


@pytest.mark.parametrize("bad", ["s3a://", "s3a:///lake", "/local/lake", "hdfs://n/lake"])
def test_a_location_without_a_bucket_is_refused_with_the_fix(bad):
    with pytest.raises(ObjectStoreError, match="Fix: write it as s3a://<bucket>/<prefix>"):
        S3Location.parse(bad)


def test_access_comes_from_the_standard_variables_and_hides_the_secret():
    access = S3Access.from_mapping(SERVER)
    assert (access.endpoint, access.region, access.http, access.host) == (
        "http://127.0.0.1:9000",
        "eu-west-1",
        True,
        "127.0.0.1:9000",
    )
    assert "very-secret-value" not in repr(access) and "MPKEY" in repr(access)
    assert S3Access.from_mapping({}).endpoint is None and S3Access.from_mapping({}).region == "us-east-1"


def test_half_a_key_pair_or_an_endpoint_without_scheme_is_refused():
    with pytest.raises(ObjectStoreError, match="AWS_SECRET_ACCESS_KEY is not set"):
        S3Access.from_mapping({"AWS_ACCESS_KEY_ID": "k"})
    with pytest.raises(ObjectStoreError, match="has no scheme"):
        S3Access.from_mapping({"AWS_ENDPOINT_URL": "127.0.0.1:9000"})


def test_spark_settings_for_s3a_never_carry_a_credential():
    conf = s3a.s3a_conf(S3Access.from_mapping(SERVER))
    assert not any("very-secret-value" in v or "MPKEY" in v for v in conf.values())
    assert not any(k.endswith(("access.key", "secret.key", "session.token")) for k in conf)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    log_store = "millpond.spark.ConditionalS3LogStore"  # jvm/: commit files created only if absent
    assert conf["spark.delta.logStore.s3a.impl"] == conf["spark.delta.logStore.s3.impl"] == log_store
    on_aws = s3a.s3a_conf(S3Access.from_mapping({"AWS_REGION": "eu-west-1"}))
    assert "spark.hadoop.fs.s3a.endpoint" not in on_aws and "spark.hadoop.fs.s3a.path.style.access" not in on_aws


def test_a_local_lake_adds_no_jar_and_no_setting_to_spark(monkeypatch, tmp_path):
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    assert s3a.launch_conf("local[2]") == {} and s3a.session_conf() == {}
    monkeypatch.setenv("MILLPOND_LAKE", "s3a://bucket/lake")
    monkeypatch.setenv("MILLPOND_S3A_JARS", str(tmp_path / "none"))
    with pytest.raises(RuntimeError, match="Fix: in a millpond checkout run `make s3a-jars`"):
        s3a.launch_conf("local[2]")


def test_s3a_jars_join_a_local_drivers_classpath_and_ship_to_a_cluster(monkeypatch, tmp_path):
    for name in (s3a.HADOOP_AWS, "bundle-2.35.4.jar"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setenv("MILLPOND_S3A_JARS", str(tmp_path))
    monkeypatch.setenv("MILLPOND_LAKE", "s3://bucket/lake")
    local = s3a.launch_conf("local[2]")
    assert list(local) == ["spark.driver.extraClassPath"] and s3a.HADOOP_AWS in local["spark.driver.extraClassPath"]
    assert list(s3a.launch_conf("spark://127.0.0.1:7077")) == ["spark.jars"]


def test_delta_rs_gets_the_endpoint_and_plain_http_only_when_asked():
    options = delta_rs_options(S3Access.from_mapping(SERVER))
    assert options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000" and options["AWS_ALLOW_HTTP"] == "true"
    assert options["aws_conditional_put"] == "etag" and "AWS_S3_ALLOW_UNSAFE_RENAME" not in options
    assert "AWS_ENDPOINT_URL" not in delta_rs_options(S3Access.from_mapping({"AWS_REGION": "eu-west-1"}))


@pytest.mark.parametrize("lake", ["s3a://bucket/lake", "S3://bucket/lake"])
def test_an_object_store_lake_gives_s3a_paths_and_never_a_local_folder(lake, monkeypatch, tmp_path):
    from millpond import settings
    from millpond.lake import paths
    from millpond.lake.object_store import S3Path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MILLPOND_LAKE", lake)
    table = paths.table_path("bronze.activity")
    assert isinstance(table, S3Path) and str(table) == "s3a://bucket/lake/bronze/activity"
    assert str(paths.checkpoint_path("activity", "silver.activity")) == (
        "s3a://bucket/lake/_checkpoints/activity/silver.activity"
    )
    assert table.name == "activity" and str(table.parent) == "s3a://bucket/lake/bronze"
    assert paths.as_lake_path(str(table)) == table
    # What still needs a folder (a flock, the sample generator, the engine's files) says so instead.
    with pytest.raises(settings.SettingError, match="Fix: point MILLPOND_LAKE at a folder"):
        paths.on_disk(paths.lock_path("activity"), "a flock")
    with pytest.raises(settings.SettingError, match="Fix: point MILLPOND_LAKE at a local or shared folder"):
        settings.lake_root()
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    assert paths.table_path("bronze.activity") == tmp_path / "lake" / "bronze" / "activity"


def test_the_pipeline_lock_of_a_local_lake_is_still_the_file_lock(monkeypatch, tmp_path):
    from millpond.lake.lock import pipeline_lock

    monkeypatch.setenv("MILLPOND_LAKE", str(tmp_path / "lake"))
    with pipeline_lock("activity", "run-1") as held:
        assert held is None
        assert (tmp_path / "lake" / "_system" / "locks" / "activity.lock").is_file()
