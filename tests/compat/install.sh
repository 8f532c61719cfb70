#!/usr/bin/env bash
# Installs every client the compatibility suites use, from the package registries, into
# gitignored directories of tests/compat. Idempotent: a part whose pinned inputs did not
# change since its last successful install is skipped.
#
#   tests/compat/install.sh [python] [go] [node] [java]     (default: all)
#
#   .venv-datastax/   cassandra-driver + Apache cqlsh + pytest   (requirements-datastax.txt)
#   .venv-scylla/     scylla-driver + scylla-cqlsh + pytest      (requirements-scylla.txt)
#   go/.gomodcache/   gocql (apache/cassandra-gocql-driver/v2)   (go/go.mod, go/go.sum)
#   node/node_modules cassandra-driver                           (node/package-lock.json)
#   .m2/              Java driver 4.x, JUnit 5, Maven plugins    (java/pom.xml)
#
# Needs python3 (3.9+ with venv), go, node/npm, java 17 + mvn.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(python go node java)
python="${PYTHON:-python3}"

stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

# $1 venv dir, $2 requirements file, $3 driver package that must come as a binary wheel
install_venv() {
  local venv="$1" req="$2" driver="$3"
  local stamp; stamp="$(stamp_of "$req")"
  if [[ -f "$venv/.installed-$stamp" && -x "$venv/bin/python" ]]; then
    echo "python: $venv up to date"
    return
  fi
  echo "python: installing $venv from $req"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --upgrade pip
  # The drivers ship manylinux wheels with their C extensions: never build them here.
  "$venv/bin/pip" install -q --disable-pip-version-check --only-binary="$driver" -r "$req"
  touch "$venv/.installed-$stamp"
}

install_python() {
  install_venv .venv-datastax requirements-datastax.txt cassandra-driver
  install_venv .venv-scylla requirements-scylla.txt scylla-driver
  .venv-datastax/bin/python -c 'import cassandra; assert cassandra.__version__.startswith("3.30")'
  .venv-scylla/bin/python -c 'import cassandra.shard_info'
}

install_go() {
  export GOMODCACHE="$here/go/.gomodcache" GOCACHE="$here/go/.gocache" GOFLAGS=-modcacherw
  local stamp; stamp="$(stamp_of go/go.mod go/go.sum go/*.go)"
  if [[ -f "go/.gocache/.installed-$stamp" ]]; then
    echo "go: up to date"
    return
  fi
  echo "go: downloading modules and building the test binary"
  (cd go && go mod download && go test -c -o "$GOCACHE/compat.test" .)
  touch "go/.gocache/.installed-$stamp"
}

install_node() {
  local stamp; stamp="$(stamp_of node/package.json node/package-lock.json)"
  if [[ -f "node/node_modules/.installed-$stamp" ]]; then
    echo "node: up to date"
    return
  fi
  echo "node: npm ci"
  (cd node && npm ci --no-audit --no-fund --loglevel=error)
  touch "node/node_modules/.installed-$stamp"
}

install_java() {
  local stamp; stamp="$(stamp_of java/pom.xml)"
  if [[ -f ".m2/.installed-$stamp" ]]; then
    echo "java: up to date"
    return
  fi
  echo "java: resolving the Java driver, JUnit and plugins into .m2"
  # go-offline + test-compile, then one server-less test so that surefire's JUnit provider
  # is fetched too: `mvn -o test` (run.sh) then works offline.
  mvn -B -q -f java/pom.xml -Dmaven.repo.local="$here/.m2" \
    dependency:go-offline test-compile surefire:help >/dev/null
  mvn -B -q -f java/pom.xml -Dmaven.repo.local="$here/.m2" test -Dtest=DriverInstalledTest \
    >/dev/null
  touch ".m2/.installed-$stamp"
}

for p in "${parts[@]}"; do
  case "$p" in
    python) install_python ;;
    go) install_go ;;
    node) install_node ;;
    java) install_java ;;
    *) echo "unknown part: $p (python go node java)" >&2; exit 2 ;;
  esac
done
echo "compat clients installed"
