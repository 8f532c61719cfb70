// Package compat checks the server with gocql (apache/cassandra-gocql-driver v2): connect,
// discover the node, create schema, pushed schema-change events, prepared round-trips of
// every CQL type (on protocol v4 and v5), paging, batches, re-preparing after the server
// forgot a statement, and errors. Target: COMPAT_HOST / COMPAT_PORT (default 127.0.0.1:9042).
package compat

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"gopkg.in/inf.v0"
)

var keyspace = fmt.Sprintf("compat_go_%d", time.Now().UnixNano()%1_000_000_000)

func target() (string, int) {
	host := os.Getenv("COMPAT_HOST")
	if host == "" {
		host = "127.0.0.1"
	}
	port := 9042
	if p := os.Getenv("COMPAT_PORT"); p != "" {
		port, _ = strconv.Atoi(p)
	}
	return host, port
}

func newSession(t *testing.T) *gocql.Session {
	t.Helper()
	return newSessionWith(t, func(*gocql.ClusterConfig) {})
}

// newSessionWith connects like newSession after configure has adjusted the cluster config
// (protocol version, listeners, observers).
func newSessionWith(t *testing.T, configure func(*gocql.ClusterConfig)) *gocql.Session {
	t.Helper()
	host, port := target()
	cluster := gocql.NewCluster(host)
	cluster.Port = port
	cluster.Timeout = 30 * time.Second
	cluster.ConnectTimeout = 10 * time.Second
	cluster.Consistency = gocql.One
	configure(cluster)
	session, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("connect to %s:%d: %v", host, port, err)
	}
	return session
}

func exec(t *testing.T, s *gocql.Session, stmt string, values ...interface{}) {
	t.Helper()
	if err := s.Query(stmt, values...).Exec(); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// checkEqual reports one mismatching value without stopping the test.
func checkEqual(t *testing.T, name string, got, want interface{}) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: got %#v, want %#v", name, got, want)
	}
}

func TestMain(m *testing.M) {
	host, port := target()
	cluster := gocql.NewCluster(host)
	cluster.Port = port
	cluster.Timeout = 30 * time.Second
	s, err := cluster.CreateSession()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot connect to %s:%d: %v\n", host, port, err)
		os.Exit(1)
	}
	err = s.Query(`CREATE KEYSPACE ` + keyspace +
		` WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`).Exec()
	if err != nil {
		fmt.Fprintf(os.Stderr, "create keyspace: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := s.Query(`DROP KEYSPACE IF EXISTS ` + keyspace).Exec(); err != nil {
		fmt.Fprintf(os.Stderr, "warning: drop keyspace: %v\n", err)
	}
	s.Close()
	os.Exit(code)
}

func TestDiscoverNode(t *testing.T) {
	s := newSession(t)
	defer s.Close()
	hosts := s.GetHosts()
	if len(hosts) != 1 {
		t.Fatalf("want 1 host, got %d: %v", len(hosts), hosts)
	}
	h := hosts[0]
	host, _ := target()
	if !h.ConnectAddress().Equal(net.ParseIP(host)) {
		t.Errorf("connect address %v, want %s", h.ConnectAddress(), host)
	}
	if h.HostID() == "" || h.DataCenter() == "" || h.Rack() == "" {
		t.Errorf("host id/dc/rack missing: %q %q %q", h.HostID(), h.DataCenter(), h.Rack())
	}
	if v := h.Version(); v.Major != 5 || v.Minor != 0 {
		t.Errorf("release_version %v, want 5.0.x", v)
	}
	if p := h.Partitioner(); p != "org.apache.cassandra.dht.Murmur3Partitioner" {
		t.Errorf("partitioner %q", p)
	}
	if len(h.Tokens()) == 0 {
		t.Fatalf("no tokens")
	}
	for _, tok := range h.Tokens() {
		if _, err := strconv.ParseInt(tok, 10, 64); err != nil {
			t.Errorf("token %q is not a Murmur3 token: %v", tok, err)
		}
	}
}

