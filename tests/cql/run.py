#!/usr/bin/env python3
"""CQL golden-file runner: tests/cql/*.cql -> *.result, through the DataStax python driver.

    run.py [--host H] [--port P] [--record] [--no-known] [--jobs N] [--print-differences]
           [FILE.cql ...]                                  (default: every tests/cql/*.cql)

Each statement of a file runs in order, one at a time, on one session per file, and is
rendered as a block of stable text:

    === [7] SELECT k, v FROM t WHERE k = 1
    columns: k int, v text
    row: 1, 'one'
    (1 rows)

or `OK` (void, schema-change and set-keyspace results), or `ERROR <code name>` followed by
`msg: <server message>`. Values are decoded from the raw bytes of the response (not by the
driver), so collections keep the order the server sent, empty values show as `<empty>`,
floats print exactly, blobs as 0x hex, uuids lowercase, timestamps as UTC ISO with
milliseconds (see render()).

Comparison rules (the default mode compares with X.result):
  * every line must be equal except `msg:` lines: error messages are recorded for the
    reader but never compared (Amphora's wording may differ; the error code must not);
  * a column named `ttl(...)` prints rounded to the nearest 10 (`~1000`), since a TTL
    counts down while the file runs;
  * a statement whose text no longer matches the one recorded is a difference too
    (re-record the file).

tests/cql/known-differences.txt lists `file.cql:N  reason` entries: a listed statement
that differs passes; a listed statement that now matches fails (remove it from the list);
an unlisted statement that differs fails. `--no-known` ignores the list (every statement
must match: what `make compat-cassandra` runs against Apache Cassandra).

Directives: a comment line `-- @name args` between statements applies to the next one:
  @fetch_size N      page size for this statement (the runner fetches every page);
                     0 disables paging
  @consistency CL    consistency level (default ONE)
  @serial CL         serial consistency level for conditional statements
  @prepared          prepare the statement, then execute it (no bind values)
  @bind [v, ...]     prepare, then execute with these values: Python literals (ints,
                     floats, strings, bytes b'..', lists, sets, dicts, tuples, None), UNSET
                     (an unset value) and Decimal('1.5') / UUID('...') / Date(days)
  @types_only        print columns and the row count, not the values (now(), uuid() ...)
  @sleep S           wait S seconds (a float) before the statement (TTL expiry)
Inside a statement, @@REPEAT(N,text)@@ expands to text repeated N times before it is sent
(for over-limit statements without megabyte files); the rendered statement keeps the macro.

Exit status: 0 if every statement matched (or is a listed known difference), 1 otherwise.
"""

import argparse
import ast
import concurrent.futures
import datetime
import difflib
import ipaddress
import os
import re
import struct
import sys
import time
import uuid
from decimal import Decimal

from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster, ExecutionProfile, EXEC_PROFILE_DEFAULT
from cassandra.policies import RoundRobinPolicy
from cassandra.protocol import ResultMessage, _ProtocolHandler, read_int
from cassandra import util
from cassandra.query import UNSET_VALUE, SimpleStatement, tuple_factory

HERE = os.path.dirname(os.path.abspath(__file__))
KNOWN_FILE = os.path.join(HERE, "known-differences.txt")

# ---------------------------------------------------------------- raw result decoding


class RawResultMessage(ResultMessage):
    """A RESULT whose rows stay raw bytes: the runner decodes them itself (render())."""

    def recv_results_rows(self, f, protocol_version, user_type_map, result_metadata,
                          column_encryption_policy):
        self.recv_results_metadata(f, user_type_map)
        column_metadata = self.column_metadata or result_metadata
        rowcount = read_int(f)
        self.parsed_rows = [tuple(self.recv_row(f, len(column_metadata)))
                            for _ in range(rowcount)]
        self.column_names = [c[2] for c in column_metadata]
        self.column_types = [c[3] for c in column_metadata]


class RawProtocolHandler(_ProtocolHandler):
    message_types_by_opcode = dict(_ProtocolHandler.message_types_by_opcode)
    message_types_by_opcode[RawResultMessage.opcode] = RawResultMessage


