'use strict';
// Compatibility checks with the Node.js `cassandra-driver`: connect and discover the node,
// create schema, prepared round-trips of several types, paging, batches and errors.
// Target: COMPAT_HOST / COMPAT_PORT (default 127.0.0.1:9042).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const cassandra = require('cassandra-driver');

const { types } = cassandra;
const host = process.env.COMPAT_HOST || '127.0.0.1';
const port = Number(process.env.COMPAT_PORT || 9042);
const ks = `compat_node_${Date.now() % 1e9}`;

let client;

function newClient(extra = {}) {
  return new cassandra.Client({
    contactPoints: [`${host}:${port}`],
    localDataCenter: process.env.COMPAT_DC || 'datacenter1',
    socketOptions: { connectTimeout: 10000, readTimeout: 30000 },
    ...extra,
  });
}

before(async () => {
  client = newClient();
  await client.connect();
  await client.execute(`CREATE KEYSPACE ${ks} WITH replication = ` +
    `{'class': 'SimpleStrategy', 'replication_factor': 1}`);
});

after(async () => {
  try {
    await client.execute(`DROP KEYSPACE IF EXISTS ${ks}`);
  } finally {
    await client.shutdown();
  }
});

test('discovers the node and its tokens', async () => {
  const hosts = client.hosts.values();
  assert.equal(hosts.length, 1);
  const h = hosts[0];
  assert.equal(h.address, `${host}:${port}`);
  assert.match(h.cassandraVersion, /^5\.0/);
  assert.ok(h.datacenter && h.rack && h.hostId);
  assert.ok(h.tokens.length >= 1);
  // system.local.partitioner selects the tokenizer
  assert.equal(client.metadata.tokenizer.constructor.name, 'Murmur3Tokenizer');
  assert.equal(client.metadata.getTokenRanges().size, h.tokens.length);
  // The driver negotiated v4 or v5 (it starts at DSE_V2 and walks down).
  const v = client.controlConnection.protocolVersion;
  assert.ok(v === types.protocolVersion.v4 || v === types.protocolVersion.v5, `version ${v}`);
  // token map answers replicas for a key
  const replicas = client.getReplicas(ks, Buffer.from('test'));
  assert.equal(replicas.length, 1);
  assert.equal(replicas[0].address, h.address);
});

test('schema metadata after DDL', async () => {
  await client.execute(`CREATE TABLE ${ks}.meta (a int, b text, c timestamp, v list<int>, ` +
    'PRIMARY KEY ((a, b), c)) WITH CLUSTERING ORDER BY (c DESC)');
  const t = await client.metadata.getTable(ks, 'meta');
  assert.ok(t, 'table metadata missing');
  assert.deepEqual(t.partitionKeys.map((c) => c.name), ['a', 'b']);
  assert.deepEqual(t.clusteringKeys.map((c) => c.name), ['c']);
  assert.deepEqual(t.clusteringOrder, ['DESC']);
});

test('prepared round-trip of several types', async () => {
  await client.execute(`CREATE TABLE ${ks}.types (k int PRIMARY KEY, t text, bi bigint, ` +
    'b blob, bo boolean, u uuid, tu timeuuid, ts timestamp, d decimal, vi varint, db double, ' +
    'ip inet, dt date, tm time, du duration, l list<int>, s set<text>, m map<text, int>, ' +
    'tup tuple<int, text>)');
  const row = {
    k: 1,
    t: 'zażółć ✓',
    bi: types.Long.fromString('-9223372036854775808'),
    b: Buffer.from([0, 1, 254, 255]),
    bo: true,
    u: types.Uuid.fromString('123e4567-e89b-42d3-a456-426614174000'),
    tu: types.TimeUuid.fromString('50554d6e-29bb-11e5-b345-feff819cdc9f'),
    ts: new Date(Date.UTC(2024, 1, 29, 1, 2, 3, 456)),
    d: types.BigDecimal.fromString('-1234.5678'),
    vi: types.Integer.fromString('123456789012345678901234567890'),
    db: -0.125,
    ip: types.InetAddress.fromString('2001:db8::1'),
    dt: types.LocalDate.fromString('1999-12-31'),
    tm: types.LocalTime.fromString('13:14:15.123456789'),
    du: new types.Duration(14, 3, types.Long.fromString('5000000007')),
    l: [3, 1, 2],
    s: ['b', 'a'],
    m: { one: 1, two: 2 },
    tup: new types.Tuple(7, 'seven'),
  };
  const cols = Object.keys(row);
  await client.execute(
    `INSERT INTO ${ks}.types (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`,
    cols.map((c) => row[c]), { prepare: true });
  const rs = await client.execute(`SELECT * FROM ${ks}.types WHERE k = ?`, [1], { prepare: true });
  assert.equal(rs.rowLength, 1);
  const got = rs.first();
  assert.equal(got.t, row.t);
  assert.ok(got.bi.equals(row.bi));
  assert.deepEqual(got.b, row.b);
  assert.equal(got.bo, true);
  assert.ok(got.u.equals(row.u));
  assert.ok(got.tu.equals(row.tu));
  assert.equal(got.ts.getTime(), row.ts.getTime());
  assert.equal(got.d.toString(), '-1234.5678');
  assert.equal(got.vi.toString(), row.vi.toString());
  assert.equal(got.db, row.db);
  assert.ok(got.ip.equals(row.ip));
  assert.ok(got.dt.equals(row.dt));
  assert.ok(got.tm.equals(row.tm));
  assert.ok(got.du.equals(row.du));
  assert.deepEqual(got.l, [3, 1, 2]);
  assert.deepEqual(got.s, ['a', 'b']);
  assert.deepEqual(got.m, { one: 1, two: 2 });
  assert.deepEqual(got.tup.values(), [7, 'seven']);
});

