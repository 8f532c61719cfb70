"""Self-tests of tests/cql/run.py: statement splitting, directives, value rendering and the
comparison rules (no server needed).

    tests/compat/.venv-datastax/bin/python -m pytest -q tests/cql/test_run.py
"""

import os
import struct
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import run  # noqa: E402
from cassandra import cqltypes  # noqa: E402
from cassandra.query import UNSET_VALUE  # noqa: E402


def texts(src):
    return [s.text for s in run.split_statements(src)]


def test_split_on_semicolons_outside_strings_names_and_comments():
    src = """-- leading comment; not a statement
SELECT 'a;b' FROM t;
SELECT "we;ird" FROM t; /* c; d */ SELECT $$x;y$$ FROM t;
SELECT k, -- inner; comment
  v FROM t;
"""
    assert texts(src) == [
        "SELECT 'a;b' FROM t",
        'SELECT "we;ird" FROM t',
        "SELECT $$x;y$$ FROM t",
        "SELECT k, -- inner; comment\n  v FROM t",
    ]


def test_doubled_quotes_stay_inside_the_string():
    assert texts("INSERT INTO t (k) VALUES ('it''s; fine');SELECT 1;") == [
        "INSERT INTO t (k) VALUES ('it''s; fine')", "SELECT 1"]


def test_a_batch_is_one_statement():
    src = "BEGIN BATCH INSERT INTO t (k) VALUES (1); INSERT INTO t (k) VALUES (2); APPLY BATCH;\n" \
          "begin unlogged batch delete from t where k = 1; apply batch;\nSELECT * FROM t;"
    got = texts(src)
    assert len(got) == 3
    assert got[0].endswith("APPLY BATCH") and got[0].count(";") == 2
    assert got[1].startswith("begin unlogged")
    assert got[2] == "SELECT * FROM t"


def test_directives_apply_to_the_next_statement_only():
    src = "-- @fetch_size 2\n-- @bind [1, 'a']\nSELECT * FROM t;\nSELECT 2;\n"
    stmts = run.split_statements(src)
    assert stmts[0].directives == {"fetch_size": "2", "bind": "[1, 'a']"}
    assert stmts[1].directives == {}
    assert [s.index for s in stmts] == [1, 2]
    assert stmts[1].line == 4


def test_repeat_macro_expands():
    assert run.expand("VALUES ('@@REPEAT(3,ab)@@')") == "VALUES ('ababab')"


def test_bind_values_are_literals_only():
    vals = run.bind_values("[1, -2.5, 'x', b'\\x01', None, UNSET, [1, 2], {'a': 1}, (1, 'b'), "
                           "Decimal('1.50'), UUID('550e8400-e29b-41d4-a716-446655440000')]")
    assert vals[:5] == [1, -2.5, "x", b"\x01", None]
    assert vals[5] is UNSET_VALUE
    assert vals[6:9] == [[1, 2], {"a": 1}, (1, "b")]
    assert str(vals[9]) == "1.50"
    assert vals[10] == uuid.UUID("550e8400-e29b-41d4-a716-446655440000")
    for bad in ("[__import__('os')]", "[open('x')]", "1"):
        try:
            run.bind_values(bad)
        except ValueError:
            continue
        raise AssertionError("accepted %r" % bad)


def ctype(spec):
    return cqltypes.lookup_casstype(spec)


def items(*elems):
    out = struct.pack(">i", len(elems))
    for e in elems:
        out += struct.pack(">i", len(e)) + e
    return out


