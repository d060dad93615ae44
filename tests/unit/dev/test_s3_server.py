"""The S3 server harness without starting it: a missing jar names the fix, and fresh credentials every time."""

from __future__ import annotations

import pytest

from millpond.dev import s3_server
from millpond.dev.s3_server import S3Server, ServerFailed

pytestmark = pytest.mark.unit


def test_a_missing_s3proxy_jar_names_the_make_target(monkeypatch, tmp_path):
    monkeypatch.setattr(s3_server, "JAR_DIR", tmp_path)
    with pytest.raises(ServerFailed, match="Fix: make s3proxy"):
        S3Server(tmp_path / "home").start()


def test_each_server_gets_its_own_credentials_and_clients_get_the_standard_variables(tmp_path):
    one, two = S3Server(tmp_path / "a", port=9100), S3Server(tmp_path / "b", port=9101)
    assert one.secret_key != two.secret_key and one.access_key != two.access_key
    assert one.access_key.isalnum() and len(one.secret_key) >= 32
    assert one.env() == {
        "AWS_ACCESS_KEY_ID": one.access_key,
        "AWS_SECRET_ACCESS_KEY": one.secret_key,
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9100",
        "AWS_REGION": "us-east-1",
    }


def test_requests_are_read_only_from_a_server_that_logs_them(tmp_path):
    with pytest.raises(ServerFailed, match="log_requests=True"):
        S3Server(tmp_path / "a", port=9100).requests()
    server = S3Server(tmp_path / "b", port=9102, log_requests=True)
    server.log.write_text(
        "[s3proxy] D request: Request(GET http://127.0.0.1:9102/b?list-type=2&prefix=x)@1\n"
        "[s3proxy] D Put blob with key [k]\n"
        "[s3proxy] D request: Request(PUT http://127.0.0.1:9102/b/k)@2\n"
    )
    assert server.requests() == [("GET", "/b?list-type=2&prefix=x"), ("PUT", "/b/k")]