func TestSchemaAndMetadata(t *testing.T) {
	s := newSession(t)
	defer s.Close()
	exec(t, s, `CREATE TABLE `+keyspace+`.meta (a int, b text, c timeuuid, v map<text, int>,
		PRIMARY KEY ((a, b), c)) WITH CLUSTERING ORDER BY (c DESC)`)
	if err := s.AwaitSchemaAgreement(context.Background()); err != nil {
		t.Fatalf("schema agreement: %v", err)
	}
	// The driver refreshes its schema cache on the pushed SCHEMA_CHANGE event.
	var tm *gocql.TableMetadata
	deadline := time.Now().Add(15 * time.Second)
	for tm == nil {
		km, err := s.KeyspaceMetadata(keyspace)
		if err != nil {
			t.Fatalf("keyspace metadata: %v", err)
		}
		tm = km.Tables["meta"]
		if tm == nil {
			if time.Now().After(deadline) {
				t.Fatalf("table meta never appeared in metadata: %v", km.Tables)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	var pk, ck []string
	for _, c := range tm.PartitionKey {
		pk = append(pk, c.Name)
	}
	for _, c := range tm.ClusteringColumns {
		ck = append(ck, c.Name)
	}
	if !reflect.DeepEqual(pk, []string{"a", "b"}) || !reflect.DeepEqual(ck, []string{"c"}) {
		t.Errorf("keys: partition %v clustering %v", pk, ck)
	}
	if tm.ClusteringColumns[0].ClusteringOrder != "desc" {
		t.Errorf("clustering order %q", tm.ClusteringColumns[0].ClusteringOrder)
	}
}

func TestTypesRoundTrip(t *testing.T) {
	s := newSession(t)
	defer s.Close()
	exec(t, s, `CREATE TABLE `+keyspace+`.types (k int PRIMARY KEY, t text, bi bigint,
		b blob, bo boolean, u uuid, tu timeuuid, ts timestamp, d decimal, vi varint,
		db double, f float, ip inet, dt date, l list<int>, st set<text>, m map<text, bigint>,
		si smallint, ti tinyint)`)
	ts := time.Date(2024, 2, 29, 12, 34, 56, 789_000_000, time.UTC)
	u := gocql.MustRandomUUID()
	tu := gocql.TimeUUID()
	dec := inf.NewDec(-12345678901, 4)
	vi, _ := new(big.Int).SetString("-123456789012345678901234567890", 10)
	ip := net.ParseIP("10.1.2.3").To4()
	day := time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC)
	err := s.Query(`INSERT INTO `+keyspace+`.types (k, t, bi, b, bo, u, tu, ts, d, vi, db, f,
		ip, dt, l, st, m, si, ti) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		1, "héllo", int64(-1)<<62, []byte{0, 1, 255}, true, u, tu, ts, dec, vi, 2.5e-300,
		float32(-0.75), ip, day, []int{3, 2, 1}, []string{"z", "a"}, map[string]int64{"x": 1},
		int16(-300), int8(-7)).Exec()
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	var (
		gt   string
		gbi  int64
		gb   []byte
		gbo  bool
		gu   gocql.UUID
		gtu  gocql.UUID
		gts  time.Time
		gdec *inf.Dec
		gvi  *big.Int
		gdb  float64
		gf   float32
		gip  net.IP
		gdt  time.Time
		gl   []int
		gst  []string
		gm   map[string]int64
		gsi  int16
		gti  int8
	)
	err = s.Query(`SELECT t, bi, b, bo, u, tu, ts, d, vi, db, f, ip, dt, l, st, m, si, ti
		FROM `+keyspace+`.types WHERE k = ?`, 1).Scan(&gt, &gbi, &gb, &gbo, &gu, &gtu, &gts,
		&gdec, &gvi, &gdb, &gf, &gip, &gdt, &gl, &gst, &gm, &gsi, &gti)
	if err != nil {
		t.Fatalf("select: %v", err)
	}
	check := func(name string, got, want interface{}) { t.Helper(); checkEqual(t, name, got, want) }
	check("text", gt, "héllo")
	check("bigint", gbi, int64(-1)<<62)
	check("blob", gb, []byte{0, 1, 255})
	check("boolean", gbo, true)
	check("uuid", gu, u)
	check("timeuuid", gtu, tu)
	check("timestamp", gts.UTC(), ts)
	if gdec.Cmp(dec) != 0 || gdec.Scale() != 4 {
		t.Errorf("decimal: got %v, want %v", gdec, dec)
	}
	if gvi.Cmp(vi) != 0 {
		t.Errorf("varint: got %v, want %v", gvi, vi)
	}
	check("double", gdb, 2.5e-300)
	check("float", gf, float32(-0.75))
	if !gip.Equal(ip) {
		t.Errorf("inet: got %v", gip)
	}
	check("date", gdt.UTC(), day)
	check("list", gl, []int{3, 2, 1})
	sort.Strings(gst)
	check("set", gst, []string{"a", "z"})
	check("map", gm, map[string]int64{"x": 1})
	check("smallint", gsi, int16(-300))
	check("tinyint", gti, int8(-7))
}

func TestPaging(t *testing.T) {
	s := newSession(t)
	defer s.Close()
	exec(t, s, `CREATE TABLE `+keyspace+`.pages (p int, c int, PRIMARY KEY (p, c))`)
	for c := 0; c < 20; c++ {
		exec(t, s, `INSERT INTO `+keyspace+`.pages (p, c) VALUES (?, ?)`, 7, c)
	}
	var state []byte
	var got []int
	pages := 0
	for {
		iter := s.Query(`SELECT c FROM `+keyspace+`.pages WHERE p = ?`, 7).
			PageSize(6).PageState(state).Iter()
		next := iter.PageState()
		var c int
		n := 0
		for iter.Scan(&c) {
			got = append(got, c)
			n++
		}
		if err := iter.Close(); err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if n > 6 {
			t.Fatalf("page of %d rows with page size 6", n)
		}
		pages++
		if len(next) == 0 {
			break
		}
		state = next
	}
	if pages < 4 {
		t.Errorf("got %d pages, want 4", pages)
	}
	want := make([]int, 20)
	for i := range want {
		want[i] = i
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v", got)
	}
	// Automatic paging through the iterator.
	iter := s.Query(`SELECT c FROM ` + keyspace + `.pages`).PageSize(3).Iter()
	n := 0
	var c int
	for iter.Scan(&c) {
		n++
	}
	if err := iter.Close(); err != nil || n != 20 {
		t.Errorf("auto paging: %d rows, err %v", n, err)
	}
}

func TestBatch(t *testing.T) {
	s := newSession(t)
	defer s.Close()
	exec(t, s, `CREATE TABLE `+keyspace+`.batched (k int, c int, v text, PRIMARY KEY (k, c))`)
	for _, typ := range []gocql.BatchType{gocql.LoggedBatch, gocql.UnloggedBatch} {
		b := s.Batch(typ)
		for c := 0; c < 3; c++ {
			b.Query(`INSERT INTO `+keyspace+`.batched (k, c, v) VALUES (?, ?, ?)`,
				int(typ), c, fmt.Sprintf("v%d", c))
		}
		if err := b.Exec(); err != nil {
			t.Fatalf("batch type %d: %v", typ, err)
		}
		var count int
		if err := s.Query(`SELECT count(*) FROM `+keyspace+`.batched WHERE k = ?`, int(typ)).
			Scan(&count); err != nil || count != 3 {
			t.Errorf("batch type %d: count %d err %v", typ, count, err)
		}
	}
	exec(t, s, `CREATE TABLE `+keyspace+`.cnt (k int PRIMARY KEY, n counter)`)
	b := s.Batch(gocql.CounterBatch)
	b.Query(`UPDATE `+keyspace+`.cnt SET n = n + ? WHERE k = ?`, int64(4), 1)
	b.Query(`UPDATE `+keyspace+`.cnt SET n = n + ? WHERE k = ?`, int64(6), 1)
	if err := b.Exec(); err != nil {
		t.Fatalf("counter batch: %v", err)
	}
	var n int64
	if err := s.Query(`SELECT n FROM ` + keyspace + `.cnt WHERE k = 1`).Scan(&n); err != nil || n != 10 {
		t.Errorf("counter: %d, err %v", n, err)
	}
}

func requestErrCode(err error) int {
	var re gocql.RequestError
	if errors.As(err, &re) {
		return re.Code()
	}
	return -1
}

func TestErrors(t *testing.T) {
	s := newSession(t)
	defer s.Close()
	err := s.Query(`SELEKT * FROM system.local`).Exec()
	if code := requestErrCode(err); code != gocql.ErrCodeSyntax {
		t.Errorf("syntax error: code %#x, err %v", code, err)
	}
	err = s.Query(`SELECT * FROM ` + keyspace + `.missing_table`).Exec()
	if code := requestErrCode(err); code != gocql.ErrCodeInvalid {
		t.Errorf("unknown table: code %#x, err %v", code, err)
	}
	// bound values go through PREPARE: an unknown table fails there too
	err = s.Query(`SELECT * FROM `+keyspace+`.missing_table WHERE k = ?`, 1).Exec()
	if code := requestErrCode(err); code != gocql.ErrCodeInvalid {
		t.Errorf("prepare of unknown table: code %#x, err %v", code, err)
	}
	exec(t, s, `CREATE TABLE `+keyspace+`.dup (k int PRIMARY KEY)`)
	err = s.Query(`CREATE TABLE ` + keyspace + `.dup (k int PRIMARY KEY)`).Exec()
	var ae *gocql.RequestErrAlreadyExists
	if !errors.As(err, &ae) || ae.Table != "dup" || ae.Keyspace != keyspace {
		t.Errorf("already exists: %#v", err)
	}
}

func TestVectorOnV5Server(t *testing.T) {
	s := newSession(t)
	defer s.Close()
	exec(t, s, `CREATE TABLE `+keyspace+`.vec (k int PRIMARY KEY, v vector<float, 3>)`)
	want := []float32{1.5, -2, 0.25}
	exec(t, s, `INSERT INTO `+keyspace+`.vec (k, v) VALUES (?, ?)`, 1, want)
	var got []float32
	if err := s.Query(`SELECT v FROM ` + keyspace + `.vec WHERE k = 1`).Scan(&got); err != nil {
		t.Fatalf("select vector: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("vector: got %v want %v", got, want)
	}
}

// protocols are the native protocol versions the type round trips run on: gocql speaks v5
// by default (TestVectorOnV5Server) and v4 when asked.
var protocols = []int{4, 5}

func withProtocol(version int) func(*gocql.ClusterConfig) {
	return func(c *gocql.ClusterConfig) { c.ProtoVersion = version }
}

// point is a tuple<double, double>: gocql fills a struct's fields in declaration order.
type point struct {
	X, Y float64
}

// pair is a tuple<int, text>.
type pair struct {
	N int32
	S string
}

// address is the UDT <keyspace>.address; the cql tags name its fields.
type address struct {
	Street string   `cql:"street"`
	Zip    int32    `cql:"zip"`
	Phones []string `cql:"phones"`
	Loc    point    `cql:"loc"`
}

// person is the UDT <keyspace>.person, with a nested UDT and a set field.
type person struct {
	Name string   `cql:"name"`
	Home address  `cql:"home"`
	Tags []string `cql:"tags"`
}

// TestEveryTypeRoundTrip writes a value of every CQL type the first round trip leaves out
// (ascii, varchar, int, time, duration, tuple, UDT frozen and not, frozen and nested
// collections, edge values of the numeric and date types) and reads it back, on v4 and v5.
func TestEveryTypeRoundTrip(t *testing.T) {
	setup := newSession(t)
	defer setup.Close()
	exec(t, setup, `CREATE TYPE `+keyspace+`.address (street text, zip int,
		phones frozen<list<text>>, loc tuple<double, double>)`)
	exec(t, setup, `CREATE TYPE `+keyspace+`.person (name text, home frozen<address>,
		tags set<ascii>)`)
	exec(t, setup, `CREATE TABLE `+keyspace+`.every (k int PRIMARY KEY, a ascii, vc varchar,
		i int, bi bigint, si smallint, ti tinyint, vi varint, tm time, du duration,
		ts timestamp, dt date, tup tuple<int, text, boolean>, fa frozen<address>, ua address,
		pe frozen<person>, la list<frozen<address>>, fl frozen<list<int>>,
		fs frozen<set<bigint>>, fm frozen<map<text, frozen<list<int>>>>,
		ml map<int, frozen<set<text>>>, sp set<frozen<tuple<int, text>>>, ld list<duration>)`)
	home := address{Street: "1 Rue de l'Été", Zip: 75001, Phones: []string{"+33 1", "+33 2"},
		Loc: point{48.8566, 2.3522}}
	work := address{Street: "", Zip: -1, Phones: []string{}, Loc: point{-0.5, 1e300}}
	pe := person{Name: "Zoë", Home: home, Tags: []string{"b", "a"}}
	vi, _ := new(big.Int).SetString("-170141183460469231731687303715884105729", 10)
	tm := 23*time.Hour + 59*time.Minute + 59*time.Second + 999_999_999
	du := gocql.Duration{Months: 14, Days: 3, Nanoseconds: 5_000_000_007}
	ld := []gocql.Duration{{Months: -1, Days: -2, Nanoseconds: -3}, {}, {Nanoseconds: 1}}
	ts := time.Date(1969, 12, 31, 23, 59, 59, 999_000_000, time.UTC)
	dt := time.Date(1582, 10, 4, 0, 0, 0, 0, time.UTC)
	fm := map[string][]int32{"x": {1, 2}, "": {}}
	ml := map[int32][]string{-5: {"p", "q"}, 7: {""}}
	for _, proto := range protocols {
		t.Run(fmt.Sprintf("v%d", proto), func(t *testing.T) {
			s := newSessionWith(t, withProtocol(proto))
			defer s.Close()
			k := proto
			err := s.Query(`INSERT INTO `+keyspace+`.every (k, a, vc, i, bi, si, ti, vi, tm,
				du, ts, dt, fa, ua, pe, la, fl, fs, fm, ml, sp, ld)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				k, "plain ascii ~", "varchar ✓", int32(-2147483648), int64(9223372036854775807),
				int16(-32768), int8(127), vi, tm, du, ts, dt, home, home, pe,
				[]address{home, work}, []int32{3, 3, 1}, []int64{-9, 0, 9}, fm, ml,
				[]pair{{2, "a"}, {1, "b"}, {1, "a"}}, ld).Exec()
			if err != nil {
				t.Fatalf("insert: %v", err)
			}
			// gocql cannot bind a top-level tuple marker (it expects one value per tuple
			// element but marshals one per marker), so this tuple is a literal; the tuples
			// inside sp, loc and the UDTs go through gocql's tuple marshalling.
			exec(t, s, `UPDATE `+keyspace+`.every SET tup = (-9, 'nine', false) WHERE k = ?`, k)
			var (
				ga, gvc  string
				gi       int32
				gbi      int64
				gsi      int16
				gti      int8
				gvi      *big.Int
				gtm      time.Duration
				gdu      gocql.Duration
				gts, gdt time.Time
				t1       int32
				t2       string
				t3       bool
				gfa, gua address
				gpe      person
				gla      []address
				gfl      []int32
				gfs      []int64
				gfm      map[string][]int32
				gml      map[int32][]string
				gsp      []pair
				gld      []gocql.Duration
			)
			err = s.Query(`SELECT a, vc, i, bi, si, ti, vi, tm, du, ts, dt, tup, fa, ua, pe, la,
				fl, fs, fm, ml, sp, ld FROM `+keyspace+`.every WHERE k = ?`, k).Scan(&ga, &gvc,
				&gi, &gbi, &gsi, &gti, &gvi, &gtm, &gdu, &gts, &gdt, &t1, &t2, &t3, &gfa, &gua,
				&gpe, &gla, &gfl, &gfs, &gfm, &gml, &gsp, &gld)
			if err != nil {
				t.Fatalf("select: %v", err)
			}
			check := func(name string, got, want interface{}) { t.Helper(); checkEqual(t, name, got, want) }
			check("ascii", ga, "plain ascii ~")
			check("varchar", gvc, "varchar ✓")
			check("int", gi, int32(-2147483648))
			check("bigint", gbi, int64(9223372036854775807))
			check("smallint", gsi, int16(-32768))
			check("tinyint", gti, int8(127))
			if gvi == nil || gvi.Cmp(vi) != 0 {
				t.Errorf("varint: got %v, want %v", gvi, vi)
			}
			check("time", gtm, tm)
			check("duration", gdu, du)
			check("timestamp", gts.UTC(), ts)
			check("date", gdt.UTC(), dt)
			check("tuple", []interface{}{t1, t2, t3}, []interface{}{int32(-9), "nine", false})
			check("frozen udt", gfa, home)
			check("udt", gua, home)
			// A frozen UDT is kept as written: Cassandra does not sort the set inside it.
			check("nested udt", gpe, pe)
			check("list of udt", gla, []address{home, work})
			check("frozen list", gfl, []int32{3, 3, 1})
			// Frozen sets written in order here: TestFrozenCollectionsNormalised writes them
			// out of order.
			check("frozen set", gfs, []int64{-9, 0, 9})
			check("frozen map of lists", gfm, fm)
			check("map of frozen sets", gml, ml)
			check("set of tuples", gsp, []pair{{1, "a"}, {1, "b"}, {2, "a"}})
			check("list of durations", gld, ld)

			// A non-frozen UDT's fields are cells of their own: set one, null another.
			exec(t, s, `UPDATE `+keyspace+`.every SET ua.zip = ?, ua.phones = null WHERE k = ?`,
				int32(13), k)
			var upd address
			if err := s.Query(`SELECT ua FROM `+keyspace+`.every WHERE k = ?`, k).
				Scan(&upd); err != nil {
				t.Fatalf("select ua: %v", err)
			}
			check("udt after field update", upd,
				address{Street: home.Street, Zip: 13, Phones: nil, Loc: home.Loc})

			// The same UDT written from a map and read back into one.
			exec(t, s, `UPDATE `+keyspace+`.every SET fa = ? WHERE k = ?`,
				map[string]interface{}{"street": "map st", "zip": int32(5),
					"phones": []string{"1"}, "loc": point{1, 2}}, k)
			var m map[string]interface{}
			if err := s.Query(`SELECT fa FROM `+keyspace+`.every WHERE k = ?`, k).
				Scan(&m); err != nil {
				t.Fatalf("select fa: %v", err)
			}
			check("udt as map", m, map[string]interface{}{"street": "map st", "zip": 5,
				"phones": []string{"1"}, "loc": []interface{}{1.0, 2.0}})
		})
	}
}

