"""A fake "sharded server" in front of Apache Cassandra, used only to check that the shard
checks in python/test_scylla.py are right before Amphora can run them.

It forwards native-protocol v4 traffic to Cassandra and pretends to have N shards:
- SUPPORTED gains the SCYLLA_* sharding keys (SCYLLA_SHARD = the connection's shard);
- a connection on the plain port gets shards round-robin, one on the shard-aware port gets
  `source_port % N`, as cql-compat.md §3.4 prescribes;
- every QUERY/PREPARE/EXECUTE/BATCH counts as a request on the connection's shard, served
  as `amphora_cql_requests_total{shard="N"}` over HTTP (the metric Amphora exposes);
- ` USING TIMEOUT <n>ms`, which scylla-driver appends to its metadata queries once it sees
  sharding keys, is stripped (Cassandra does not know it);
- v5 is refused with the standard "Invalid or unsupported protocol version" error, so the
  driver settles on v4 and frames stay simple to parse (lz4 bodies are decompressed with
  the `lz4` package when a QUERY must be rewritten).

Because the fake counts a request on the shard of the connection it arrived on, the
routing check passes only if the driver sends each request over the owning shard's
connection, which is what the check is meant to verify.

    python tools/shard_proxy.py --upstream 127.0.0.1:9042 --port 9043 \
        --aware-port 19043 --metrics-port 9181 --shards 3
"""

import argparse
import asyncio
import itertools
import re
import struct

try:
    import lz4.block
except ImportError:  # only needed when the driver negotiated lz4
    lz4 = None

OPTS = None
COUNTS = {}
PLAIN_RR = itertools.count()
TIMEOUT_RE = re.compile(rb"\s+USING TIMEOUT \d+ms\s*$", re.I)


def _string(s):
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def rewrite_supported(body, shard):
    pos = 0
    (n,) = struct.unpack_from(">H", body, pos)
    pos += 2
    out = {}
    for _ in range(n):
        (kl,) = struct.unpack_from(">H", body, pos)
        key = body[pos + 2:pos + 2 + kl].decode()
        pos += 2 + kl
        (m,) = struct.unpack_from(">H", body, pos)
        pos += 2
        vals = []
        for _ in range(m):
            (vl,) = struct.unpack_from(">H", body, pos)
            vals.append(body[pos + 2:pos + 2 + vl].decode())
            pos += 2 + vl
        out[key] = vals
    out.update({
        "SCYLLA_SHARD": [str(shard)],
        "SCYLLA_NR_SHARDS": [str(OPTS.shards)],
        "SCYLLA_PARTITIONER": ["org.apache.cassandra.dht.Murmur3Partitioner"],
        "SCYLLA_SHARDING_ALGORITHM": ["biased-token-round-robin"],
        "SCYLLA_SHARDING_IGNORE_MSB": ["12"],
        "SCYLLA_SHARD_AWARE_PORT": [str(OPTS.aware_port)],
    })
    res = struct.pack(">H", len(out))
    for k, vals in out.items():
        res += _string(k) + struct.pack(">H", len(vals)) + b"".join(_string(v) for v in vals)
    return res


async def read_frame(reader):
    header = await reader.readexactly(9)
    length = struct.unpack(">i", header[5:9])[0]
    body = await reader.readexactly(length) if length else b""
    return header, body


def with_body(header, body, flags=None):
    h = bytearray(header)
    if flags is not None:
        h[1] = flags
    h[5:9] = struct.pack(">i", len(body))
    return bytes(h) + body


async def client_to_server(creader, swriter, cwriter, shard):
    while True:
        header, body = await read_frame(creader)
        version, flags, opcode = header[0], header[1], header[4]
        if version & 0x7F not in (3, 4):
            msg = f"Invalid or unsupported protocol version ({version & 0x7F}); " \
                  "supported versions are (3/v3, 4/v4)"
            err = struct.pack(">i", 0x000A) + _string(msg)
            cwriter.write(struct.pack(">BBhBi", 0x84, 0, struct.unpack(">h", header[2:4])[0],
                                      0x00, len(err)) + err)
            await cwriter.drain()
            cwriter.close()
            return
        if opcode in (0x07, 0x09, 0x0A, 0x0D):
            COUNTS[shard] += 1
        if opcode == 0x07:  # QUERY: strip USING TIMEOUT
            plain = body
            if flags & 0x01:
                n = struct.unpack(">I", body[:4])[0]
                plain = lz4.block.decompress(body[4:], uncompressed_size=n)
            qlen = struct.unpack(">i", plain[:4])[0]
            q = plain[4:4 + qlen]
            q2 = TIMEOUT_RE.sub(b"", q)
            if q2 != q:
                plain = struct.pack(">i", len(q2)) + q2 + plain[4 + qlen:]
                header, body, flags = header, plain, flags & ~0x01
                swriter.write(with_body(header, body, flags))
                await swriter.drain()
                continue
        swriter.write(header + body)
        await swriter.drain()


async def server_to_client(sreader, cwriter, shard):
    while True:
        header, body = await read_frame(sreader)
        if header[4] == 0x06 and not header[1] & 0x01:
            body = rewrite_supported(body, shard)
            cwriter.write(with_body(header, body))
        else:
            cwriter.write(header + body)
        await cwriter.drain()


async def handle(creader, cwriter, aware):
    peer_port = cwriter.get_extra_info("peername")[1]
    shard = peer_port % OPTS.shards if aware else next(PLAIN_RR) % OPTS.shards
    host, port = OPTS.upstream.rsplit(":", 1)
    sreader, swriter = await asyncio.open_connection(host, int(port))
    tasks = [asyncio.create_task(client_to_server(creader, swriter, cwriter, shard)),
             asyncio.create_task(server_to_client(sreader, cwriter, shard))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        swriter.close()
        cwriter.close()


async def metrics(reader, writer):
    try:
        await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    text = "# TYPE amphora_cql_requests_total counter\n" + "".join(
        f'amphora_cql_requests_total{{shard="{s}"}} {n}\n' for s, n in sorted(COUNTS.items()))
    body = text.encode()
    writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    writer.close()


async def main():
    global OPTS
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", default="127.0.0.1:9042")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--aware-port", type=int, required=True)
    p.add_argument("--metrics-port", type=int, required=True)
    p.add_argument("--shards", type=int, default=3)
    OPTS = p.parse_args()
    for s in range(OPTS.shards):
        COUNTS[s] = 0
    plain = await asyncio.start_server(lambda r, w: handle(r, w, False), "127.0.0.1", OPTS.port)
    aware = await asyncio.start_server(lambda r, w: handle(r, w, True), "127.0.0.1",
                                       OPTS.aware_port)
    prom = await asyncio.start_server(metrics, "127.0.0.1", OPTS.metrics_port)
    async with plain, aware, prom:
        await asyncio.gather(plain.serve_forever(), aware.serve_forever(), prom.serve_forever())


if __name__ == "__main__":
    asyncio.run(main())
