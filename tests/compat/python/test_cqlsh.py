"""cqlsh as users run it: a subprocess. In .venv-datastax this is Apache cqlsh (PyPI
`cqlsh`, server-side DESCRIBE); in .venv-scylla it is scylla-cqlsh (server-side DESCRIBE,
client-side fallback on Syntax_error)."""

import csv
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import HOST, PORT

CQLSH = os.environ.get("COMPAT_CQLSH") or str(Path(sys.executable).parent / "cqlsh")


@pytest.fixture(scope="module")
def cqlsh_home(tmp_path_factory):
    # cqlsh reads ~/.cassandra/cqlshrc and writes history there: keep it private.
    return tmp_path_factory.mktemp("cqlsh-home")


def cqlsh(home, statement, timeout_s=180):
    env = dict(os.environ, HOME=str(home))
    p = subprocess.run([CQLSH, HOST, str(PORT), "--request-timeout=60",
                        "--connect-timeout=30", "-e", statement],
                       capture_output=True, text=True, timeout=timeout_s, env=env)
    assert p.returncode == 0, f"cqlsh failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    errors = [l for l in p.stderr.splitlines() if "error" in l.lower()]
    assert not errors, f"cqlsh reported errors:\n{p.stderr}"
    return p.stdout


def test_cqlsh_is_installed():
    assert Path(CQLSH).exists(), CQLSH


def test_describe_keyspaces(cqlsh_home, keyspace):
    out = cqlsh(cqlsh_home, "DESCRIBE KEYSPACES")
    names = out.split()
    assert keyspace in names, out
    assert "system" in names and "system_schema" in names, out


def test_describe_table_recreates_it(cqlsh_home, cluster, session, keyspace):
    session.execute(f"CREATE TYPE IF NOT EXISTS {keyspace}.point (x int, y int)")
    session.execute(
        f"CREATE TABLE {keyspace}.desc_src (a int, b text, c timestamp, s int static, "
        f"m map<text, int>, p frozen<point>, l list<frozen<tuple<int, text>>>, "
        "PRIMARY KEY ((a, b), c)) WITH CLUSTERING ORDER BY (c DESC) "
        "AND comment = 'described' AND gc_grace_seconds = 3600 "
        "AND default_time_to_live = 60")
    out = cqlsh(cqlsh_home, f"DESCRIBE TABLE {keyspace}.desc_src")
    assert f"CREATE TABLE {keyspace}.desc_src" in out, out
    # Apache cqlsh may print a version WARNING line first; the DDL starts at CREATE.
    ddl = out[out.index("CREATE TABLE"):]
    ddl = ddl.replace(f"{keyspace}.desc_src", f"{keyspace}.desc_copy")
    statements = [s.strip() for s in ddl.split(";") if s.strip()]
    assert len(statements) == 1, statements  # no indexes/views on this table
    session.execute(statements[0])

    cluster.refresh_table_metadata(keyspace, "desc_copy")
    tables = cluster.metadata.keyspaces[keyspace].tables
    src, copy = tables["desc_src"], tables["desc_copy"]
    assert [c.name for c in copy.partition_key] == ["a", "b"]
    assert [c.name for c in copy.clustering_key] == ["c"]
    assert copy.columns["c"].is_reversed
    assert copy.columns["s"].is_static
    assert {n: c.cql_type for n, c in copy.columns.items()} == \
        {n: c.cql_type for n, c in src.columns.items()}
    for opt in ("comment", "gc_grace_seconds", "default_time_to_live"):
        assert copy.options[opt] == src.options[opt], opt
    assert copy.options["comment"] == "described"


def test_copy_to_and_from(cqlsh_home, session, keyspace, tmp_path):
    src, dst = f"{keyspace}.copy_src", f"{keyspace}.copy_dst"
    for t in (src, dst):
        session.execute(f"CREATE TABLE {t} (k int, c int, v text, f double, "
                        "PRIMARY KEY (k, c))")
    ins = session.prepare(f"INSERT INTO {src} (k, c, v, f) VALUES (?, ?, ?, ?)")
    rows = {(k, c): (f"v,{k}\"{c}", k * 0.5 + c) for k in range(50) for c in range(5)}
    for (k, c), (v, f) in rows.items():
        session.execute(ins, [k, c, v, f])

    path = tmp_path / "export.csv"
    out = cqlsh(cqlsh_home, f"COPY {src} (k, c, v, f) TO '{path}' WITH HEADER = true")
    assert "250 rows exported" in out, out
    with open(path, newline="") as fh:
        # cqlsh COPY defaults: QUOTE='"', ESCAPE='\\'
        exported = list(csv.reader(fh, escapechar="\\", doublequote=False))
    assert exported[0] == ["k", "c", "v", "f"]
    assert len(exported) == 251
    assert {(int(r[0]), int(r[1])): (r[2], float(r[3])) for r in exported[1:]} == rows

    out = cqlsh(cqlsh_home, f"COPY {dst} (k, c, v, f) FROM '{path}' WITH HEADER = true")
    assert "250 rows imported" in out, out
    assert session.execute(f"SELECT count(*) FROM {dst}").one()[0] == 250
    got = {(r.k, r.c): (r.v, r.f) for r in session.execute(f"SELECT k, c, v, f FROM {dst}")}
    assert got == rows