// TestFrozenCollectionsNormalised writes frozen sets out of order and with duplicates, as
// bound values: Cassandra stores a frozen set sorted and without duplicates (a frozen map
// sorted by key), as it does a non-frozen one, so the same set or map in another order is
// the same value, and the same key when it is one.
//
// (Amphora stored bound frozen sets and maps as sent until the server normalised them too.)
func TestFrozenCollectionsNormalised(t *testing.T) {
	s := newSession(t)
	defer s.Close()
	exec(t, s, `CREATE TABLE `+keyspace+`.fvalues (k int PRIMARY KEY, fs frozen<set<bigint>>,
		ms map<int, frozen<set<text>>>, ls list<frozen<set<int>>>)`)
	exec(t, s, `INSERT INTO `+keyspace+`.fvalues (k, fs, ms, ls) VALUES (?, ?, ?, ?)`, 1,
		[]int64{9, -9, 0, 9}, map[int32][]string{-5: {"q", "p", "q"}}, [][]int32{{2, 1}, {1}})
	var (
		fs []int64
		ms map[int32][]string
		ls [][]int32
	)
	if err := s.Query(`SELECT fs, ms, ls FROM `+keyspace+`.fvalues WHERE k = 1`).
		Scan(&fs, &ms, &ls); err != nil {
		t.Fatalf("select: %v", err)
	}
	if !reflect.DeepEqual(fs, []int64{-9, 0, 9}) {
		t.Errorf("frozen<set<bigint>> written as [9 -9 0 9]: got %v, want [-9 0 9]", fs)
	}
	if want := map[int32][]string{-5: {"p", "q"}}; !reflect.DeepEqual(ms, want) {
		t.Errorf("map<int, frozen<set<text>>> written as {-5: [q p q]}: got %v, want %v", ms, want)
	}
	if want := [][]int32{{1, 2}, {1}}; !reflect.DeepEqual(ls, want) {
		t.Errorf("list<frozen<set<int>>> written as [[2 1] [1]]: got %v, want %v", ls, want)
	}

	exec(t, s, `CREATE TABLE `+keyspace+`.fkeys (p frozen<set<int>>,
		c frozen<map<text, int>>, v text, PRIMARY KEY (p, c))`)
	// Bound values and literals: gocql writes a Go map in random order.
	exec(t, s, `INSERT INTO `+keyspace+`.fkeys (p, c, v) VALUES (?, {'b': 2, 'a': 1}, ?)`,
		[]int32{3, 1, 2, 1}, "first")
	exec(t, s, `UPDATE `+keyspace+`.fkeys SET v = 'second' WHERE p = {2, 3, 1} AND c = ?`,
		map[string]int{"a": 1, "b": 2})
	var (
		p []int32
		c map[string]int
		v string
	)
	iter := s.Query(`SELECT p, c, v FROM ` + keyspace + `.fkeys`).Iter()
	n := 0
	for iter.Scan(&p, &c, &v) {
		n++
		if !reflect.DeepEqual(p, []int32{1, 2, 3}) || !reflect.DeepEqual(c,
			map[string]int{"a": 1, "b": 2}) || v != "second" {
			t.Errorf("row %d: p %v c %v v %q, want [1 2 3] map[a:1 b:2] second", n, p, c, v)
		}
	}
	if err := iter.Close(); err != nil || n != 1 {
		t.Errorf("%d rows (want 1), err %v", n, err)
	}
	v = ""
	if err := s.Query(`SELECT v FROM `+keyspace+`.fkeys WHERE p = ?`, []int32{2, 1, 3}).
		Scan(&v); err != nil || v != "second" {
		t.Errorf("lookup by the set as [2 1 3]: v %q, err %v; want \"second\"", v, err)
	}
}

