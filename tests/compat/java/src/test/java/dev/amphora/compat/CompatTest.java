package dev.amphora.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.datastax.oss.driver.api.core.CqlSession;
import com.datastax.oss.driver.api.core.DefaultProtocolVersion;
import com.datastax.oss.driver.api.core.config.DefaultDriverOption;
import com.datastax.oss.driver.api.core.config.DriverConfigLoader;
import com.datastax.oss.driver.api.core.cql.BatchStatement;
import com.datastax.oss.driver.api.core.cql.BoundStatement;
import com.datastax.oss.driver.api.core.cql.DefaultBatchType;
import com.datastax.oss.driver.api.core.cql.PreparedStatement;
import com.datastax.oss.driver.api.core.cql.ResultSet;
import com.datastax.oss.driver.api.core.cql.Row;
import com.datastax.oss.driver.api.core.cql.SimpleStatement;
import com.datastax.oss.driver.api.core.data.CqlDuration;
import com.datastax.oss.driver.api.core.data.CqlVector;
import com.datastax.oss.driver.api.core.data.TupleValue;
import com.datastax.oss.driver.api.core.data.UdtValue;
import com.datastax.oss.driver.api.core.metadata.Node;
import com.datastax.oss.driver.api.core.metadata.TokenMap;
import com.datastax.oss.driver.api.core.metadata.schema.TableMetadata;
import com.datastax.oss.driver.api.core.servererrors.AlreadyExistsException;
import com.datastax.oss.driver.api.core.servererrors.InvalidQueryException;
import com.datastax.oss.driver.api.core.servererrors.SyntaxError;
import com.datastax.oss.driver.api.core.type.TupleType;
import com.datastax.oss.driver.api.core.type.UserDefinedType;
import com.datastax.oss.driver.internal.core.metadata.token.Murmur3Token;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The Apache Cassandra Java driver 4.x against the server under test: discovery, schema
 * metadata, prepared round-trips of every common type, paging, batches and errors.
 */
class CompatTest {
  static final String HOST = env("COMPAT_HOST", "127.0.0.1");
  static final int PORT = Integer.parseInt(env("COMPAT_PORT", "9042"));
  static final String DC = env("COMPAT_DC", "datacenter1");
  static final String KS = "compat_java_" + (System.currentTimeMillis() % 1_000_000_000L);

  static CqlSession session;

  static String env(String name, String dflt) {
    String v = System.getenv(name);
    return v == null || v.isEmpty() ? dflt : v;
  }

  @BeforeAll
  static void connect() {
    session =
        CqlSession.builder()
            .addContactPoint(new InetSocketAddress(HOST, PORT))
            .withLocalDatacenter(DC)
            .withConfigLoader(
                DriverConfigLoader.programmaticBuilder()
                    // DDL on a loaded 2-core machine can take seconds (default 2 s).
                    .withDuration(DefaultDriverOption.REQUEST_TIMEOUT, Duration.ofSeconds(30))
                    .withDuration(DefaultDriverOption.METADATA_SCHEMA_REQUEST_TIMEOUT,
                        Duration.ofSeconds(30))
                    .withDuration(DefaultDriverOption.CONTROL_CONNECTION_AGREEMENT_TIMEOUT,
                        Duration.ofSeconds(30))
                    .build())
            .build();
    session.execute(
        "CREATE KEYSPACE " + KS
            + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}");
  }

  @AfterAll
  static void close() {
    if (session != null) {
      try {
        session.execute("DROP KEYSPACE IF EXISTS " + KS);
      } finally {
        session.close();
      }
    }
  }

  @Test
  void negotiatesV5AndDiscoversTheNode() {
    // The driver opens with DSE_V2 and must settle on v5 with a 5.0 server.
    assertEquals(DefaultProtocolVersion.V5, session.getContext().getProtocolVersion());
    Collection<Node> nodes = session.getMetadata().getNodes().values();
    assertEquals(1, nodes.size());
    Node node = nodes.iterator().next();
    assertEquals(HOST, ((InetSocketAddress) node.getEndPoint().resolve()).getHostString());
    assertEquals(5, node.getCassandraVersion().getMajor());
    assertEquals(0, node.getCassandraVersion().getMinor());
    assertEquals(DC, node.getDatacenter());
    assertNotNull(node.getHostId());
    assertNotNull(node.getSchemaVersion());

    TokenMap tokenMap = session.getMetadata().getTokenMap().orElseThrow(
        () -> new AssertionError("no token map: partitioner or tokens not understood"));
    assertEquals("org.apache.cassandra.dht.Murmur3Partitioner", tokenMap.getPartitionerName());
    assertTrue(tokenMap.getTokenRanges().size() >= 1);
    ByteBuffer key = ByteBuffer.wrap("test".getBytes(StandardCharsets.UTF_8));
    assertEquals(Set.of(node), tokenMap.getReplicas(KS, key));
    assertEquals(-6017608668500074083L, ((Murmur3Token) tokenMap.newToken(key)).getValue());
  }

