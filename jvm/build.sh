#!/usr/bin/env bash
# Compiles millpond's Spark functions (jvm/src) against the Spark jars of the given Python's pyspark, into one jar.
# Usage: jvm/build.sh <python with pyspark> <output jar>. `make setup` and docker/Dockerfile run it.
set -euo pipefail
python=$1 out=$2
command -v javac >/dev/null || {
    echo "error: javac not found; it compiles millpond's Spark functions (jvm/). Fix: install a JDK 17 (apt-get install openjdk-17-jdk-headless)"
    exit 1
}
spark_jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -Xlint:all,-path -Werror -cp "$spark_jars/*" -d "$classes" \
    $(find "$(dirname "$0")/src/main/java" -name '*.java' | sort)
mkdir -p "$(dirname "$out")"
jar --create --file "$out.tmp" -C "$classes" .
mv "$out.tmp" "$out"
