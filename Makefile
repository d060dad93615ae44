# The front door. Every target sets itself up on a machine with only Python 3.11, a JDK 17, Maven and the registries.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
JARS := .cache/jars
REPORT_ASSETS := .cache/report-assets
KAFKA_BROKER := .cache/kafka-broker
S3PROXY := .cache/s3proxy
S3A_JARS := .cache/s3a-jars
export MILLPOND_LAKE ?= $(CURDIR)/lake
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Airflow runs on the project's own home (SQLite for `airflow dags test`, the catalog's PostgreSQL under `make up`);
# the Spark connection defaults to local Spark.
export AIRFLOW_HOME ?= $(CURDIR)/airflow_home
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW_CONN_SPARK_MILLPOND ?= {"conn_type": "spark", "host": "local[2]"}
PIPELINE ?= activity

.PHONY: setup venv jars jvm report-assets class-archive kafka-broker kafka-up kafka-down s3proxy s3a-jars s3-up s3-down browser demo check test test-integration test-outside-ci durations test-engine test-unit lint validate clean-lake help airflow-db run-dag up down stress bench
help:
	@echo "make demo   set up, land sample data, run the activity DAG through Airflow, print each table, name them in the catalog"
	@echo "make check  the fast lane (minutes): lint (ruff check, ruff format --check, mypy), then the unit tests"
	@echo "make test   set up, then the suite CI runs: make check, then every integration test but the few marked outside_ci"
	@echo "make test-outside-ci  the integration scenarios that do not yet fit CI's 60 minutes (docs/testing.md)"
	@echo "make durations  the longest test files of the last make test; rewrites tests/longest_first.txt"
	@echo "make test-engine  the integration tests (but own_jvm ones) with every run on an engine (Spark Connect), one per worker"
	@echo "make run-dag PIPELINE=<name>  one DAG run through Airflow (airflow dags test, SQLite, honours MILLPOND_LAKE)"
	@echo "make up     the engine, then Airflow scheduler + UI/API + dag-processor + triggerer in the background"
	@echo "make down   stop everything make up started"
	@echo "make kafka-up / kafka-down  a local Kafka broker (KAFKA_PORT=9092) with the specs' topics, for device_status"
	@echo "make s3-up / s3-down  a local S3 server (s3proxy, S3_PORT=9000): prints the AWS_* variables for an s3a:// lake"
	@echo "make stress CYCLES=30 SEED=1  seeded SIGKILL cycles, then exactness against the reference (docs/reliability.md)"
	@echo "make bench SCALE=small|large [ONLY=B3,B6] [REPEATS=n] side-by-side benchmarks B1-B8 -> bench/results-<scale>.json, .md"

setup: venv jars jvm report-assets class-archive

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "millpond needs Python >= 3.11, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

jars: $(JARS)/.fetched
$(JARS)/.fetched: build/jars.pom.xml
	@command -v java >/dev/null || { echo "error: java not found. Fix: install OpenJDK 17 (apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: mvn not found; it fetches the Delta jars from Maven Central. Fix: apt-get install maven"; exit 1; }
	mvn --batch-mode --quiet -f build/jars.pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(JARS) -DexcludeTransitive=true
	touch $@

# The class-data archive a run's driver JVM maps its classes from (millpond/driver/class_archive.py): built by a
# small pipeline run once per JVM and Spark version, and only checked (about a second) when it is up to date.
class-archive: venv jars jvm report-assets
	$(BIN)/millpond class-archive

# The stylesheets and scripts of the Data Docs pages (WebJars from Maven Central), so reports render offline.
report-assets: $(REPORT_ASSETS)/.fetched
$(REPORT_ASSETS)/.fetched: build/report-assets.pom.xml
	@command -v mvn >/dev/null || { echo "error: mvn not found; it fetches the report assets from Maven Central. Fix: apt-get install maven"; exit 1; }
	rm -rf $(REPORT_ASSETS)
	mvn --batch-mode --quiet -f build/report-assets.pom.xml dependency:unpack-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(REPORT_ASSETS) -DexcludeTransitive=true -Dincludes='META-INF/resources/webjars/**'
	touch $@