def test_render_scalars():
    assert run.render(ctype("Int32Type"), struct.pack(">i", -7)) == "-7"
    assert run.render(ctype("Int32Type"), b"") == "<empty>"
    assert run.render(ctype("Int32Type"), None) == "null"
    assert run.render(ctype("UTF8Type"), b"") == "''"
    assert run.render(ctype("UTF8Type"), "it's\n".encode()) == "'it''s\\x0a'"
    assert run.render(ctype("BytesType"), b"\xca\xfe") == "0xcafe"
    assert run.render(ctype("DoubleType"), struct.pack(">d", 0.1)) == "0.1"
    assert run.render(ctype("FloatType"), struct.pack(">f", float("nan"))) == "NaN"
    assert run.render(ctype("DoubleType"), struct.pack(">d", float("-inf"))) == "-Infinity"
    assert run.render(ctype("DecimalType"), struct.pack(">i", 2) + bytes([0x01, 0x2c])) == "3.00"
    assert run.render(ctype("TimestampType"), struct.pack(">q", 1577836800123)) == \
        "2020-01-01T00:00:00.123Z"
    assert run.render(ctype("SimpleDateType"), struct.pack(">I", 2 ** 31 + 1)) == "1970-01-02"
    assert run.render(ctype("TimeType"), struct.pack(">q", 3_600_000_000_001)) == \
        "01:00:00.000000001"
    u = uuid.UUID("550E8400-E29B-41D4-A716-446655440000")
    assert run.render(ctype("UUIDType"), u.bytes) == str(u).lower()
    assert run.render(ctype("InetAddressType"), bytes([127, 0, 0, 1])) == "127.0.0.1"
    # duration: zigzag vints 1 month, 2 days, 3 ns
    assert run.render(ctype("DurationType"), bytes([2, 4, 6])) == "1mo2d3ns"


def test_render_keeps_the_server_order_of_sets_and_maps():
    s = ctype("SetType(UTF8Type)")
    assert run.render(s, items(b"z", b"a")) == "{'z', 'a'}"
    m = ctype("MapType(Int32Type,BooleanType)")
    body = struct.pack(">i", 2)
    for k, v in ((2, b"\x01"), (1, b"\x00")):
        body += struct.pack(">i", 4) + struct.pack(">i", k) + struct.pack(">i", 1) + v
    assert run.render(m, body) == "{2: true, 1: false}"


def test_ttl_columns_round_to_ten():
    i = ctype("Int32Type")
    assert run.render(i, struct.pack(">i", 996), ttl=True) == "~1000"
    assert run.render(i, struct.pack(">i", 1000), ttl=True) == "~1000"
    assert run.render(ctype("ListType(Int32Type)"), items(struct.pack(">i", 999)), ttl=True) \
        == "[~1000]"


def test_malformed_values_are_shown_not_raised():
    out = run.render(ctype("ListType(Int32Type)"), struct.pack(">i", 1))
    assert out.startswith("<malformed list<int>")


def test_comparison_ignores_messages_only():
    exp = ["ERROR Invalid", "msg: one wording"]
    assert run.comparable(exp) == run.comparable(["ERROR Invalid", "msg: another"])
    assert run.comparable(exp) != run.comparable(["ERROR SyntaxError", "msg: one wording"])


def test_result_files_round_trip():
    stmts = run.split_statements("SELECT 1;\nSELECT\n  2;")
    blocks = [(s, run.header(s), body) for s, body in
              zip(stmts, [["OK"], ["columns: x int", "row: 2", "(1 rows)"]])]
    parsed = run.parse_result(run.format_blocks(blocks, ("x.cql", "test")))
    assert parsed[1] == (["=== [1] SELECT 1"], ["OK"])
    assert parsed[2] == (["=== [2] SELECT", "...   2"], ["columns: x int", "row: 2", "(1 rows)"])


def test_prune_known_removes_only_the_given_lines(tmp_path, monkeypatch):
    known = tmp_path / "known.txt"
    known.write_text("# header\n\n# a.cql\na.cql:1  one\na.cql:2  two\n\n# b.cql\nb.cql:7  seven\n")
    monkeypatch.setattr(run, "KNOWN_FILE", str(known))
    run.prune_known({("a.cql", 2), ("b.cql", 7)})
    assert known.read_text() == "# header\n\n# a.cql\na.cql:1  one\n"
    assert run.load_known() == {("a.cql", 1): "one"}