def test_select_output(cqlsh_home, session, keyspace):
    t = f"{keyspace}.shown"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, t text, m map<text, int>, "
                    "s set<int>, u uuid)")
    for k in range(3):
        session.execute(f"INSERT INTO {t} (k, t, m, s, u) VALUES ({k}, 'row{k}', "
                        f"{{'a': {k}}}, {{{k}, 10}}, 123e4567-e89b-42d3-a456-42661417400{k})")
    out = cqlsh(cqlsh_home, f"SELECT k, t, m, s, u FROM {t}")
    assert "(3 rows)" in out, out
    header = next(l for l in out.splitlines() if "|" in l)
    assert [c.strip() for c in header.split("|")] == ["k", "t", "m", "s", "u"], header
    for k in range(3):
        line = next((l for l in out.splitlines() if f"row{k}" in l), None)
        assert line is not None, out
        cells = [c.strip() for c in line.split("|")]
        assert cells == [str(k), f"row{k}", f"{{'a': {k}}}", f"{{{k}, 10}}",
                         f"123e4567-e89b-42d3-a456-42661417400{k}"], line


def test_describe_keyspace_recreates_it(cqlsh_home, cluster, session):
    tag = uuid.uuid4().hex[:8]
    src, dst = f"compat_desc_{tag}_src", f"compat_desc_{tag}_dst"
    for ks in (src, dst):
        session.execute(f"DROP KEYSPACE IF EXISTS {ks}")
    session.execute(f"CREATE KEYSPACE {src} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1} "
                    "AND durable_writes = true")
    try:
        session.execute(f"CREATE TYPE {src}.addr (street text, zip int)")
        session.execute(f"CREATE TYPE {src}.person (name text, home frozen<addr>)")
        session.execute(f"CREATE TABLE {src}.people (id uuid PRIMARY KEY, p frozen<person>, "
                        "tags set<text>, scores map<text, double>, pair tuple<int, text>, "
                        "emb vector<float, 3>) WITH comment = 'people'")
        session.execute(f"CREATE TABLE {src}.events (day date, ts timestamp, seq int, "
                        "note text, owner text static, PRIMARY KEY ((day), ts, seq)) "
                        "WITH CLUSTERING ORDER BY (ts DESC, seq ASC) "
                        "AND default_time_to_live = 86400")
        session.execute(f"CREATE TABLE {src}.hits (page text PRIMARY KEY, n counter)")
        out = cqlsh(cqlsh_home, f"DESCRIBE KEYSPACE {src}")
        ddl = out[out.index("CREATE KEYSPACE"):].replace(src, dst)
        statements = [s.strip() for s in ddl.split(";") if s.strip()]
        kinds = [" ".join(s.split()[:2]).upper() for s in statements]
        assert kinds == ["CREATE KEYSPACE"] + ["CREATE TYPE"] * 2 + ["CREATE TABLE"] * 3, kinds
        for s in statements:
            session.execute(s)
        cluster.refresh_schema_metadata()
        a, b = cluster.metadata.keyspaces[src], cluster.metadata.keyspaces[dst]
        assert a.replication_strategy.export_for_schema() == \
            b.replication_strategy.export_for_schema()
        assert set(a.user_types) == set(b.user_types) == {"addr", "person"}
        assert set(a.tables) == set(b.tables) == {"people", "events", "hits"}
        for name in a.tables:
            # the driver's own rendering of both tables is identical but for the keyspace
            assert b.tables[name].export_as_string().replace(dst, src) == \
                a.tables[name].export_as_string(), name
    finally:
        for ks in (src, dst):
            session.execute(f"DROP KEYSPACE IF EXISTS {ks}")


def test_tracing_on_shows_the_request_events(cqlsh_home, session, keyspace):
    t = f"{keyspace}.traced"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, v text)")
    session.execute(f"INSERT INTO {t} (k, v) VALUES (1, 'one')")
    out = cqlsh(cqlsh_home, f"TRACING ON; SELECT v FROM {t} WHERE k = 1;")
    assert "Tracing session:" in out, out
    # cqlsh prints the events as a table: activity | timestamp | source | source_elapsed | client
    assert "Parsing SELECT v FROM" in out, out
    assert "Request complete" in out, out
    assert "one" in out, out


def test_server_warnings_are_printed(cqlsh_home, session, keyspace):
    t = f"{keyspace}.warn_cqlsh"
    session.execute(f"CREATE TABLE IF NOT EXISTS {t} (k int PRIMARY KEY, v int)")
    session.execute(f"INSERT INTO {t} (k, v) VALUES (1, 1)")
    out = cqlsh(cqlsh_home, f"SELECT count(*) FROM {t}")
    assert "Warnings :" in out, out
    assert "Aggregation query used without partition key" in out, out
    out = cqlsh(cqlsh_home, f"SELECT count(*) FROM {t} WHERE k = 1")
    assert "Warnings" not in out, out


def test_describe_schema_and_full_schema(cqlsh_home, session, keyspace):
    """DESCRIBE SCHEMA gives every user keyspace's DDL and no system keyspace; DESCRIBE FULL
    SCHEMA adds the system keyspaces."""
    session.execute(f"CREATE TABLE IF NOT EXISTS {keyspace}.described_schema (k int PRIMARY KEY, v text)")
    out = cqlsh(cqlsh_home, "DESCRIBE SCHEMA")
    assert f"CREATE KEYSPACE {keyspace} " in out, out
    assert f"CREATE TABLE {keyspace}.described_schema" in out, out
    assert "CREATE KEYSPACE system_schema" not in out, out
    assert "CREATE TABLE system.local" not in out, out
    full = cqlsh(cqlsh_home, "DESCRIBE FULL SCHEMA")
    assert f"CREATE TABLE {keyspace}.described_schema" in full, full
    assert "CREATE KEYSPACE system_schema" in full, full
    assert "CREATE TABLE system.local" in full, full
