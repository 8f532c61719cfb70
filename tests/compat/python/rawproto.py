"""Minimal native-protocol v4 client for checks that no driver exposes: the SUPPORTED map,
version negotiation, and an EXECUTE of an id the server never prepared.

Frames are built by hand from the spec (`native_protocol_v4.spec` §2): 9-byte header
`version flags stream(i16) opcode length(i32)`, big-endian. Only unframed v4 is spoken,
so no v5 segment layer is needed.
"""

import socket
import struct

OP_ERROR = 0x00
OP_STARTUP = 0x01
OP_READY = 0x02
OP_OPTIONS = 0x05
OP_SUPPORTED = 0x06
OP_QUERY = 0x07
OP_RESULT = 0x08
OP_EXECUTE = 0x0A

ERR_PROTOCOL = 0x000A
ERR_UNPREPARED = 0x2500


def _string(s):
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def _string_map(m):
    out = struct.pack(">H", len(m))
    for k, v in m.items():
        out += _string(k) + _string(v)
    return out


def frame(version, stream, opcode, body=b"", flags=0):
    return struct.pack(">BBhBi", version, flags, stream, opcode, len(body)) + body


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_frame(sock):
    header = _recv_exact(sock, 9)
    version, flags, stream, opcode, length = struct.unpack(">BBhBi", header)
    body = _recv_exact(sock, length) if length else b""
    return version, flags, stream, opcode, body


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        b = self.data[self.pos:self.pos + n]
        if len(b) != n:
            raise ValueError("body too short")
        self.pos += n
        return b

    def short(self):
        return struct.unpack(">H", self.take(2))[0]

    def int(self):
        return struct.unpack(">i", self.take(4))[0]

    def string(self):
        return self.take(self.short()).decode()

    def short_bytes(self):
        return self.take(self.short())

    def string_list(self):
        return [self.string() for _ in range(self.short())]

    def string_multimap(self):
        return {self.string(): self.string_list() for _ in range(self.short())}


def connect(host, port, timeout_s=10):
    return socket.create_connection((host, port), timeout=timeout_s)


def parse_error(body):
    r = Reader(body)
    code = r.int()
    msg = r.string()
    return code, msg, r


def options(host, port):
    """OPTIONS → SUPPORTED as a dict of string lists."""
    with connect(host, port) as s:
        s.sendall(frame(0x04, 1, OP_OPTIONS))
        version, _, stream, opcode, body = read_frame(s)
        if opcode != OP_SUPPORTED:
            raise AssertionError(f"OPTIONS answered with opcode {opcode:#x}")
        return Reader(body).string_multimap()


def startup(sock, version=0x04):
    sock.sendall(frame(version, 1, OP_STARTUP, _string_map({"CQL_VERSION": "3.0.0"})))
    v, _, stream, opcode, body = read_frame(sock)
    if opcode != OP_READY:
        detail = parse_error(body)[:2] if opcode == OP_ERROR else ""
        raise AssertionError(f"STARTUP answered with opcode {opcode:#x} {detail}")


def execute_unknown_id(host, port, prepared_id):
    """EXECUTE of an id the server never prepared; returns (opcode, error code, message,
    id echoed in an Unprepared body or None)."""
    with connect(host, port) as s:
        startup(s)
        # v4 EXECUTE: [short bytes id] consistency(short) flags(byte)
        body = struct.pack(">H", len(prepared_id)) + prepared_id + struct.pack(">HB", 0x0001, 0)
        s.sendall(frame(0x04, 7, OP_EXECUTE, body))
        _, _, stream, opcode, body = read_frame(s)
        assert stream == 7, f"response stream {stream} != request stream 7"
        if opcode != OP_ERROR:
            return opcode, None, None, None
        code, msg, r = parse_error(body)
        echoed = r.short_bytes() if code == ERR_UNPREPARED else None
        return opcode, code, msg, echoed


def startup_with_version(host, port, version_byte, stream=3):
    """STARTUP with an arbitrary version byte (e.g. 0x42 = DSE_V2, what python and Java
    drivers try first). Returns (response version byte, opcode, error code, message)."""
    with connect(host, port) as s:
        s.sendall(frame(version_byte, stream, OP_STARTUP,
                        _string_map({"CQL_VERSION": "3.0.0"})))
        v, _, _, opcode, body = read_frame(s)
        if opcode == OP_ERROR:
            code, msg, _ = parse_error(body)
            return v, opcode, code, msg
        return v, opcode, None, None


def query(sock, cql, stream=2, consistency=0x0001):
    """One unpaged v4 QUERY without values; returns (opcode, body)."""
    body = struct.pack(">i", len(cql.encode())) + cql.encode() + struct.pack(">HB", consistency, 0)
    sock.sendall(frame(0x04, stream, OP_QUERY, body))
    _, _, s, opcode, body = read_frame(sock)
    assert s == stream
    return opcode, body