// TestVectorTypes round-trips vectors of fixed-size and variable-size elements.
func TestVectorTypes(t *testing.T) {
	setup := newSession(t)
	defer setup.Close()
	exec(t, setup, `CREATE TABLE `+keyspace+`.vecs (k int PRIMARY KEY, vf vector<float, 4>,
		vb vector<bigint, 3>, vt vector<text, 2>, vd vector<double, 1>)`)
	vf := []float32{0, -1.5, 3.25, 1e-7}
	vb := []int64{-9223372036854775808, 0, 42}
	vt := []string{"", "vector ✓"}
	vd := []float64{-2.5e300}
	for _, proto := range protocols {
		t.Run(fmt.Sprintf("v%d", proto), func(t *testing.T) {
			s := newSessionWith(t, withProtocol(proto))
			defer s.Close()
			exec(t, s, `INSERT INTO `+keyspace+`.vecs (k, vf, vb, vt, vd) VALUES (?, ?, ?, ?, ?)`,
				proto, vf, vb, vt, vd)
			var (
				gf []float32
				gb []int64
				gt []string
				gd []float64
			)
			if err := s.Query(`SELECT vf, vb, vt, vd FROM `+keyspace+`.vecs WHERE k = ?`, proto).
				Scan(&gf, &gb, &gt, &gd); err != nil {
				t.Fatalf("select: %v", err)
			}
			for _, c := range []struct {
				name      string
				got, want interface{}
			}{{"float", gf, vf}, {"bigint", gb, vb}, {"text", gt, vt}, {"double", gd, vd}} {
				if !reflect.DeepEqual(c.got, c.want) {
					t.Errorf("vector<%s>: got %#v, want %#v", c.name, c.got, c.want)
				}
			}
		})
	}
}