  @Test
  void schemaMetadataAfterDdl() {
    session.execute(
        "CREATE TABLE " + KS + ".meta (a int, b text, c timestamp, v map<text, int>, "
            + "PRIMARY KEY ((a, b), c)) WITH CLUSTERING ORDER BY (c DESC)");
    TableMetadata t =
        session.getMetadata().getKeyspace(KS).flatMap(k -> k.getTable("meta")).orElseThrow(
            () -> new AssertionError("table meta not in driver metadata after DDL"));
    assertEquals(List.of("a", "b"),
        t.getPartitionKey().stream().map(c -> c.getName().asInternal()).toList());
    assertEquals(List.of("c"),
        t.getClusteringColumns().keySet().stream().map(c -> c.getName().asInternal()).toList());
    assertEquals("DESC", t.getClusteringColumns().values().iterator().next().name());
    String ddl = t.describe(true);
    assertTrue(ddl.contains("CLUSTERING ORDER BY (c DESC)"), ddl);
  }

  @Test
  void schemaChangeEventReachesAnotherSession() throws InterruptedException {
    // A second session did not run the DDL: it learns of it only from the SCHEMA_CHANGE
    // event pushed to its control connection.
    try (CqlSession observer =
        CqlSession.builder()
            .addContactPoint(new InetSocketAddress(HOST, PORT))
            .withLocalDatacenter(DC)
            .build()) {
      assertTrue(observer.getMetadata().getKeyspace(KS).isPresent());
      assertTrue(observer.getMetadata().getKeyspace(KS).flatMap(k -> k.getTable("evt")).isEmpty());
      session.execute("CREATE TABLE " + KS + ".evt (k int PRIMARY KEY, v int)");
      long deadline = System.nanoTime() + 20_000_000_000L;
      while (observer.getMetadata().getKeyspace(KS).flatMap(k -> k.getTable("evt")).isEmpty()) {
        assertTrue(System.nanoTime() < deadline, "observer never saw CREATE TABLE evt");
        Thread.sleep(200);
      }
    }
  }

  @Test
  void preparedRoundTripOfTypes() {
    session.execute("CREATE TYPE " + KS + ".address (street text, zip int)");
    session.execute(
        "CREATE TABLE " + KS + ".types (k int PRIMARY KEY, t text, bi bigint, b blob, "
            + "bo boolean, u uuid, ts timestamp, d decimal, vi varint, db double, fl float, "
            + "ip inet, dt date, tm time, du duration, l list<int>, s set<text>, "
            + "m map<text, int>, tup tuple<int, text>, addr frozen<address>, "
            + "vec vector<float, 3>)");
    PreparedStatement ins = session.prepare(
        "INSERT INTO " + KS + ".types (k, t, bi, b, bo, u, ts, d, vi, db, fl, ip, dt, tm, du, "
            + "l, s, m, tup, addr, vec) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            + "?, ?, ?, ?, ?)");
    TupleType tupleType = (TupleType) ins.getVariableDefinitions().get("tup").getType();
    UserDefinedType udtType =
        (UserDefinedType) ins.getVariableDefinitions().get("addr").getType();
    UUID u = UUID.fromString("123e4567-e89b-42d3-a456-426614174000");
    Instant ts = Instant.parse("2024-02-29T01:02:03.456Z");
    BigDecimal dec = new BigDecimal("-1234.56780");
    BigInteger vi = new BigInteger("-123456789012345678901234567890");
    InetAddress ip;
    try {
      ip = InetAddress.getByName("2001:db8::1");
    } catch (Exception e) {
      throw new AssertionError(e);
    }
    CqlDuration du = CqlDuration.newInstance(14, 3, 5_000_000_007L);
    TupleValue tup = tupleType.newValue(7, "seven");
    UdtValue addr = udtType.newValue("Main St", 12345);
    CqlVector<Float> vec = CqlVector.newInstance(1.5f, -2f, 0.25f);
    session.execute(ins.bind(1, "zażółć ✓", Long.MIN_VALUE, ByteBuffer.wrap(new byte[] {0, 1, -1}),
        true, u, ts, dec, vi, -0.125, 3.5f, ip, LocalDate.of(1999, 12, 31),
        LocalTime.of(13, 14, 15, 123456789), du, List.of(3, 1, 2), Set.of("b", "a"),
        Map.of("one", 1, "two", 2), tup, addr, vec));

    PreparedStatement sel = session.prepare("SELECT * FROM " + KS + ".types WHERE k = ?");
    Row r = session.execute(sel.bind(1)).one();
    assertNotNull(r);
    assertEquals("zażółć ✓", r.getString("t"));
    assertEquals(Long.MIN_VALUE, r.getLong("bi"));
    byte[] blob = new byte[3];
    r.getByteBuffer("b").duplicate().get(blob);
    assertArrayEquals(new byte[] {0, 1, -1}, blob);
    assertTrue(r.getBoolean("bo"));
    assertEquals(u, r.getUuid("u"));
    assertEquals(ts, r.getInstant("ts"));
    assertEquals(dec, r.getBigDecimal("d")); // equals() also compares the scale
    assertEquals(vi, r.getBigInteger("vi"));
    assertEquals(-0.125, r.getDouble("db"));
    assertEquals(3.5f, r.getFloat("fl"));
    assertEquals(ip, r.getInetAddress("ip"));
    assertEquals(LocalDate.of(1999, 12, 31), r.getLocalDate("dt"));
    assertEquals(LocalTime.of(13, 14, 15, 123456789), r.getLocalTime("tm"));
    assertEquals(du, r.getCqlDuration("du"));
    assertEquals(List.of(3, 1, 2), r.getList("l", Integer.class));
    assertEquals(Set.of("a", "b"), r.getSet("s", String.class));
    assertEquals(Map.of("one", 1, "two", 2), r.getMap("m", String.class, Integer.class));
    assertEquals(7, r.getTupleValue("tup").getInt(0));
    assertEquals("seven", r.getTupleValue("tup").getString(1));
    assertEquals("Main St", r.getUdtValue("addr").getString("street"));
    assertEquals(12345, r.getUdtValue("addr").getInt("zip"));
    assertEquals(vec, r.getVector("vec", Float.class));
  }

