"""A millpond project outside this repository: `millpond init` scaffolds one, `millpond jars` fetches the JVM
artifacts its runs need (the repository's `make jars` does the same with Maven)."""