// schemaEvents records what gocql's schema listeners report. gocql refreshes its schema
// cache, and so calls these, only when its control connection receives a pushed
// SCHEMA_CHANGE event (and at session start), never for the RESULT of its own DDL.
type schemaEvents struct {
	mu   sync.Mutex
	seen []string
}

func (e *schemaEvents) add(format string, args ...interface{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, fmt.Sprintf(format, args...))
}

// await waits up to 15 s for an event; gocql debounces refreshes by 1 s.
func (e *schemaEvents) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		e.mu.Lock()
		for _, s := range e.seen {
			if s == want {
				e.mu.Unlock()
				return
			}
		}
		seen := append([]string(nil), e.seen...)
		e.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 15 s; got %q", want, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func columnNames(tm *gocql.TableMetadata) string {
	return fmt.Sprint(tm.OrderedColumns)
}

func (e *schemaEvents) OnKeyspaceCreated(ev gocql.OnKeyspaceCreatedEvent) {
	e.add("keyspace created %s", ev.Keyspace.Name)
}
func (e *schemaEvents) OnKeyspaceUpdated(ev gocql.OnKeyspaceUpdatedEvent) {
	e.add("keyspace updated %s", ev.New.Name)
}
func (e *schemaEvents) OnKeyspaceDropped(ev gocql.OnKeyspaceDroppedEvent) {
	e.add("keyspace dropped %s", ev.Keyspace.Name)
}
func (e *schemaEvents) OnTableCreated(ev gocql.OnTableCreatedEvent) {
	e.add("table created %s.%s %s", ev.Table.Keyspace, ev.Table.Name, columnNames(ev.Table))
}
func (e *schemaEvents) OnTableUpdated(ev gocql.OnTableUpdatedEvent) {
	e.add("table updated %s.%s %s", ev.New.Keyspace, ev.New.Name, columnNames(ev.New))
}
func (e *schemaEvents) OnTableDropped(ev gocql.OnTableDroppedEvent) {
	e.add("table dropped %s.%s", ev.Table.Keyspace, ev.Table.Name)
}
func (e *schemaEvents) OnUserTypeCreated(ev gocql.OnUserTypeCreatedEvent) {
	e.add("type created %s.%s %v", ev.UserType.Keyspace, ev.UserType.Name, ev.UserType.FieldNames)
}
func (e *schemaEvents) OnUserTypeUpdated(ev gocql.OnUserTypeUpdatedEvent) {
	e.add("type updated %s.%s %v", ev.New.Keyspace, ev.New.Name, ev.New.FieldNames)
}
func (e *schemaEvents) OnUserTypeDropped(ev gocql.OnUserTypeDroppedEvent) {
	e.add("type dropped %s.%s", ev.UserType.Keyspace, ev.UserType.Name)
}

