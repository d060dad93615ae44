"""The S3 server the tests and `make s3-up` start (s3proxy 3.0.0): local only, signed requests only, and the
conditional writes the pipeline lease relies on honoured."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from millpond.dev.kafka_broker import free_port
from millpond.lake.object_store import S3Access, client
from tests.support import REPO

pytestmark = pytest.mark.integration


def test_the_server_refuses_unsigned_and_wrongly_signed_requests(s3_server, s3_bucket):
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(f"{s3_server.endpoint}/{s3_bucket.name}?list-type=2", timeout=5)
    assert unsigned.value.code == 403
    wrong = client(S3Access(s3_server.access_key, "not-the-secret", endpoint=s3_server.endpoint))
    with pytest.raises(Exception) as refused:
        wrong.list_objects_v2(Bucket=s3_bucket.name)
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"  # type: ignore[attr-defined]


def test_its_secret_is_on_no_command_line_and_in_no_file_it_keeps(s3_server):
    assert s3_server.process is not None
    cmdline = open(f"/proc/{s3_server.process.pid}/cmdline", "rb").read().decode()
    assert s3_server.secret_key not in cmdline
    properties = cmdline.split("\0")[cmdline.split("\0").index("--properties") + 1]
    assert not os.path.exists(properties)  # read at start, then deleted
    for root, _, files in os.walk(s3_server.workdir):
        for name in files:
            assert s3_server.secret_key not in open(os.path.join(root, name), errors="replace").read()


def test_it_honours_the_conditional_writes_the_lease_needs(s3_bucket):
    s3 = s3_bucket.client()
    first = s3.put_object(Bucket=s3_bucket.name, Key="k", Body=b"one", IfNoneMatch="*")
    with pytest.raises(Exception) as exists:
        s3.put_object(Bucket=s3_bucket.name, Key="k", Body=b"two", IfNoneMatch="*")
    assert exists.value.response["Error"]["Code"] == "PreconditionFailed"  # type: ignore[attr-defined]
    second = s3.put_object(Bucket=s3_bucket.name, Key="k", Body=b"three", IfMatch=first["ETag"])
    with pytest.raises(Exception) as stale:
        s3.put_object(Bucket=s3_bucket.name, Key="k", Body=b"four", IfMatch=first["ETag"])
    assert stale.value.response["Error"]["Code"] == "PreconditionFailed"  # type: ignore[attr-defined]
    assert s3.get_object(Bucket=s3_bucket.name, Key="k")["ETag"] == second["ETag"]
    assert s3.get_object(Bucket=s3_bucket.name, Key="k")["Body"].read() == b"three"


def test_make_s3_up_prints_working_exports_and_s3_down_stops_it(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "millpond.dev.s3_server"]
    home = ["--home", str(tmp_path / "s3")]
    up = subprocess.run(
        [*command, "up", "--port", str(port), "--bucket", "local-lake", *home],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stderr
        exports = dict(re.findall(r"export (AWS_[A-Z_]+)=(\S+)", up.stdout))
        assert sorted(exports) == ["AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_SECRET_ACCESS_KEY"]
        assert exports["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        assert "a lake there is s3a://local-lake/lake" in up.stdout
        s3 = client(S3Access.from_mapping(exports))
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["local-lake"]
        again = subprocess.run([*command, "up", "--port", str(port), *home], capture_output=True, text=True)
        assert again.returncode == 0 and "already runs" in again.stdout
        assert exports["AWS_SECRET_ACCESS_KEY"] not in again.stdout  # printed once, kept nowhere
    finally:
        down = subprocess.run([*command, "down", *home], capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and "stopped" in down.stdout
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)


def test_the_compose_s3_service_and_its_bucket_step_work_as_written(tmp_path):
    """docker-compose.yaml's `s3` service command and airflow-init's bucket step, run here as written (compose's
    `$$` unescaped, the image's paths mapped to this checkout, another port): the keys from the environment are
    the only ones accepted, and the lake's bucket is made from MILLPOND_LAKE."""
    import secrets
    import time

    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yaml").read_text())["services"]
    port = free_port()
    script = (
        services["s3"]["command"][2]
        .replace("$$", "$")
        .replace("/opt/millpond/.cache/s3proxy/", f"{REPO}/.cache/s3proxy/")
        .replace("/tmp/s3proxy.properties", str(tmp_path / "s3proxy.properties"))
        .replace("0.0.0.0:9000", f"127.0.0.1:{port}")
    )
    keys = {"S3_ACCESS_KEY": secrets.token_hex(8), "S3_SECRET_KEY": secrets.token_hex(16)}
    server = subprocess.Popen(["bash", "-c", script], env={**os.environ, **keys}, start_new_session=True)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                urllib.request.urlopen(endpoint, timeout=2)
            except urllib.error.HTTPError:
                break  # it answers (403: unsigned)
            except OSError:
                time.sleep(0.5)
        access = {
            "AWS_ACCESS_KEY_ID": keys["S3_ACCESS_KEY"],
            "AWS_SECRET_ACCESS_KEY": keys["S3_SECRET_KEY"],
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": "us-east-1",
        }
        init = services["airflow-init"]["command"][1]
        step = init[init.index("python -c") : init.index("|| echo")].replace("\\\n", " ")
        env = {
            **os.environ,
            **access,
            "MILLPOND_LAKE": "s3a://compose-lake/lake",
            "PATH": f"{sys.prefix}/bin:{os.environ['PATH']}",
        }
        made = subprocess.run(["bash", "-c", step], env=env, capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        s3 = client(S3Access.from_mapping(access))
        s3.put_object(Bucket="compose-lake", Key="lake/x", Body=b"1")
        assert s3.get_object(Bucket="compose-lake", Key="lake/x")["Body"].read() == b"1"
        wrong = client(S3Access.from_mapping({**access, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}))
        with pytest.raises(Exception, match="SignatureDoesNotMatch"):
            wrong.list_objects_v2(Bucket="compose-lake")
    finally:
        os.killpg(server.pid, 9)
        server.wait(timeout=10)
