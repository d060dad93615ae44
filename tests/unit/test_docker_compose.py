"""docker-compose.yaml cannot run here (no Docker engine): check its structure and its consistency with the repo."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.support import REPO

pytestmark = pytest.mark.unit

AIRFLOW = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
SPARK = ("spark-master", "spark-worker-1", "spark-worker-2", "spark-connect")
NODES = ("spark-master", "spark-worker-1", "spark-worker-2")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def pins() -> dict[str, str]:
    found = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s#]+)", line.strip())
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def test_services_are_airflow3_postgres_init_and_a_spark_cluster(compose):
    assert set(compose["services"]) == {"postgres", "s3", "airflow-init", *AIRFLOW, *SPARK}
    commands = {name: compose["services"][name].get("command") for name in AIRFLOW}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    assert "airflow db migrate" in "".join(compose["services"]["airflow-init"]["command"])
    assert compose["services"]["airflow-init"]["restart"] == "no"


def test_every_long_running_service_has_a_healthcheck(compose):
    for name, service in compose["services"].items():
        if name != "airflow-init":
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_startup_order_waits_for_health_and_the_one_shot_init(compose):
    services = compose["services"]
    for name in AIRFLOW:
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["airflow-init"]["condition"] == "service_completed_successfully"
    assert services["airflow-scheduler"]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    for worker in ("spark-worker-1", "spark-worker-2"):
        assert services[worker]["depends_on"]["spark-master"]["condition"] == "service_healthy"
        assert services[worker]["command"][-1] == "spark://spark-master:7077"


def test_the_spark_connection_points_at_the_master_and_the_lake_is_shared_on_the_s3_service(compose):
    """docs/object-storage.md#docker-compose: Airflow and the Spark nodes share one s3a lake on the `s3` service; the
    tasks' keys are the aws_millpond connection, the nodes' and the API server's the AWS_* variables, all from .env."""
    services = compose["services"]
    s3 = services["s3"]
    assert "s3proxy-3.0.0-jar-with-dependencies.jar" in "".join(s3["command"]) and "ports" not in s3
    for name in AIRFLOW:
        env = services[name]["environment"]
        conn = json.loads(env["AIRFLOW_CONN_SPARK_MILLPOND"])
        assert conn == {"conn_type": "spark", "host": "spark://spark-master:7077"}
        assert env["MILLPOND_LAKE"] == "${MILLPOND_LAKE:-s3a://millpond/lake}"
        aws = json.loads(env["AIRFLOW_CONN_AWS_MILLPOND"])
        assert aws["conn_type"] == "aws" and aws["extra"]["endpoint_url"] == "http://s3:9000"
        assert aws["password"] == "${S3_SECRET_KEY:?set S3_SECRET_KEY in .env}"
        assert services[name]["depends_on"]["s3"]["condition"] == "service_healthy"
    master_cmd = services["spark-master"]["command"]
    assert master_cmd[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"] and "7077" in master_cmd
    for name in (*NODES, "airflow-apiserver", "airflow-init"):
        env = services[name]["environment"]
        assert env["AWS_ENDPOINT_URL"] == "http://s3:9000", name
        assert env["AWS_SECRET_ACCESS_KEY"] == "${S3_SECRET_KEY:?set S3_SECRET_KEY in .env}", name
    for name in NODES:
        assert services[name]["environment"]["MILLPOND_LAKE"] == "${MILLPOND_LAKE:-s3a://millpond/lake}"
        assert "-Dspark.worker.cleanup.enabled=true" in services[name]["environment"]["SPARK_WORKER_OPTS"]
    assert s3["restart"] == "no", "a restarted in-memory server is an empty lake: fail loudly instead"
    assert "S3Location.parse(os.environ['MILLPOND_LAKE']).bucket" in "".join(services["airflow-init"]["command"])
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert "build/s3a.pom.xml" in dockerfile and "build/s3proxy.pom.xml" in dockerfile


def test_images_are_pinned_and_versions_match_requirements(compose):
    versions = pins()
    dockerfile = (REPO / compose["services"]["airflow-scheduler"]["build"]["dockerfile"]).read_text()
    base = re.search(r"^FROM apache/airflow:(\S+)", dockerfile, re.MULTILINE).group(1)
    assert base == f"{versions['apache-airflow']}-python3.11"
    assert "requirements.txt" in dockerfile  # pyspark, delta-spark and the provider come from the same pins
    image = compose["services"]["airflow-scheduler"]["image"]
    assert image == f"millpond-airflow:{versions['apache-airflow']}-spark{versions['pyspark']}"
    for name, service in compose["services"].items():
        tag = service["image"].rsplit(":", 1)
        assert len(tag) == 2 and tag[1] not in ("latest", ""), f"{name}: unpinned image {service['image']}"


def test_no_secrets_in_the_compose_file(compose):
    text = (REPO / "docker-compose.yaml").read_text()
    assert "${POSTGRES_PASSWORD:?" in text and "${AIRFLOW_JWT_SECRET:?" in text and "${S3_SECRET_KEY:?" in text
    example = (REPO / ".env.example").read_text()
    for name in ("POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET", "S3_ACCESS_KEY", "S3_SECRET_KEY"):
        assert f"\n{name}=" in example, name


def test_the_image_installs_the_package_so_airflow_finds_the_report_plugin():
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --no-deps -e /opt/millpond" in dockerfile
    assert 'millpond = "millpond.airflow.plugin:MillpondPlugin"' in (REPO / "pyproject.toml").read_text()


def test_the_engine_is_a_connect_server_on_the_cluster_that_the_tasks_can_use(compose):
    """docs/engine.md: with the `engine` profile, the spark-connect service runs `millpond engine start` in the
    foreground against the cluster's master, reachable on the compose network only, on the same lake as the tasks
    (the bucket, with the nodes' keys); the tasks use it when .env sets SPARK_REMOTE."""
    services = compose["services"]
    engine = services["spark-connect"]
    assert engine["profiles"] == ["engine"]
    command = engine["command"]
    assert command[:5] == ["millpond", "engine", "start", "--foreground", "--no-token"]
    assert command[command.index("--master") + 1] == "spark://spark-master:7077"
    port = command[command.index("--port") + 1]
    assert "ports" not in engine, "the engine has no token: it must not be published outside the compose network"
    assert services["airflow-scheduler"]["environment"]["SPARK_REMOTE"] == "${SPARK_REMOTE:-}"
    example = (REPO / ".env.example").read_text()
    assert f"# SPARK_REMOTE=sc://spark-connect:{port}" in example
    common = services["airflow-scheduler"]["environment"]
    assert engine["environment"]["MILLPOND_LAKE"] == common["MILLPOND_LAKE"] == "${MILLPOND_LAKE:-s3a://millpond/lake}"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        assert engine["environment"][name] == services["spark-worker-1"]["environment"][name], name
    assert engine["environment"]["XDG_STATE_HOME"].startswith("/tmp/")  # its state folder: writable for any uid
    depends = services["airflow-scheduler"]["depends_on"]["spark-connect"]
    assert depends == {"condition": "service_healthy", "required": False}
    assert engine["healthcheck"]["test"] == ["CMD", "millpond", "engine", "status"]
    for name in (*AIRFLOW, "spark-connect", "spark-worker-1", "spark-worker-2"):  # the folder lake, when chosen
        assert "lake:/opt/millpond/lake" in services[name]["volumes"], name