// TestSchemaChangeEvents runs DDL on one session and waits for a second session's schema
// listeners to report it: that needs the server to push SCHEMA_CHANGE events to the second
// session's control connection.
func TestSchemaChangeEvents(t *testing.T) {
	events := &schemaEvents{}
	watcher := newSessionWith(t, func(c *gocql.ClusterConfig) {
		c.Metadata.SchemaListener = gocql.SchemaListenersConfig{
			KeyspaceChangeListener: events,
			TableChangeListener:    events,
			UserTypeChangeListener: events,
		}
	})
	defer watcher.Close()
	ddl := newSession(t)
	defer ddl.Close()
	ks := keyspace + "_events"
	// One change at a time: two changes inside gocql's 1 s debounce window would be
	// diffed together (a create then drop would report nothing).
	steps := []struct{ stmt, want string }{
		{`CREATE KEYSPACE ` + ks + ` WITH replication =
			{'class': 'SimpleStrategy', 'replication_factor': 1}`, "keyspace created " + ks},
		{`CREATE TABLE ` + ks + `.evt (k int PRIMARY KEY, v text)`,
			"table created " + ks + ".evt [k v]"},
		{`ALTER TABLE ` + ks + `.evt ADD w int`, "table updated " + ks + ".evt [k v w]"},
		{`CREATE TYPE ` + ks + `.evt_type (a int, b text)`, "type created " + ks + ".evt_type [a b]"},
		{`ALTER TYPE ` + ks + `.evt_type ADD c date`, "type updated " + ks + ".evt_type [a b c]"},
		{`DROP TABLE ` + ks + `.evt`, "table dropped " + ks + ".evt"},
		{`DROP TYPE ` + ks + `.evt_type`, "type dropped " + ks + ".evt_type"},
		{`DROP KEYSPACE ` + ks, "keyspace dropped " + ks},
	}
	for _, step := range steps {
		exec(t, ddl, step.stmt)
		events.await(t, step.want)
	}
}

