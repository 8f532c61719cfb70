'use strict';
// Compatibility checks with the Node.js `cassandra-driver`: connect and discover the node,
// create schema, pushed schema-change events, prepared round-trips of every CQL type,
// paging, batches, re-preparing after the server forgot a statement, and errors. The driver
// (4.10) speaks protocol v4 at most to Apache Cassandra, so vectors travel as custom types.
// Target: COMPAT_HOST / COMPAT_PORT (default 127.0.0.1:9042).

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { isDeepStrictEqual } = require('node:util');
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

// plain turns a decoded value into JSON-like data that deepEqual compares exactly: driver
// objects become their string forms, tuples and vectors arrays tagged with their kind.
function plain(v) {
  if (v === null || v === undefined || typeof v !== 'object') return v;
  if (v instanceof types.Tuple) return { tuple: v.elements.map(plain) };
  if (v instanceof types.Vector) return { vector: v.elements.map(plain) };
  if (Buffer.isBuffer(v)) return { blob: v.toString('hex') };
  if (v instanceof Date) return { timestamp: v.toISOString() };
  if (Array.isArray(v)) return v.map(plain);
  for (const T of [types.Long, types.Integer, types.BigDecimal, types.LocalTime,
    types.LocalDate, types.Duration, types.InetAddress, types.Uuid]) {
    if (v instanceof T) return { [T.name]: v.toString() };
  }
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
}