  @Test
  void pagingOverSeveralPages() {
    session.execute("CREATE TABLE " + KS + ".pages (p int, c int, PRIMARY KEY (p, c))");
    PreparedStatement ins = session.prepare("INSERT INTO " + KS + ".pages (p, c) VALUES (?, ?)");
    for (int c = 0; c < 25; c++) {
      session.execute(ins.bind(1, c));
    }
    PreparedStatement sel = session.prepare("SELECT c FROM " + KS + ".pages WHERE p = ?");
    // automatic paging
    ResultSet rs = session.execute(sel.bind(1).setPageSize(6));
    List<Integer> seen = new ArrayList<>();
    for (Row row : rs) {
      seen.add(row.getInt("c"));
    }
    assertEquals(25, seen.size());
    for (int i = 0; i < 25; i++) {
      assertEquals(i, seen.get(i));
    }
    assertEquals(5, rs.getExecutionInfos().size(), "pages fetched");
    // manual paging with the paging state, from a fresh statement
    BoundStatement first = sel.bind(1).setPageSize(10);
    ResultSet page1 = session.execute(first);
    assertEquals(10, page1.getAvailableWithoutFetching());
    ByteBuffer state = page1.getExecutionInfo().getPagingState();
    assertNotNull(state);
    ResultSet page2 = session.execute(sel.bind(1).setPageSize(10).setPagingState(state));
    assertEquals(10, page2.one().getInt("c"));
  }

  @Test
  void batches() {
    session.execute(
        "CREATE TABLE " + KS + ".batched (k int, c int, v text, PRIMARY KEY (k, c))");
    PreparedStatement ins =
        session.prepare("INSERT INTO " + KS + ".batched (k, c, v) VALUES (?, ?, ?)");
    session.execute(BatchStatement.newInstance(DefaultBatchType.LOGGED,
        ins.bind(1, 1, "a"), ins.bind(2, 1, "b")));
    session.execute(BatchStatement.newInstance(DefaultBatchType.UNLOGGED,
        ins.bind(3, 1, "c"),
        SimpleStatement.newInstance(
            "UPDATE " + KS + ".batched SET v = 'z' WHERE k = 1 AND c = 1")));
    Map<Integer, String> got = new java.util.HashMap<>();
    for (Row row : session.execute("SELECT k, v FROM " + KS + ".batched")) {
      got.put(row.getInt("k"), row.getString("v"));
    }
    assertEquals(Map.of(1, "z", 2, "b", 3, "c"), got);

    session.execute("CREATE TABLE " + KS + ".cnt (k int PRIMARY KEY, n counter)");
    PreparedStatement upd =
        session.prepare("UPDATE " + KS + ".cnt SET n = n + ? WHERE k = ?");
    session.execute(BatchStatement.newInstance(DefaultBatchType.COUNTER,
        upd.bind(2L, 1), upd.bind(3L, 1)));
    assertEquals(5L,
        session.execute("SELECT n FROM " + KS + ".cnt WHERE k = 1").one().getLong("n"));
  }