# millpond's Spark functions (jvm/, registered by millpond/driver/session.py) and its Delta log store for S3, compiled
# against the venv's pyspark and the delta-storage jar `jars` fetches (the log store extends delta-storage's).
jvm: $(JARS)/millpond-spark.jar
$(JARS)/millpond-spark.jar: jvm/build.sh $(wildcard jvm/src/main/java/millpond/spark/*.java) $(VENV)/.installed \
    $(JARS)/.fetched
	jvm/build.sh $(BIN)/python $@ $(JARS)

# A Kafka broker (KRaft, millpond/dev/kafka_broker.py) for the tests and for `make kafka-up`: the kafka_2.13 jars and
# their transitive deps, kept apart from Spark's classpath.
kafka-broker: $(KAFKA_BROKER)/.fetched
$(KAFKA_BROKER)/.fetched: build/kafka-broker.pom.xml
	@command -v java >/dev/null || { echo "error: java not found. Fix: install OpenJDK 17 (apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: mvn not found; it fetches the Kafka broker jars from Maven Central. Fix: apt-get install maven"; exit 1; }
	rm -rf $(KAFKA_BROKER)
	mvn --batch-mode --quiet -f build/kafka-broker.pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(KAFKA_BROKER) -DincludeScope=runtime
	touch $@

# The local broker for the Kafka pipelines (device_status): background, port KAFKA_PORT, data in .cache/kafka,
# every topic the specs name created. run-dag uses it unless MILLPOND_KAFKA_BOOTSTRAP names another cluster.
KAFKA_PORT ?= 9092
KAFKA_HOME ?= $(CURDIR)/.cache/kafka
kafka-up: setup kafka-broker
	$(BIN)/python -m millpond.dev.kafka_broker up --port $(KAFKA_PORT) --home "$(KAFKA_HOME)"
kafka-down:
	$(BIN)/python -m millpond.dev.kafka_broker down --home "$(KAFKA_HOME)"

# s3proxy (millpond/dev/s3_server.py), a real S3 API server for the tests and `make s3-up`: one self-contained jar.
s3proxy: $(S3PROXY)/.fetched
$(S3PROXY)/.fetched: build/s3proxy.pom.xml
	@command -v java >/dev/null || { echo "error: java not found. Fix: install OpenJDK 17 (apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: mvn not found; it fetches s3proxy from Maven Central. Fix: apt-get install maven"; exit 1; }
	rm -rf $(S3PROXY)
	mvn --batch-mode --quiet -f build/s3proxy.pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(S3PROXY) -DexcludeTransitive=true
	touch $@

# hadoop-aws and the AWS SDK bundle (~600 MB) for an s3a:// lake, kept apart from $(JARS): on Spark's classpath only
# when MILLPOND_LAKE is on object storage (millpond/driver/s3a.py).
s3a-jars: $(S3A_JARS)/.fetched
$(S3A_JARS)/.fetched: build/s3a.pom.xml
	@command -v mvn >/dev/null || { echo "error: mvn not found; it fetches hadoop-aws from Maven Central. Fix: apt-get install maven"; exit 1; }
	rm -rf $(S3A_JARS)
	mvn --batch-mode --quiet -f build/s3a.pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(CURDIR)/$(S3A_JARS) -DincludeScope=runtime
	touch $@

# The local S3 server: background, port S3_PORT, objects in memory until s3-down, fresh credentials printed (never
# written under the project). Paste the printed exports into your shell.
S3_PORT ?= 9000
S3_BUCKET ?= millpond
s3-up: setup s3proxy s3a-jars
	@$(BIN)/python -m millpond.dev.s3_server up --port $(S3_PORT) --bucket $(S3_BUCKET)
s3-down:
	@$(BIN)/python -m millpond.dev.s3_server down

validate: setup
	$(BIN)/millpond validate

airflow-db: $(AIRFLOW_HOME)/airflow.db
$(AIRFLOW_HOME)/airflow.db: | setup
	mkdir -p "$(AIRFLOW_HOME)"
	$(BIN)/airflow db migrate >"$(AIRFLOW_HOME)/db-migrate.log" 2>&1 || { tail -20 "$(AIRFLOW_HOME)/db-migrate.log"; exit 1; }

# One DAG run in-process (no scheduler). A failed task is retried after MILLPOND_RETRY_DELAY_SECONDS.
run-dag: setup airflow-db
	$(BIN)/millpond validate $(PIPELINE)
	MILLPOND_RETRY_DELAY_SECONDS=$${MILLPOND_RETRY_DELAY_SECONDS:-5} \
	MILLPOND_KAFKA_BOOTSTRAP=$${MILLPOND_KAFKA_BOOTSTRAP:-127.0.0.1:$(KAFKA_PORT)} \
	    $(BIN)/airflow dags test $(PIPELINE) >"$(AIRFLOW_HOME)/dags-test-$(PIPELINE).log" 2>&1 \
	    || { grep -a -E "ERROR|error|millpond:|Exception" "$(AIRFLOW_HOME)/dags-test-$(PIPELINE).log" | tail -30; \
	         echo "DAG run failed; full log: $(AIRFLOW_HOME)/dags-test-$(PIPELINE).log"; exit 1; }
	@$(BIN)/python -m millpond.airflow.report $(PIPELINE) "$(AIRFLOW_HOME)/dags-test-$(PIPELINE).log"

demo: setup airflow-db
	$(BIN)/millpond validate
	$(BIN)/millpond generate activity --files 3 --rows 2000 --duplicates 0.03 --malformed 0.005
	$(MAKE) --no-print-directory run-dag PIPELINE=activity
	$(BIN)/millpond status activity
	$(BIN)/millpond catalog sync 2>"$(AIRFLOW_HOME)/catalog-sync.log" || { tail -20 "$(AIRFLOW_HOME)/catalog-sync.log"; exit 1; }
	@grep "^millpond:" "$(AIRFLOW_HOME)/catalog-sync.log" || true
	$(BIN)/millpond sql "SELECT Device, total_recordings FROM gold.device_counts ORDER BY total_recordings DESC LIMIT 5" 2>/dev/null

# Long seeded crash loop (docs/reliability.md); `make test` runs 3 cycles of the same loop.
CYCLES ?= 30
SEED ?= 1
stress: setup
	$(BIN)/python -m tests.support.stress --cycles $(CYCLES) --seed $(SEED)  # lake and results under .cache/stress/

# Benchmarks (docs/benchmarks.md): ratios measured in one run on this machine; never part of `make test`.
SCALE ?= small
ONLY ?=
REPEATS ?=
bench: setup airflow-db
	$(BIN)/python -m bench.run --scale $(SCALE) $(if $(ONLY),--only $(ONLY)) $(if $(REPEATS),--repeats $(REPEATS))

# The engine (docs/engine.md) starts first and the Airflow tasks run on it through the Airflow connection
# spark_connect_millpond; ENGINE=off gives each task a JVM of its own (spark-submit) instead.
ENGINE ?= on
up: setup
	$(if $(filter on,$(ENGINE)),conn="$$($(BIN)/millpond engine start --airflow-connection)" || exit 1; \
	    export AIRFLOW_CONN_SPARK_CONNECT_MILLPOND="$$conn";) \
	    scripts/airflow-up.sh

down:
	scripts/airflow-down.sh; status=$$?; $(BIN)/millpond engine stop; $(BIN)/millpond catalog stop; exit $$status

# The report pages are checked in a real headless browser (tests/integration/quality_gate/test_reports_browser.py).
# A missing Chromium is installed from Debian's packages where this user may (root, as on CI's fresh machines);
# elsewhere installing one is the machine owner's call, so `make test` stops here naming the command, rather than
# skipping the test or running sudo behind the user's back.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        echo "installing chromium (Debian's package) for the report-page tests"; \
	        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null || exit 1; \
	    else \
	        echo "error: chromium not found; \`make test\` checks the report pages in it. Fix: install Chromium (Debian: sudo apt-get install chromium)"; exit 1; \
	    fi; }

# Two workers, a test file each at a time (module fixtures stay on one worker), the longest files first
# (tests/longest_first.txt, in the order tests/conftest.py gives them); PYTEST_WORKERS=0 runs in-process.
# `make test` is what `.ci/run` runs: the fast lane first (a broken commit fails in minutes), then every integration
# test but the few marked `outside_ci`, scenarios that do not yet fit CI's 60 minutes (docs/testing.md: the budget,
# and what they cost); `make test-outside-ci` runs those. Each run writes every test's duration to $(TEST_RESULTS)/
# and prints the longest files; `make durations` rewrites tests/longest_first.txt from them.
# pytest exits 5 when it collected no tests, which fails the target like any other failure.
PYTEST_WORKERS ?= 2
TEST_RESULTS := .cache/test-results
test: lint test-unit test-integration

test-integration: browser setup kafka-broker s3proxy s3a-jars
	@mkdir -p $(TEST_RESULTS)
	$(BIN)/python -m pytest -m "integration and not outside_ci" -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	    --junitxml=$(TEST_RESULTS)/integration.xml $(PYTEST_ARGS)
	@$(BIN)/python -m tests.support.durations $(TEST_RESULTS)/integration.xml --top 20

test-outside-ci: browser setup kafka-broker s3proxy s3a-jars
	@mkdir -p $(TEST_RESULTS)
	$(BIN)/python -m pytest -m outside_ci -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	    --junitxml=$(TEST_RESULTS)/outside-ci.xml $(PYTEST_ARGS)

durations: setup
	$(BIN)/python -m tests.support.durations $(TEST_RESULTS)/integration.xml --top 20 --write tests/longest_first.txt

# The integration suite with every run on an engine (docs/engine.md): one per worker, through SPARK_REMOTE. An extra
# beside `make test`, which runs the engine's own scenarios on both backends; this runs all the rest on it too.
test-engine: browser setup kafka-broker s3proxy s3a-jars
	MILLPOND_TEST_ENGINE=on $(BIN)/python -m pytest -m "integration and not own_jvm" -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The fast lane: no JVM, no Airflow process, a few minutes on two cores; `make test` runs it first.
check: lint test-unit

lint: setup
	$(BIN)/ruff check --no-cache .
	$(BIN)/ruff format --check --no-cache .
	$(BIN)/mypy

test-unit: setup
	@mkdir -p $(TEST_RESULTS)
	$(BIN)/python -m pytest -m unit --junitxml=$(TEST_RESULTS)/unit.xml $(PYTEST_ARGS)

clean-lake:
	rm -rf "$(MILLPOND_LAKE)"

# The installable package, millpond's Spark functions jar inside it: dist/millpond-<version>-py3-none-any.whl.
.PHONY: wheel
wheel: $(VENV)/.installed $(JARS)/.fetched
	scripts/build-wheel.sh $(BIN)/python dist
