# The front door. Every target sets itself up on a machine with only Python 3.11, Java 17, Maven and the registries.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
JARS := .cache/jars
export MILLPOND_LAKE ?= $(CURDIR)/lake
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup venv jars demo test test-unit validate clean-lake help
help:
	@echo "make demo   set up, land sample data, run the activity pipeline, print each table"
	@echo "make test   set up, then run every test (unit + integration, kill tests included)"

setup: venv jars

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

validate: setup
	$(BIN)/millpond validate

demo: setup
	$(BIN)/millpond validate
	$(BIN)/millpond generate activity --files 3 --rows 2000 --duplicates 0.03 --malformed 0.005
	$(BIN)/millpond run activity
	$(BIN)/millpond status activity

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: setup
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

clean-lake:
	rm -rf "$(MILLPOND_LAKE)"