// waitFor polls check (sync or async) every 50 ms until it is truthy, for at most 15 s.
async function waitFor(what, check, detail = () => '') {
  const deadline = Date.now() + 15000;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) assert.fail(`${what}: not within 15 s ${detail()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('prepared round-trip of every other type', async () => {
  await client.execute(`CREATE TYPE ${ks}.address (street text, zip int, ` +
    'phones frozen<list<text>>, loc tuple<double, double>)');
  await client.execute(`CREATE TYPE ${ks}.person (name text, home frozen<address>, ` +
    'tags set<ascii>)');
  await client.execute(`CREATE TABLE ${ks}.every (k int PRIMARY KEY, a ascii, vc varchar, ` +
    'i int, f float, si smallint, ti tinyint, bi bigint, vi varint, d decimal, tm time, ' +
    'du duration, ts timestamp, dt date, ip inet, fa frozen<address>, ua address, ' +
    'pe frozen<person>, la list<frozen<address>>, fl frozen<list<int>>, ' +
    'fs frozen<set<bigint>>, fm frozen<map<text, int>>, mfl map<text, frozen<list<int>>>, ' +
    'ms map<text, frozen<set<text>>>, sp set<frozen<tuple<int, text>>>, ld list<duration>, ' +
    'nt tuple<int, frozen<list<text>>, frozen<address>>, ' +
    'vf vector<float, 3>, vt vector<text, 2>, vn vector<int, 2>)');
  const home = { street: "1 Rue de l'Été", zip: 75001, phones: ['+33 1', '+33 2'],
    loc: new types.Tuple(48.8566, 2.3522) };
  // phones: null is a null field (the driver would write [] as null too)
  const work = { street: '', zip: -1, phones: null, loc: new types.Tuple(-0.5, 1e300) };
  const row = {
    k: 1,
    a: 'plain ascii ~',
    vc: 'varchar ✓',
    i: -2147483648,
    f: 3.4028234663852886e38, // the largest float
    si: -32768,
    ti: 127,
    bi: types.Long.MAX_VALUE,
    vi: types.Integer.fromString('-170141183460469231731687303715884105729'),
    d: types.BigDecimal.fromString('123456789012345678901234567890.123456789'),
    tm: types.LocalTime.fromString('23:59:59.999999999'),
    du: new types.Duration(-1, -2, types.Long.fromInt(-3)),
    ts: new Date(-1),
    dt: types.LocalDate.fromString('1582-10-04'),
    ip: types.InetAddress.fromString('192.168.0.255'),
    fa: home,
    ua: home,
    pe: { name: 'Zoë', home, tags: ['b', 'a'] },
    la: [home, work],
    fl: [3, 3, 1],
    fs: [-9, 0, 9].map((n) => types.Long.fromInt(n)),
    fm: { a: 1, b: 2 },
    mfl: { x: [1, 2], '': [0] },
    ms: { k: ['p', 'q'] },
    sp: [new types.Tuple(2, 'a'), new types.Tuple(1, 'b'), new types.Tuple(1, 'a')],
    ld: [new types.Duration(-1, -2, types.Long.fromInt(-3)),
      new types.Duration(0, 0, types.Long.ZERO), new types.Duration(0, 0, types.Long.ONE)],
    nt: new types.Tuple(-9, ['x', 'y'], work),
    vf: new types.Vector(new Float32Array([1.5, -2, 0.25])),
    vt: new types.Vector(['', 'vector ✓']),
    vn: new types.Vector([-1, 2147483647]),
  };
  const cols = Object.keys(row);
  await client.execute(
    `INSERT INTO ${ks}.every (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`,
    cols.map((c) => row[c]), { prepare: true });
  const got = (await client.execute(`SELECT ${cols.join(', ')} FROM ${ks}.every WHERE k = ?`,
    [1], { prepare: true })).first();
  // Non-frozen sets come back sorted, map keys sorted (frozen ones are written in order
  // here, see 'frozen sets and maps are normalised'); a frozen UDT is kept as written
  // (Cassandra does not sort the set inside it).
  const want = {
    ...row,
    mfl: { '': [0], x: [1, 2] },
    sp: [new types.Tuple(1, 'a'), new types.Tuple(1, 'b'), new types.Tuple(2, 'a')],
  };
  // Every column is checked before failing, so one report names all the wrong ones.
  const wrong = cols.filter((c) => !isDeepStrictEqual(plain(got[c]), plain(want[c])))
    .map((c) => ({ column: c, got: plain(got[c]), want: plain(want[c]) }));
  // deepEqual ignores key order: the maps' keys must come sorted too.
  for (const [c, keys] of [['fm', ['a', 'b']], ['mfl', ['', 'x']]]) {
    if (!isDeepStrictEqual(Object.keys(got[c]), keys)) {
      wrong.push({ column: `${c} key order`, got: Object.keys(got[c]), want: keys });
    }
  }
  assert.deepEqual(wrong, [], JSON.stringify(wrong));

  // A non-frozen UDT's fields are cells of their own: set one, null another.
  await client.execute(`UPDATE ${ks}.every SET ua.zip = ?, ua.phones = null WHERE k = ?`,
    [13, 1], { prepare: true });
  const ua = (await client.execute(`SELECT ua FROM ${ks}.every WHERE k = 1`)).first().ua;
  assert.deepEqual(plain(ua), plain({ ...home, zip: 13, phones: null }));
});

test('a nested value that is not a valid list is rejected as invalid', async () => {
  // The driver writes an empty array nested in a map as a zero-length value (at the top
  // level as null): no valid serialized list is zero bytes long.
  // Cassandra answers Invalid "Not enough bytes to read a list" (Amphora once stored {x: null}).
  await client.execute(`CREATE TABLE ${ks}.nested_bad (k int PRIMARY KEY, ` +
    'm map<text, frozen<list<int>>>)');
  await assert.rejects(client.execute(`INSERT INTO ${ks}.nested_bad (k, m) VALUES (?, ?)`,
    [1, { x: [], y: [5] }], { prepare: true }),
  (e) => e instanceof cassandra.errors.ResponseError &&
    e.code === types.responseErrorCodes.invalid && /list/.test(e.message));
  const rs = await client.execute(`SELECT m FROM ${ks}.nested_bad WHERE k = 1`);
  assert.equal(rs.rowLength, 0);
});

test('frozen sets and maps are normalised: sorted, no duplicates, the same key in any order', async () => {
  // Cassandra stores a bound frozen set sorted and without duplicates and a frozen map sorted
  // by key, as it does non-frozen ones.
  // (Amphora once stored bound ones as sent: the same set in another order was another key.)
  await client.execute(`CREATE TABLE ${ks}.fvalues (k int PRIMARY KEY, ` +
    'fs frozen<set<bigint>>, fm frozen<map<text, int>>, ms map<text, frozen<set<text>>>)');
  await client.execute(`INSERT INTO ${ks}.fvalues (k, fs, fm, ms) VALUES (?, ?, ?, ?)`,
    [1, [9, -9, 0, 9].map((n) => types.Long.fromInt(n)), { b: 2, a: 1 }, { k: ['q', 'p', 'q'] }],
    { prepare: true });
  const got = (await client.execute(`SELECT fs, fm, ms FROM ${ks}.fvalues WHERE k = 1`)).first();
  assert.deepEqual({ fs: got.fs.map(String), fm: Object.entries(got.fm), ms: got.ms },
    { fs: ['-9', '0', '9'], fm: [['a', 1], ['b', 2]], ms: { k: ['p', 'q'] } });

  await client.execute(`CREATE TABLE ${ks}.fkeys (p frozen<set<int>>, ` +
    'c frozen<map<text, int>>, v text, PRIMARY KEY (p, c))');
  await client.execute(`INSERT INTO ${ks}.fkeys (p, c, v) VALUES (?, ?, ?)`,
    [[3, 1, 2, 1], { b: 2, a: 1 }, 'first'], { prepare: true });
  await client.execute(`UPDATE ${ks}.fkeys SET v = 'second' WHERE p = {2, 3, 1} ` +
    "AND c = {'a': 1, 'b': 2}");
  const rs = await client.execute(`SELECT p, c, v FROM ${ks}.fkeys`);
  assert.deepEqual(rs.rows.map((r) => [r.p, Object.entries(r.c), r.v]),
    [[[1, 2, 3], [['a', 1], ['b', 2]], 'second']]);
  const byKey = await client.execute(`SELECT v FROM ${ks}.fkeys WHERE p = ? AND c = ?`,
    [[2, 1, 3], { b: 2, a: 1 }], { prepare: true });
  assert.deepEqual(byKey.rows.map((r) => r.v), ['second']);
});

test('schema changes made by another client are pushed to this one', async () => {
  // The control connection logs each SCHEMA_CHANGE event it receives (and only those) as
  // 'Schema change', then refreshes the metadata it caches.
  const events = [];
  const onLog = (level, className, message, info) => {
    if (className === 'ControlConnection' && message === 'Schema change') events.push(info);
  };
  const seen = (type, target, name) => () => events.some((e) => e.schemaChangeType === type &&
    e.target === target && e.keyspace === evKs &&
    (target === 'KEYSPACE' || e.table === name || e.udt === name));
  const dump = () => JSON.stringify(events);
  const evKs = `${ks}_events`;
  client.on('log', onLog);
  const other = newClient();
  try {
    await other.connect();
    await other.execute(`CREATE KEYSPACE ${evKs} WITH replication = ` +
      `{'class': 'SimpleStrategy', 'replication_factor': 1}`);
    await waitFor('CREATED KEYSPACE', seen('CREATED', 'KEYSPACE'), dump);
    await waitFor('keyspace in metadata', () => client.metadata.keyspaces[evKs] !== undefined);

    await other.execute(`CREATE TABLE ${evKs}.evt (k int PRIMARY KEY, v text)`);
    await waitFor('CREATED TABLE', seen('CREATED', 'TABLE', 'evt'), dump);
    const names = async () => (await client.metadata.getTable(evKs, 'evt')).columns
      .map((c) => c.name).sort();
    assert.deepEqual(await names(), ['k', 'v']);
    // getTable caches the table; only the event makes the driver read it again.
    await other.execute(`ALTER TABLE ${evKs}.evt ADD w int`);
    await waitFor('UPDATED TABLE', seen('UPDATED', 'TABLE', 'evt'), dump);
    await waitFor('new column in metadata',
      async () => JSON.stringify(await names()) === '["k","v","w"]');

    await other.execute(`CREATE TYPE ${evKs}.evt_type (a int, b text)`);
    await waitFor('CREATED TYPE', seen('CREATED', 'TYPE', 'evt_type'), dump);
    const udt = await client.metadata.getUdt(evKs, 'evt_type');
    assert.deepEqual(udt.fields.map((f) => f.name), ['a', 'b']);

    await other.execute(`DROP TABLE ${evKs}.evt`);
    await waitFor('DROPPED TABLE', seen('DROPPED', 'TABLE', 'evt'), dump);
    await waitFor('table gone from metadata',
      async () => (await client.metadata.getTable(evKs, 'evt')) === null);
    await other.execute(`DROP KEYSPACE ${evKs}`);
    await waitFor('DROPPED KEYSPACE', seen('DROPPED', 'KEYSPACE'), dump);
    await waitFor('keyspace gone from metadata',
      () => client.metadata.keyspaces[evKs] === undefined);
  } finally {
    client.removeListener('log', onLog);
    await other.execute(`DROP KEYSPACE IF EXISTS ${evKs}`).catch(() => {});
    await other.shutdown();
  }
});

test('re-prepares after the server forgot a statement', async () => {
  // Cassandra drops a table's prepared statements on DROP TABLE and ALTER TABLE; the driver
  // still has their ids, gets Unprepared, prepares again and retries.
  const reprepares = [];
  const onLog = (level, className, message) => {
    if (/^Query 0x[0-9a-f]+ not prepared on host .*, preparing and retrying$/.test(message)) {
      reprepares.push(message);
    }
  };
  const t = `${ks}.reprep`;
  const ins = `INSERT INTO ${t} (k, v) VALUES (?, ?)`;
  const sel = `SELECT k, v FROM ${t} WHERE k = ?`;
  const read = async (k) => (await client.execute(sel, [k], { prepare: true })).rows
    .map((r) => [r.k, r.v]);
  // oneReprepare runs step and checks the driver re-prepared exactly once meanwhile.
  const oneReprepare = async (what, step) => {
    const before = reprepares.length;
    const result = await step();
    assert.equal(reprepares.length - before, 1, `${what}: ${reprepares.slice(before)}`);
    return result;
  };
  client.on('log', onLog);
  try {
    await client.execute(`CREATE TABLE ${t} (k int PRIMARY KEY, v text)`);
    await client.execute(ins, [1, 'before'], { prepare: true });
    assert.deepEqual(await read(1), [[1, 'before']]);
    await client.execute(`DROP TABLE ${t}`);
    await client.execute(`CREATE TABLE ${t} (k int PRIMARY KEY, v text)`);
    await oneReprepare('insert after drop', () =>
      client.execute(ins, [2, 'after'], { prepare: true }));
    assert.deepEqual(await oneReprepare('select after drop', () => read(2)), [[2, 'after']]);
    assert.deepEqual(await read(1), []);

    await client.execute(`ALTER TABLE ${t} ADD w int`);
    await oneReprepare('insert after alter', () =>
      client.execute(ins, [3, 'altered'], { prepare: true }));
    assert.deepEqual(await oneReprepare('select after alter', () => read(3)), [[3, 'altered']]);
    const keys = (await client.execute(`SELECT k FROM ${t}`)).rows.map((r) => r.k).sort();
    assert.deepEqual(keys, [2, 3]);
  } finally {
    client.removeListener('log', onLog);
  }
});
