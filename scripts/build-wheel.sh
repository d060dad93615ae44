#!/usr/bin/env bash
# Builds millpond's wheel, millpond's Spark functions jar inside it (millpond/driver/lib/, package data), so an
# installed project needs no checkout and no JDK's javac.
# Usage: scripts/build-wheel.sh <python with pyspark and pip> <output folder>. `make wheel` runs it.
# The package is staged in a temporary folder: the checkout gets no built jar (a checkout's runs use `make jvm`'s)
# and no setuptools build/ or *.egg-info.
set -euo pipefail
python=$1 out=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$repo/pyproject.toml" "$stage/"
tar -C "$repo" --exclude=__pycache__ --exclude='*.pyc' --exclude='millpond/driver/lib' -cf - millpond | tar -C "$stage" -xf -
"$repo/jvm/build.sh" "$python" "$stage/millpond/driver/lib/millpond-spark.jar"
mkdir -p "$out"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$out" "$stage"
ls "$out"/millpond-*.whl