// errorFrames counts the ERROR frames a session receives.
type errorFrames struct {
	n atomic.Int64
}

func (e *errorFrames) ObserveFrameHeader(_ context.Context, h gocql.ObservedFrameHeader) {
	if h.Opcode.String() == "ERROR" {
		e.n.Add(1)
	}
}

// TestRePrepareAfterUnprepared makes the server forget prepared statements that gocql still
// has cached: Cassandra drops a table's prepared statements on DROP TABLE and on ALTER
// TABLE. The next EXECUTE is answered Unprepared (one ERROR frame) and gocql prepares
// again and re-executes, transparently.
func TestRePrepareAfterUnprepared(t *testing.T) {
	errs := &errorFrames{}
	s := newSessionWith(t, func(c *gocql.ClusterConfig) { c.FrameHeaderObserver = errs })
	defer s.Close()
	tbl := keyspace + ".reprep"
	ins := `INSERT INTO ` + tbl + ` (k, v) VALUES (?, ?)`
	sel := `SELECT k, v FROM ` + tbl + ` WHERE k = ?`
	read := func(k int) (string, error) {
		var gk int
		var v string
		err := s.Query(sel, k).Scan(&gk, &v)
		if err == nil && gk != k {
			err = fmt.Errorf("row of key %d for key %d", gk, k)
		}
		return v, err
	}
	// expectOneUnprepared runs step and checks it succeeded after exactly one ERROR frame.
	expectOneUnprepared := func(what string, step func() error) {
		t.Helper()
		before := errs.n.Load()
		if err := step(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := errs.n.Load() - before; n != 1 {
			t.Errorf("%s: %d ERROR frames, want 1 (Unprepared, then re-prepared)", what, n)
		}
	}

	exec(t, s, `CREATE TABLE `+tbl+` (k int PRIMARY KEY, v text)`)
	exec(t, s, ins, 1, "before")
	if v, err := read(1); err != nil || v != "before" {
		t.Fatalf("read before: %q, %v", v, err)
	}
	exec(t, s, `DROP TABLE `+tbl)
	exec(t, s, `CREATE TABLE `+tbl+` (k int PRIMARY KEY, v text)`)
	expectOneUnprepared("insert after drop and create", func() error {
		return s.Query(ins, 2, "after").Exec()
	})
	expectOneUnprepared("select after drop and create", func() error {
		v, err := read(2)
		if err == nil && v != "after" {
			err = fmt.Errorf("v = %q, want \"after\"", v)
		}
		return err
	})
	if v, err := read(1); !errors.Is(err, gocql.ErrNotFound) {
		t.Errorf("row 1 survived the drop: %q, %v", v, err)
	}

	exec(t, s, `ALTER TABLE `+tbl+` ADD w int`)
	expectOneUnprepared("insert after alter", func() error {
		return s.Query(ins, 3, "altered").Exec()
	})
	expectOneUnprepared("select after alter", func() error {
		v, err := read(3)
		if err == nil && v != "altered" {
			err = fmt.Errorf("v = %q, want \"altered\"", v)
		}
		return err
	})
	var keys []int
	iter := s.Query(`SELECT k FROM ` + tbl).Iter()
	var k int
	for iter.Scan(&k) {
		keys = append(keys, k)
	}
	if err := iter.Close(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	sort.Ints(keys)
	if !reflect.DeepEqual(keys, []int{2, 3}) {
		t.Errorf("keys %v, want [2 3]", keys)
	}
}
