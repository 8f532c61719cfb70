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


# ---------------------------------------------------------------------------------------
# Protocol v5 framing (native_protocol_v5.spec §2): after READY, envelopes travel inside
# frames with a CRC24-protected header and a CRC32-protected payload, little-endian.

CRC24_INIT = 0x875060
CRC24_POLY = 0x1974F0B
# CRC32 of the payload is seeded with these four bytes (Cassandra net/Crc.java).
CRC32_SEED = b"\xfa\x2d\x55\xca"
MAX_PAYLOAD = 128 * 1024 - 1


def crc24(data):
    crc = CRC24_INIT
    for b in data:
        crc ^= b << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= CRC24_POLY
    return crc & 0xFFFFFF


def crc32(payload):
    import zlib
    return zlib.crc32(payload, zlib.crc32(CRC32_SEED)) & 0xFFFFFFFF


def _le(n, width):
    return n.to_bytes(width, "little")


def v5_frame(payload, self_contained=True, lz4_block=None, corrupt_header=False):
    """One v5 frame around `payload`. With lz4_block (the lz4.block module) the payload is
    LZ4-compressed, or stored with uncompressed length 0 when that does not shrink it."""
    assert len(payload) <= MAX_PAYLOAD
    if lz4_block is None:
        header = _le(len(payload) | (int(self_contained) << 17), 3)
        body = payload
    else:
        packed = lz4_block.compress(payload, store_size=False)
        if len(packed) < len(payload):
            body, ulen = packed, len(payload)
        else:
            body, ulen = payload, 0
        header = _le(len(body) | (ulen << 17) | (int(self_contained) << 34), 5)
    crc = crc24(header)
    if corrupt_header:
        crc ^= 0x000001
    return header + _le(crc, 3) + body + _le(crc32(body), 4)


def read_v5_frame(sock, lz4_block=None):
    """Reads one frame, checking both CRCs; returns (payload, self_contained)."""
    hlen = 3 if lz4_block is None else 5
    header = _recv_exact(sock, hlen)
    got_crc = int.from_bytes(_recv_exact(sock, 3), "little")
    assert got_crc == crc24(header), f"bad CRC24 on frame header {header.hex()}"
    h = int.from_bytes(header, "little")
    length = h & 0x1FFFF
    if lz4_block is None:
        self_contained = bool(h >> 17 & 1)
        ulen = 0
    else:
        ulen = h >> 17 & 0x1FFFF
        self_contained = bool(h >> 34 & 1)
    body = _recv_exact(sock, length)
    got_crc32 = int.from_bytes(_recv_exact(sock, 4), "little")
    assert got_crc32 == crc32(body), "bad CRC32 on frame payload"
    if lz4_block is not None and ulen:
        body = lz4_block.decompress(body, uncompressed_size=ulen)
    return body, self_contained


def v5_startup(sock, compression=None):
    """OPTIONS and STARTUP travel unframed even in v5; framing starts after READY."""
    opts = {"CQL_VERSION": "3.0.0"}
    if compression:
        opts["COMPRESSION"] = compression
    sock.sendall(frame(0x05, 0, OP_STARTUP, _string_map(opts)))
    v, _, _, opcode, body = read_frame(sock)
    assert v == 0x85, hex(v)
    if opcode != OP_READY:
        detail = parse_error(body)[:2] if opcode == OP_ERROR else ""
        raise AssertionError(f"v5 STARTUP answered with opcode {opcode:#x} {detail}")


def v5_query_envelope(cql, stream):
    # v5 query parameters: consistency [short], flags [int]
    body = struct.pack(">i", len(cql.encode())) + cql.encode() + struct.pack(">Hi", 0x0001, 0)
    return frame(0x05, stream, OP_QUERY, body)


def parse_envelopes(payload):
    """Splits a self-contained frame payload into (version, stream, opcode, body) tuples."""
    out = []
    pos = 0
    while pos < len(payload):
        version, flags, stream, opcode, length = struct.unpack_from(">BBhBi", payload, pos)
        out.append((version, stream, opcode, payload[pos + 9:pos + 9 + length]))
        pos += 9 + length
    assert pos == len(payload), "trailing bytes after the last envelope"
    return out


def single_text_cell(rows_body):
    """The value of a RESULT Rows body with exactly one text column and at least one row
    (the first row's cell)."""
    r = Reader(rows_body)
    assert r.int() == 0x0002, "not a Rows result"
    flags = r.int()
    assert r.int() == 1, "expected exactly one column"
    if flags & 0x0002:  # Has_more_pages
        r.take(r.int())
    if flags & 0x0008:  # Metadata_changed (v5)
        r.short_bytes()
    if not flags & 0x0004:  # column spec unless No_metadata
        if flags & 0x0001:  # Global_tables_spec
            r.string(), r.string()
        else:
            r.string(), r.string()
        r.string()
        assert r.short() in (0x000A, 0x000D), "column is not text"
    assert r.int() >= 1, "no rows"
    return r.take(r.int()).decode()