def type_name(t):
    """The CQL name of a driver type class, as the result metadata describes it."""
    if getattr(t, "typename", "").endswith("VectorType") and getattr(t, "subtype", None):
        return "vector<%s, %d>" % (type_name(t.subtype), t.vector_size)
    name = getattr(t, "typename", "")
    sub = getattr(t, "subtypes", ())
    if name in ("list", "set", "map") and sub:
        return "%s<%s>" % (name, ", ".join(type_name(x) for x in sub))
    if name == "tuple" and sub:
        return "frozen<tuple<%s>>" % ", ".join(type_name(x) for x in sub)
    try:
        return t.cql_parameterized_type()
    except Exception:  # an unknown custom type
        return str(getattr(t, "typename", t))


def quote_text(s):
    out = []
    for ch in s:
        if ch == "'":
            out.append("''")
        elif ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def render_float(x):
    if x != x:
        return "NaN"
    if x == float("inf"):
        return "Infinity"
    if x == float("-inf"):
        return "-Infinity"
    return repr(x)


EPOCH = datetime.datetime(1970, 1, 1)


def render_timestamp(ms):
    try:
        d = EPOCH + datetime.timedelta(milliseconds=ms)
        return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (
            d.year, d.month, d.day, d.hour, d.minute, d.second, d.microsecond // 1000)
    except OverflowError:
        return "%dms" % ms


def render_date(days):
    try:
        d = datetime.date(1970, 1, 1) + datetime.timedelta(days=days)
        return "%04d-%02d-%02d" % (d.year, d.month, d.day)
    except OverflowError:
        return "%ddays" % days


def render_time(ns):
    s, frac = divmod(ns, 1_000_000_000)
    return "%02d:%02d:%02d.%09d" % (s // 3600, s // 60 % 60, s % 60, frac)


def read_vint(b, p):
    """Cassandra's unsigned vint: returns (value, next position)."""
    first = b[p]
    extra = 0
    mask = 0x80
    while extra < 8 and first & mask:
        extra += 1
        mask >>= 1
    value = first & (0xFF >> extra) if extra < 8 else 0
    for i in range(extra):
        value = (value << 8) | b[p + 1 + i]
    return value, p + 1 + extra


def unzigzag(v):
    return (v >> 1) ^ -(v & 1)


def signed(b):
    return int.from_bytes(b, "big", signed=True)


class Malformed(Exception):
    pass


def decode_items(b, n_expected=None):
    """[int32 count] then count x [int32 length][bytes] (length < 0: null)."""
    if len(b) < 4:
        raise Malformed("short collection")
    n = signed(b[:4])
    p = 4
    items = []
    for _ in range(n):
        ln = signed(b[p:p + 4])
        p += 4
        if ln < 0:
            items.append(None)
        else:
            items.append(b[p:p + ln])
            p += ln
    if p != len(b):
        raise Malformed("%d trailing bytes" % (len(b) - p))
    return items


FIXED_VECTOR_SIZES = {"float": 4, "int": 4, "bigint": 8, "double": 8, "boolean": 1,
                      "timestamp": 8, "uuid": 16, "timeuuid": 16, "smallint": 2,
                      "tinyint": 1, "date": 4, "time": 8}


def render(t, b, ttl=False):
    """Canonical text of the raw bytes b of a value of driver type t (None: null)."""
    if b is None:
        return "null"
    try:
        return _render(t, b, ttl)
    except (Malformed, IndexError, struct.error, ValueError, UnicodeDecodeError) as e:
        return "<malformed %s 0x%s: %s>" % (type_name(t), b.hex(), e)


def _render(t, b, ttl):
    name = getattr(t, "typename", "")
    sub = getattr(t, "subtypes", ())
    if len(b) == 0 and name not in ("ascii", "text", "varchar", "blob"):
        return "<empty>"
    if name in ("ascii", "text", "varchar"):
        return quote_text(b.decode("utf-8"))
    if name == "blob":
        return "0x" + b.hex()
    if name == "boolean":
        return "true" if b[0] else "false"
    if name in ("int", "bigint", "smallint", "tinyint", "counter", "varint"):
        v = signed(b)
        if ttl:
            return "~%d" % ((v + 5) // 10 * 10)
        return str(v)
    if name == "decimal":
        scale = signed(b[:4])
        unscaled = signed(b[4:])
        return str(Decimal(unscaled).scaleb(-scale))
    if name == "float":
        return render_float(struct.unpack(">f", b)[0])
    if name == "double":
        return render_float(struct.unpack(">d", b)[0])
    if name == "timestamp":
        return render_timestamp(signed(b))
    if name == "date":
        return render_date(int.from_bytes(b, "big") - 2 ** 31)
    if name == "time":
        return render_time(signed(b))
    if name in ("uuid", "timeuuid"):
        return str(uuid.UUID(bytes=bytes(b)))
    if name == "inet":
        return str(ipaddress.ip_address(bytes(b)))
    if name == "duration":
        months, p = read_vint(b, 0)
        days, p = read_vint(b, p)
        nanos, p = read_vint(b, p)
        return "%dmo%dd%dns" % (unzigzag(months), unzigzag(days), unzigzag(nanos))
    if name == "list":
        return "[" + ", ".join(render(sub[0], x, ttl) for x in decode_items(b)) + "]"
    if name == "set":
        return "{" + ", ".join(render(sub[0], x) for x in decode_items(b)) + "}"
    if name == "map":
        n = signed(b[:4])
        p = 4
        parts = []
        for _ in range(n):
            vals = []
            for _k in range(2):
                ln = signed(b[p:p + 4])
                p += 4
                if ln < 0:
                    vals.append(None)
                else:
                    vals.append(b[p:p + ln])
                    p += ln
            parts.append("%s: %s" % (render(sub[0], vals[0]), render(sub[1], vals[1])))
        if p != len(b):
            raise Malformed("%d trailing bytes" % (len(b) - p))
        return "{" + ", ".join(parts) + "}"
    if name == "tuple" or getattr(t, "fieldnames", None) is not None and sub:
        p = 0
        vals = []
        for _ in sub:
            if p >= len(b):
                vals.append(None)
                continue
            ln = signed(b[p:p + 4])
            p += 4
            if ln < 0:
                vals.append(None)
            else:
                vals.append(b[p:p + ln])
                p += ln
        if p != len(b):
            raise Malformed("%d trailing bytes" % (len(b) - p))
        rendered = [render(s, v) for s, v in zip(sub, vals)]
        names = getattr(t, "fieldnames", None)
        if name != "tuple" and names:
            return "{" + ", ".join("%s: %s" % (n, r) for n, r in zip(names, rendered)) + "}"
        return "(" + ", ".join(rendered) + ")"
    if name.endswith("VectorType") and getattr(t, "subtype", None) is not None:
        elem = t.subtype
        dim = t.vector_size
        size = FIXED_VECTOR_SIZES.get(getattr(elem, "typename", ""))
        out = []
        p = 0
        while p < len(b):
            if size is None:
                ln, p = read_vint(b, p)
            else:
                ln = size
            out.append(render(elem, b[p:p + ln]))
            p += ln
        if dim is not None and len(out) != dim:
            raise Malformed("vector of %d elements, want %d" % (len(out), dim))
        return "[" + ", ".join(out) + "]"
    return "<%s 0x%s>" % (type_name(t), b.hex())


# ---------------------------------------------------------------- statement splitting


class Statement:
    def __init__(self, index, text, line, directives):
        self.index = index
        self.text = text
        self.line = line
        self.directives = directives


DIRECTIVE = re.compile(r"^\s*--\s*@(\w+)\s*(.*?)\s*$")


def split_statements(src):
    """Splits a .cql file at `;` outside strings, quoted names and comments."""
    stmts = []
    directives = {}
    i = 0
    n = len(src)
    start = None  # offset of the first non-comment character of the current statement
    line = 1
    start_line = 1
    while i < n:
        c = src[i]
        two = src[i:i + 2]
        if start is None and c in " \t\r\n":
            if c == "\n":
                line += 1
            i += 1
            continue
        if two in ("--", "//"):
            j = src.find("\n", i)
            j = n if j < 0 else j
            if start is None:
                m = DIRECTIVE.match(src[i:j])
                if m:
                    directives[m.group(1).lower()] = m.group(2)
            i = j
            continue
        if two == "/*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += src.count("\n", i, j)
            i = j
            continue
        if start is None:
            start = i
            start_line = line
        if c in "'\"":
            j = i + 1
            while j < n:
                if src[j] == c:
                    if src[j + 1:j + 2] == c:
                        j += 2
                        continue
                    break
                j += 1
            line += src.count("\n", i, j)
            i = j + 1
            continue
        if two == "$$":
            j = src.find("$$", i + 2)
            j = n if j < 0 else j + 2
            line += src.count("\n", i, j)
            i = j
            continue
        if c == ";" and not inside_batch(src[start:i]):
            stmts.append(Statement(len(stmts) + 1, src[start:i].strip(), start_line, directives))
            directives = {}
            start = None
            i += 1
            continue
        if c == "\n":
            line += 1
        i += 1
    if start is not None and src[start:].strip():
        stmts.append(Statement(len(stmts) + 1, src[start:].strip(), start_line, directives))
    return stmts


BATCH_START = re.compile(r"^BEGIN\b", re.I)
BATCH_END = re.compile(r"\bAPPLY\s+BATCH\s*$", re.I)


def inside_batch(text):
    """A `;` inside BEGIN ... APPLY BATCH separates the batch's statements, not ours."""
    text = text.strip()
    return bool(BATCH_START.match(text)) and not BATCH_END.search(text)


REPEAT = re.compile(r"@@REPEAT\((\d+),(.*?)\)@@", re.S)


def expand(text):
    return REPEAT.sub(lambda m: m.group(2) * int(m.group(1)), text)


# ---------------------------------------------------------------- execution + rendering

ERROR_NAMES = {
    0x0000: "ServerError", 0x000A: "ProtocolError", 0x0100: "BadCredentials",
    0x1000: "Unavailable", 0x1001: "Overloaded", 0x1002: "IsBootstrapping",
    0x1003: "TruncateError", 0x1100: "WriteTimeout", 0x1200: "ReadTimeout",
    0x1300: "ReadFailure", 0x1400: "FunctionFailure", 0x1500: "WriteFailure",
    0x1600: "CdcWriteFailure", 0x1700: "CasWriteUnknown", 0x2000: "SyntaxError",
    0x2100: "Unauthorized", 0x2200: "Invalid", 0x2300: "ConfigError",
    0x2400: "AlreadyExists", 0x2500: "Unprepared",
}
# Exceptions the driver raises instead of the ErrorMessage (ErrorMessage.to_exception()).
ERROR_CLASSES = {
    "Unavailable": "Unavailable", "ReadTimeout": "ReadTimeout", "WriteTimeout": "WriteTimeout",
    "ReadFailure": "ReadFailure", "WriteFailure": "WriteFailure",
    "FunctionFailure": "FunctionFailure", "AlreadyExists": "AlreadyExists",
    "CoordinationFailure": "ServerError", "InvalidRequest": "Invalid",
    "Unauthorized": "Unauthorized", "AuthenticationFailed": "BadCredentials",
    "OperationTimedOut": "client:OperationTimedOut", "NoHostAvailable": "client:NoHostAvailable",
}


def unwrap(e):
    """The server's error inside the driver's NoHostAvailable (it retries a ServerError on
    the next host; with one host that ends in NoHostAvailable carrying the real error)."""
    inner = getattr(e, "errors", None)
    if type(e).__name__ == "NoHostAvailable" and isinstance(inner, dict) and len(inner) == 1:
        only = next(iter(inner.values()))
        if isinstance(only, Exception):
            return only
    return e


def error_name(e):
    code = getattr(e, "code", None)
    if isinstance(code, int) and code in ERROR_NAMES:
        return ERROR_NAMES[code]
    cls = type(e).__name__
    return ERROR_CLASSES.get(cls, "client:" + cls)


def error_message(e):
    msg = getattr(e, "message", None)
    if not isinstance(msg, str) or not msg:
        msg = str(e)
    msg = " ".join(msg.split())
    m = re.match(r'^Error from server: code=\w+ \[[^\]]*\] message="(.*)"( info=.*)?$', msg)
    if m:
        msg = m.group(1)
    return msg[:300]


CONSISTENCY = {name: getattr(ConsistencyLevel, name) for name in (
    "ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "SERIAL",
    "LOCAL_SERIAL", "LOCAL_ONE")}


def header(st):
    lines = st.text.split("\n")
    out = ["=== [%d] %s" % (st.index, lines[0].rstrip())]
    out += ["... " + ln.rstrip() for ln in lines[1:]]
    return out


BIND_CALLS = {"Decimal": Decimal, "UUID": uuid.UUID}


def bind_value(node):
    """A bind value from the AST of an @bind list: literals only, no evaluation."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -bind_value(node.operand)
    if isinstance(node, ast.List):
        return [bind_value(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(bind_value(e) for e in node.elts)
    if isinstance(node, ast.Set):
        return {bind_value(e) for e in node.elts}
    if isinstance(node, ast.Dict):
        return {bind_value(k): bind_value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name) and node.id == "UNSET":
        return UNSET_VALUE
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in BIND_CALLS and len(node.args) == 1 and not node.keywords):
        return BIND_CALLS[node.func.id](bind_value(node.args[0]))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "Date" and len(node.args) == 1):
        return util.Date(bind_value(node.args[0]))
    raise ValueError("unsupported @bind value: %s" % ast.dump(node))


def bind_values(text):
    tree = ast.parse(text, mode="eval").body
    if not isinstance(tree, ast.List):
        raise ValueError("@bind wants a list")
    return [bind_value(e) for e in tree.elts]


def run_statement(session, st):
    d = st.directives
    text = expand(st.text)
    kwargs = {}
    if "fetch_size" in d:
        # 0: no paging at all (the driver sends no page size)
        kwargs["fetch_size"] = int(d["fetch_size"]) or None
    cl = CONSISTENCY[d.get("consistency", "ONE").upper()]
    serial = CONSISTENCY[d["serial"].upper()] if "serial" in d else None
    out = []
    if "sleep" in d:
        time.sleep(float(d["sleep"]))
    try:
        if "prepared" in d or "bind" in d:
            values = bind_values(d["bind"]) if "bind" in d else ()
            stmt = session.prepare(text)
            stmt.consistency_level = cl
            if serial is not None:
                stmt.serial_consistency_level = serial
            if "fetch_size" in kwargs:
                stmt.fetch_size = kwargs["fetch_size"]
            rs = session.execute(stmt.bind(values), timeout=30)
        else:
            stmt = SimpleStatement(text, consistency_level=cl, serial_consistency_level=serial,
                                   **kwargs)
            rs = session.execute(stmt, timeout=30)
        names = rs.column_names
        if not names:
            rows = list(rs)
            out.append("OK" if not rows else "OK (%d rows without columns)" % len(rows))
            return out
        types = rs.column_types
        out.append("columns: " + ", ".join(
            "%s %s" % (n, type_name(t)) for n, t in zip(names, types)))
        ttl_cols = [n.lower().startswith("ttl(") for n in names]
        count = 0
        for row in rs:
            count += 1
            if "types_only" not in d:
                out.append("row: " + ", ".join(
                    render(t, v, ttl) for t, v, ttl in zip(types, row, ttl_cols)))
        out.append("(%d rows)" % count)
    except Exception as e:  # every server error is an outcome to render
        e = unwrap(e)
        out.append("ERROR " + error_name(e))
        out.append("msg: " + error_message(e))
    return out


def connect(host, port, protocol=None):
    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(),
                               row_factory=tuple_factory, request_timeout=30,
                               consistency_level=ConsistencyLevel.ONE)
    cluster = Cluster([host], port=port, execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                      schema_metadata_enabled=False, token_metadata_enabled=False,
                      connect_timeout=20, control_connection_timeout=20,
                      max_schema_agreement_wait=10,
                      **({"protocol_version": protocol} if protocol else {}))
    return cluster


UNRESPONSIVE = {"ERROR client:" + n for n in (
    "OperationTimedOut", "NoHostAvailable", "ConnectionShutdown", "ConnectionException")}


def run_file(cluster, path):
    with open(path, encoding="utf-8") as f:
        stmts = split_statements(f.read())
    session = cluster.connect()
    session.client_protocol_handler = RawProtocolHandler
    blocks = []
    unresponsive = 0
    try:
        for st in stmts:
            if unresponsive >= 3:
                # A hung or dead server: do not wait 30 s for each remaining statement.
                blocks.append((st, header(st), ["ERROR client:skipped",
                                                "msg: server unresponsive"]))
                continue
            body = run_statement(session, st)
            if body[0] in UNRESPONSIVE:
                unresponsive += 1
            else:
                unresponsive = 0
            blocks.append((st, header(st), body))
    finally:
        session.shutdown()
    return blocks


def format_blocks(blocks, source):
    out = ["# %s: recorded by tests/cql/run.py --record from %s. Do not edit by hand." %
           (os.path.basename(source[0]), source[1]), ""]
    for _st, head, body in blocks:
        out += head + body + [""]
    return "\n".join(out)


def parse_result(text):
    """X.result -> {index: (header lines, body lines)}"""
    blocks = {}
    cur = None
    for ln in text.split("\n"):
        m = re.match(r"^=== \[(\d+)\] ", ln)
        if m:
            cur = (int(m.group(1)), [ln], [])
            blocks[cur[0]] = cur[1:]
            continue
        if cur is None or ln == "" or ln.startswith("# "):
            continue
        if ln.startswith("... ") and not cur[2]:
            cur[1].append(ln)
        else:
            cur[2].append(ln)
    return blocks


def comparable(lines):
    return [ln for ln in lines if not ln.startswith("msg: ")]


def load_known():
    known = {}
    if not os.path.exists(KNOWN_FILE):
        return known
    with open(KNOWN_FILE, encoding="utf-8") as f:
        for ln in f:
            ln = ln.strip()
            if not ln or ln.startswith("#"):
                continue
            m = re.match(r"^(\S+\.cql):(\d+)\s+(.*)$", ln)
            if not m:
                print("known-differences.txt: bad line %r" % ln, file=sys.stderr)
                sys.exit(2)
            known[(m.group(1), int(m.group(2)))] = m.group(3)
    return known


def prune_known(keys):
    """Rewrites known-differences.txt without the lines of `keys` (file, index)."""
    with open(KNOWN_FILE, encoding="utf-8") as f:
        lines = f.readlines()
    kept = []
    for ln in lines:
        m = re.match(r"^(\S+\.cql):(\d+)\s", ln)
        if m and (m.group(1), int(m.group(2))) in keys:
            continue
        kept.append(ln)
    # drop a file's "# name.cql" header when none of its lines is left
    out = []
    for i, ln in enumerate(kept):
        if re.match(r"^# \S+\.cql$", ln.strip()):
            nxt = kept[i + 1] if i + 1 < len(kept) else ""
            if not re.match(r"^\S+\.cql:\d+\s", nxt):
                continue
        out.append(ln)
    text = re.sub(r"\n{3,}", "\n\n", "".join(out)).rstrip("\n") + "\n"
    with open(KNOWN_FILE, "w", encoding="utf-8") as f:
        f.write(text)


def short_reason(exp, act):
    e = [ln for ln in comparable(exp) if not ln.startswith("columns:")] or comparable(exp)
    a = [ln for ln in comparable(act) if not ln.startswith("columns:")] or comparable(act)
    for x, y in zip(comparable(exp), comparable(act)):
        if x != y:
            return "want %s; got %s" % (x[:70], y[:70])
    return "want %s; got %s" % ((e[-1] if e else "nothing")[:70], (a[-1] if a else "nothing")[:70])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--host", default=os.environ.get("CQL_HOST", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("CQL_PORT", "9042")))
    ap.add_argument("--record", action="store_true", help="write X.result instead of comparing")
    ap.add_argument("--source", default=None,
                    help="server named in the header of recorded files (default: "
                         "Apache Cassandra <its release_version>)")
    ap.add_argument("--force", action="store_true",
                    help="record from a server that is not bench/cassandra's Cassandra")
    ap.add_argument("--no-known", action="store_true",
                    help="ignore known-differences.txt: every statement must match")
    ap.add_argument("--print-differences", action="store_true",
                    help="print every difference as a known-differences.txt line")
    ap.add_argument("--prune-known", action="store_true",
                    help="delete the known-differences.txt lines of statements that now match")
    ap.add_argument("--jobs", type=int, default=1, help="files run in parallel")
    ap.add_argument("--protocol", type=int, default=None,
                    help="native protocol version (default: the highest both sides speak)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no diffs, only the summary")
    args = ap.parse_args()

    files = args.files or sorted(
        os.path.join(HERE, f) for f in os.listdir(HERE) if f.endswith(".cql"))
    known = {} if args.no_known else load_known()
    cluster = connect(args.host, args.port, args.protocol)
    probe = cluster.connect()  # fail fast when nothing listens
    try:
        local = probe.execute("SELECT cluster_name, release_version FROM system.local").one()
    finally:
        probe.shutdown()
    print("cql golden: server %s:%d, cluster %r, release %s" %
          (args.host, args.port, local[0], local[1]))
    if args.record:
        # The reference is Apache Cassandra as bench/cassandra/start.sh configures it; a
        # port reused by another server must not silently become the expected output.
        if local[0] != "amphora-peer" and not args.force:
            print("refusing to record from cluster %r: not the Cassandra that "
                  "bench/cassandra/start.sh starts (use --force)" % local[0], file=sys.stderr)
            return 2
        if args.source is None:
            args.source = "Apache Cassandra %s" % local[1]
    started = time.time()
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(run_file, cluster, p): p for p in files}
        for fut in concurrent.futures.as_completed(futs):
            results[futs[fut]] = fut.result()
    cluster.shutdown()

    total = differ = known_hit = fixed = 0
    diff_lines = []
    now_matching = set()
    for path in files:
        blocks = results[path]
        name = os.path.basename(path)
        total += len(blocks)
        rpath = path[:-4] + ".result"
        if args.record:
            with open(rpath, "w", encoding="utf-8") as f:
                f.write(format_blocks(blocks, (path, args.source)))
            print("recorded %s: %d statements" % (os.path.basename(rpath), len(blocks)))
            continue
        if not os.path.exists(rpath):
            print("%s: no %s (record it against Apache Cassandra first)" %
                  (name, os.path.basename(rpath)))
            differ += len(blocks)
            continue
        with open(rpath, encoding="utf-8") as f:
            expected = parse_result(f.read())
        if len(expected) > len(blocks):
            print("%s: %s holds %d statements, the file %d: re-record it" %
                  (name, os.path.basename(rpath), len(expected), len(blocks)))
            differ += len(expected) - len(blocks)
        for st, head, body in blocks:
            exp_head, exp_body = expected.get(st.index, ([], ["<not recorded>"]))
            same = exp_head == head and comparable(exp_body) == comparable(body)
            key = (name, st.index)
            if same and key in known:
                fixed += 1
                now_matching.add(key)
                print("%s:%d now matches: remove it from known-differences.txt" % key)
                continue
            if same:
                continue
            if key in known:
                known_hit += 1
                continue
            differ += 1
            if args.print_differences:
                diff_lines.append("%s:%d  %s" % (name, st.index, short_reason(exp_body, body)))
            if not args.quiet:
                print("--- %s:%d (line %d)" % (name, st.index, st.line))
                sys.stdout.writelines(
                    ln + "\n" for ln in difflib.unified_diff(
                        exp_head + exp_body, head + body, "expected", "actual", lineterm="", n=20))
        if (name, len(blocks) + 1) in known or any(
                k[0] == name and k[1] > len(blocks) for k in known):
            print("%s: known-differences.txt lists statements past the end of the file" % name)
            fixed += 1
    listed_files = {k[0] for k in known}
    missing = listed_files - {os.path.basename(p) for p in files}
    if args.files:
        missing = set()
    for m in sorted(missing):
        print("known-differences.txt lists %s, which does not exist" % m)
        fixed += 1
    if args.print_differences and diff_lines:
        print("\n# differences as known-differences.txt lines:")
        print("\n".join(diff_lines))
    if args.prune_known and now_matching:
        prune_known(now_matching)
        print("removed %d now-matching statements from known-differences.txt" % len(now_matching))
        fixed -= len(now_matching)
    took = time.time() - started
    if args.record:
        print("cql golden: recorded %d statements in %d files (%.0f s)" % (total, len(files), took))
        return 0
    print("cql golden: %d statements in %d files, %d differ, %d known differences, "
          "%d listed but now matching (%.0f s)" % (total, len(files), differ, known_hit, fixed, took))
    return 1 if differ or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
