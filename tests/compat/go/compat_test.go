// Package compat checks the server with gocql (apache/cassandra-gocql-driver v2): connect,
// discover the node, create schema, prepared round-trips of several types, paging, a batch,
// and errors. Target: COMPAT_HOST / COMPAT_PORT (default 127.0.0.1:9042).
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
	host, port := target()
	cluster := gocql.NewCluster(host)
	cluster.Port = port
	cluster.Timeout = 30 * time.Second
	cluster.ConnectTimeout = 10 * time.Second
	cluster.Consistency = gocql.One
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
	check := func(name string, got, want interface{}) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %#v, want %#v", name, got, want)
		}
	}
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
