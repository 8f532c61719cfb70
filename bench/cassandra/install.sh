#!/usr/bin/env bash
# Installs Apache Cassandra (the reference peer for benchmarks and compatibility tests)
# from Maven Central: org.apache.cassandra:cassandra-all and its runtime dependencies
# into bench/cassandra/lib/ (gitignored). Idempotent: does nothing when the jars are there.
# Needs Java 17 and Maven. Version: pom.xml (override with CASSANDRA_VERSION=5.0.x).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${CASSANDRA_VERSION:-$(sed -n 's:.*<cassandra.version>\(.*\)</cassandra.version>.*:\1:p' "$here/pom.xml")}"

if [[ -f "$here/lib/cassandra-all-$version.jar" && -f "$here/lib/.complete-$version" ]]; then
  echo "cassandra $version already installed in $here/lib"
  exit 0
fi
command -v java >/dev/null || { echo "java (17) is required" >&2; exit 1; }
command -v mvn >/dev/null || { echo "maven is required" >&2; exit 1; }

rm -rf "$here/lib"
mkdir -p "$here/lib"
echo "resolving org.apache.cassandra:cassandra-all:$version from Maven Central..."
mvn -B -q -f "$here/pom.xml" -Dmaven.repo.local="$here/.m2" \
  -Dcassandra.version="$version" \
  dependency:copy-dependencies -DoutputDirectory="$here/lib" -DincludeScope=runtime
touch "$here/lib/.complete-$version"
echo "installed $(ls "$here/lib"/*.jar | wc -l) jars into $here/lib"