  @Test
  void preparedSelectStarAfterAlterTableAdd() {
    String t = KS + ".alter_star";
    session.execute("CREATE TABLE " + t + " (k int PRIMARY KEY, a int)");
    session.execute("INSERT INTO " + t + " (k, a) VALUES (1, 10)");
    PreparedStatement sel = session.prepare("SELECT * FROM " + t + " WHERE k = ?");
    assertEquals(2, session.execute(sel.bind(1)).one().getColumnDefinitions().size());
    session.execute("ALTER TABLE " + t + " ADD b text");
    session.execute("UPDATE " + t + " SET b = 'new' WHERE k = 1");
    // Another client prepares the same text: the node then holds the new result metadata
    // under the same id, and this session's EXECUTE (old result metadata id, v5) is answered
    // with Metadata_changed and the new columns.
    try (CqlSession other = CqlSession.builder()
        .addContactPoint(new InetSocketAddress(HOST, PORT))
        .withLocalDatacenter(DC)
        .build()) {
      other.prepare("SELECT * FROM " + t + " WHERE k = ?");
    }
    Row row = session.execute(sel.bind(1)).one();
    assertNotNull(row);
    assertEquals(10, row.getInt("a"));
    assertEquals(3, row.getColumnDefinitions().size());
    assertEquals("new", row.getString("b"));
    // The driver keeps the new metadata: the next execution decodes the same way.
    assertEquals("new", session.execute(sel.bind(1)).one().getString("b"));

    // One session alone: the ALTER drops the prepared statement, the EXECUTE is answered
    // Unprepared, the driver re-prepares and executes again with its old metadata id.
    String u = KS + ".alter_star_single";
    session.execute("CREATE TABLE " + u + " (k int PRIMARY KEY, a int)");
    session.execute("INSERT INTO " + u + " (k, a) VALUES (1, 10)");
    PreparedStatement one = session.prepare("SELECT * FROM " + u + " WHERE k = ?");
    assertEquals(2, session.execute(one.bind(1)).one().getColumnDefinitions().size());
    session.execute("ALTER TABLE " + u + " ADD b text");
    session.execute("UPDATE " + u + " SET b = 'single' WHERE k = 1");
    Row again = session.execute(one.bind(1)).one();
    assertNotNull(again);
    assertEquals(3, again.getColumnDefinitions().size());
    assertEquals("single", again.getString("b"));
  }

  @Test
  void serverWarnings() {
    session.execute("CREATE TABLE " + KS + ".warned (k int PRIMARY KEY, v text)");
    PreparedStatement ins =
        session.prepare("INSERT INTO " + KS + ".warned (k, v) VALUES (?, ?)");
    String big = "x".repeat(3000);
    ResultSet rs = session.execute(BatchStatement.newInstance(DefaultBatchType.UNLOGGED,
        ins.bind(1, big), ins.bind(2, big)));
    List<String> warnings = rs.getExecutionInfo().getWarnings();
    assertEquals(1, warnings.size(), warnings.toString());
    assertTrue(warnings.get(0).matches("Batch for \\[" + KS + "\\.warned\\] is of size \\d+, "
        + "exceeding specified threshold of 5120 by \\d+\\."), warnings.get(0));
    rs = session.execute("SELECT count(*) FROM " + KS + ".warned");
    assertEquals(List.of("Aggregation query used without partition key"),
        rs.getExecutionInfo().getWarnings());
  }

  @Test
  void errors() {
    assertThrows(SyntaxError.class, () -> session.execute("SELEKT * FROM system.local"));
    assertThrows(InvalidQueryException.class,
        () -> session.execute("SELECT * FROM " + KS + ".missing"));
    assertThrows(InvalidQueryException.class,
        () -> session.prepare("SELECT * FROM " + KS + ".missing WHERE k = ?"));
    session.execute("CREATE TABLE " + KS + ".dup (k int PRIMARY KEY)");
    AlreadyExistsException e = assertThrows(AlreadyExistsException.class,
        () -> session.execute("CREATE TABLE " + KS + ".dup (k int PRIMARY KEY)"));
    assertTrue(e.getMessage().contains("dup"), e.getMessage());
  }
}