test('paging over several pages', async () => {
  await client.execute(`CREATE TABLE ${ks}.pages (p int, c int, PRIMARY KEY (p, c))`);
  for (let c = 0; c < 25; c++) {
    await client.execute(`INSERT INTO ${ks}.pages (p, c) VALUES (?, ?)`, [1, c], { prepare: true });
  }
  const q = `SELECT c FROM ${ks}.pages WHERE p = ?`;
  let pageState;
  const seen = [];
  let pages = 0;
  do {
    const rs = await client.execute(q, [1], { prepare: true, fetchSize: 8, pageState });
    assert.ok(rs.rowLength <= 8);
    seen.push(...rs.rows.map((r) => r.c));
    pageState = rs.pageState;
    pages++;
  } while (pageState);
  assert.equal(pages, 4);
  assert.deepEqual(seen, [...Array(25).keys()]);
  // automatic paging with eachRow/autoPage
  let n = 0;
  await new Promise((resolve, reject) => {
    client.eachRow(`SELECT c FROM ${ks}.pages`, [], { prepare: true, fetchSize: 4, autoPage: true },
      () => { n++; }, (err) => (err ? reject(err) : resolve()));
  });
  assert.equal(n, 25);
});

test('logged, unlogged and counter batches', async () => {
  await client.execute(`CREATE TABLE ${ks}.batched (k int, c int, v text, PRIMARY KEY (k, c))`);
  const ins = `INSERT INTO ${ks}.batched (k, c, v) VALUES (?, ?, ?)`;
  await client.batch([
    { query: ins, params: [1, 1, 'a'] },
    { query: ins, params: [2, 1, 'b'] },
  ], { prepare: true, logged: true });
  await client.batch([
    { query: ins, params: [3, 1, 'c'] },
    { query: `UPDATE ${ks}.batched SET v = 'z' WHERE k = 1 AND c = 1` },
  ], { prepare: true, logged: false });
  const rs = await client.execute(`SELECT k, v FROM ${ks}.batched`);
  const got = Object.fromEntries(rs.rows.map((r) => [r.k, r.v]));
  assert.deepEqual(got, { 1: 'z', 2: 'b', 3: 'c' });

  await client.execute(`CREATE TABLE ${ks}.cnt (k int PRIMARY KEY, n counter)`);
  const upd = `UPDATE ${ks}.cnt SET n = n + ? WHERE k = ?`;
  await client.batch([
    { query: upd, params: [types.Long.fromInt(2), 1] },
    { query: upd, params: [types.Long.fromInt(3), 1] },
  ], { prepare: true, counter: true });
  const n = (await client.execute(`SELECT n FROM ${ks}.cnt WHERE k = 1`)).first().n;
  assert.equal(n.toString(), '5');
});

test('errors carry the right codes', async () => {
  const codes = types.responseErrorCodes;
  await assert.rejects(client.execute('SELEKT * FROM system.local'),
    (e) => e instanceof cassandra.errors.ResponseError && e.code === codes.syntaxError);
  await assert.rejects(client.execute(`SELECT * FROM ${ks}.missing`),
    (e) => e instanceof cassandra.errors.ResponseError && e.code === codes.invalid);
  await assert.rejects(client.execute(`SELECT * FROM ${ks}.missing WHERE k = ?`, [1], { prepare: true }),
    (e) => e instanceof cassandra.errors.ResponseError && e.code === codes.invalid);
  await client.execute(`CREATE TABLE ${ks}.dup (k int PRIMARY KEY)`);
  await assert.rejects(client.execute(`CREATE TABLE ${ks}.dup (k int PRIMARY KEY)`),
    (e) => e.code === codes.alreadyExists && e.table === 'dup' && e.keyspace === ks);
});
