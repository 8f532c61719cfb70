//! Requests: out-of-order answers, many in flight, USE, paging, prepared statements, errors,
//! tracing, events, batches, backpressure.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use amphora_protocol::{Envelope, Flags, Opcode};
use bytes::{BufMut, BytesMut};

use crate::client::*;

#[test]
fn answers_leave_out_of_order() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    c.send_query(1, "sleep 300");
    c.send_query(2, "rows 1");
    assert_eq!(c.recv().stream, 2);
    assert_eq!(c.recv().stream, 1);
}

#[test]
fn many_requests_in_flight_on_one_connection() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    let started = Instant::now();
    for s in 0..500 {
        c.send_query(s, "sleep 200");
    }
    let streams: HashSet<i16> = (0..500).map(|_| c.recv().stream).collect();
    assert_eq!(streams.len(), 500);
    // Concurrent, not one after the other.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn use_sets_the_keyspace_for_later_requests() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    assert_eq!(rows_of(&c.query(1, "keyspace")).rows[0][0], None);
    let r = c.query(2, "USE \"Ks1\"");
    let mut rd = reader(&r);
    assert_eq!(rd.read_i32().expect("kind"), 3);
    assert_eq!(rd.read_string().expect("ks"), "Ks1");
    let rows = rows_of(&c.query(3, "keyspace"));
    assert_eq!(rows.rows[0][0].as_deref(), Some(&b"Ks1"[..]));
    // Another connection has its own keyspace.
    let mut other = node.ready_client();
    assert_eq!(rows_of(&other.query(1, "keyspace")).rows[0][0], None);
}

#[test]
fn paging_state_round_trips() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    let mut state: Option<bytes::Bytes> = None;
    let mut all = Vec::new();
    let mut pages = 0;
    loop {
        c.send_query_with(1, 0, "rows 10", Some(4), state.as_deref());
        let rows = rows_of(&c.recv());
        pages += 1;
        all.extend(rows.rows.iter().map(|r| int_cell(&r[0])));
        assert_eq!(rows.flags & 0x02 != 0, rows.paging_state.is_some());
        match rows.paging_state {
            Some(p) => state = Some(p),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(all, (0..10).collect::<Vec<_>>());
}

#[test]
fn prepare_execute_and_unprepared() {
    let node = TestNode::start(1);
    for version in [4u8, 5] {
        let mut c = Client::connect(node.native(), version);
        c.startup(&[]);
        let r = c.prepare(1, "rows 3");
        let mut rd = reader(&r);
        assert_eq!(rd.read_i32().expect("kind"), 4);
        let id = rd.read_short_bytes().expect("id");
        let rmid = if version >= 5 {
            rd.read_short_bytes().expect("result metadata id")
        } else {
            bytes::Bytes::new()
        };
        let flags = rd.read_u32().expect("flags");
        assert_eq!(flags & 1, 1, "global table spec");
        assert_eq!(rd.read_i32().expect("bind count"), 2);
        assert_eq!(rd.read_i32().expect("pk count"), 1);
        assert_eq!(rd.read_u16().expect("pk index"), 0);
        let full = rows_of(&c.execute(2, &id, &rmid, false));
        assert_eq!(full.columns, vec![("n".to_string(), 0x0009)]);
        assert_eq!(full.rows.len(), 3);
        assert_eq!(full.new_metadata_id, None);
        let skipped = rows_of(&c.execute(3, &id, &rmid, true));
        assert_ne!(skipped.flags & 0x04, 0, "no_metadata");
        assert_eq!(skipped.column_count, 1);
        assert_eq!(skipped.rows.len(), 3);
        // v5: a result_metadata_id that is not the result's current one gets full metadata,
        // Metadata_changed and the current id, even with Skip_metadata; v4 has no ids.
        let stale = rows_of(&c.execute(5, &id, b"stale", true));
        if version >= 5 {
            assert_eq!(stale.flags & 0x04, 0, "metadata sent");
            assert_ne!(stale.flags & 0x08, 0, "metadata changed");
            assert_eq!(stale.new_metadata_id.as_deref(), Some(&rmid[..]));
            assert_eq!(stale.columns, vec![("n".to_string(), 0x0009)]);
        } else {
            assert_ne!(stale.flags & 0x04, 0, "no_metadata");
            assert_eq!(stale.new_metadata_id, None);
        }
        assert_eq!(stale.rows.len(), 3);
        let r = c.execute(4, b"unknown-id", b"", false);
        let (code, _) = error_of(&r);
        assert_eq!(code, 0x2500);
        let mut rd = reader(&r);
        rd.read_i32().expect("code");
        rd.read_string().expect("message");
        assert_eq!(&rd.read_short_bytes().expect("id")[..], b"unknown-id");
    }
}

/// The id in a PREPARE's Prepared answer.
fn prepared_id(r: &Envelope) -> bytes::Bytes {
    let mut rd = reader(r);
    assert_eq!(rd.read_i32().expect("kind"), 4, "Prepared");
    rd.read_short_bytes().expect("id")
}

#[test]
fn executes_answered_without_a_future_carry_rows_warnings_and_errors() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    // `now Q` statements are answered by the backend's `execute_now` unless traced; its
    // `execute` would add the warning "slow path".
    let rows = prepared_id(&c.prepare(1, "now rows 3"));
    let r = c.execute(2, &rows, b"", false);
    assert!(warnings_of(&r).is_empty(), "took the slow path: {r:?}");
    assert_eq!(rows_of(&r).rows.len(), 3);
    let warned = prepared_id(&c.prepare(3, "now warn 2 error"));
    let r = c.execute(4, &warned, b"", false);
    assert_eq!(error_of(&r), (0x2200, "warned and failed".to_string()));
    assert_eq!(
        warnings_of(&r),
        vec!["mock warning 0".to_string(), "mock warning 1".to_string()]
    );
    // A panic answers ServerError; the connection and its next requests go on.
    let panics = prepared_id(&c.prepare(5, "now panic"));
    assert_eq!(error_of(&c.execute(6, &panics, b"", false)).0, 0x0000);
    assert_eq!(rows_of(&c.execute(7, &rows, b"", false)).rows.len(), 3);
    // A traced EXECUTE takes the path that records the trace.
    let mut body = BytesMut::new();
    put_short_bytes(&mut body, &rows);
    body.extend_from_slice(&params(4, 0, &[], None, None));
    c.send(0x02, 8, Opcode::Execute as u8, &body);
    let r = c.recv();
    assert!(r.flags.contains(Flags::TRACING), "{r:?}");
    assert_eq!(warnings_of(&r), vec!["slow path".to_string()]);
}

#[test]
fn coordinator_errors_map_to_codes() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    for (q, want) in [
        ("error syntax", 0x2000),
        ("error invalid", 0x2200),
        ("error exists", 0x2400),
        ("error timeout", 0x1100),
        ("error other", 0x0000),
    ] {
        let r = c.query(1, q);
        assert_eq!(error_of(&r).0, want, "{q}");
        if want == 0x2400 {
            let mut rd = reader(&r);
            rd.read_i32().expect("code");
            rd.read_string().expect("message");
            assert_eq!(rd.read_string().expect("ks"), "ks");
            assert_eq!(rd.read_string().expect("table"), "t");
        }
    }
    // Errors while preparing, too.
    assert_eq!(error_of(&c.prepare(2, "error x")).0, 0x2000);
}

#[test]
fn a_panicking_request_answers_server_error_and_the_connection_lives() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    let r = c.query(1, "panic");
    assert_eq!(error_of(&r).0, 0x0000);
    assert_eq!(rows_of(&c.query(2, "rows 1")).rows.len(), 1);
}

#[test]
fn tracing_flag_returns_a_session_id() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    c.send_query_with(7, Flags::TRACING, "rows 1", None, None);
    let r = c.recv();
    assert!(r.flags.contains(Flags::TRACING));
    let id = &r.body[..16];
    assert_eq!(id[6] >> 4, 1, "a time-based uuid");
    assert_eq!(rows_of(&r).rows.len(), 1);
    // Untraced requests carry none.
    let r = c.query(8, "rows 1");
    assert!(!r.flags.contains(Flags::TRACING));
}

/// A request with a custom payload (envelope flag 0x04, a `[bytes map]` before the body)
/// is answered like one without: the payload is read and, as by Cassandra's default query
/// handler, not used; the answer carries none, and the connection goes on.
#[test]
fn custom_payload_is_read_and_the_request_answered() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    let mut body = BytesMut::new();
    body.put_u16(2);
    put_string(&mut body, "app");
    body.put_i32(3);
    body.put_slice(b"abc");
    put_string(&mut body, "empty");
    body.put_i32(0);
    put_long_string(&mut body, "rows 2");
    body.extend_from_slice(&params(c.version, 0, &[], None, None));
    c.send(Flags::CUSTOM_PAYLOAD, 9, Opcode::Query as u8, &body);
    let r = c.recv();
    assert_eq!((r.stream, r.opcode), (9, Opcode::Result), "{r:?}");
    assert!(!r.flags.contains(Flags::CUSTOM_PAYLOAD), "{r:?}");
    assert_eq!(rows_of(&r).rows.len(), 2);
    assert_eq!(rows_of(&c.query(10, "rows 1")).rows.len(), 1);
}

#[test]
fn register_forwards_schema_events() {
    let node = TestNode::start(2);
    let mut listener = node.ready_client();
    let mut body = BytesMut::new();
    body.put_u16(2);
    put_string(&mut body, "SCHEMA_CHANGE");
    put_string(&mut body, "STATUS_CHANGE");
    listener.send(0, 5, Opcode::Register as u8, &body);
    let r = listener.recv();
    assert_eq!((r.opcode, r.stream), (Opcode::Ready, 5));
    let mut ddl = node.ready_client();
    let r = ddl.query(1, "create ks events_ks");
    let mut rd = reader(&r);
    assert_eq!(rd.read_i32().expect("kind"), 5);
    let ev = listener.recv();
    assert_eq!((ev.opcode, ev.stream), (Opcode::Event, -1));
    let mut rd = reader(&ev);
    assert_eq!(rd.read_string().expect("type"), "SCHEMA_CHANGE");
    assert_eq!(rd.read_string().expect("change"), "CREATED");
    assert_eq!(rd.read_string().expect("target"), "KEYSPACE");
    assert_eq!(rd.read_string().expect("ks"), "events_ks");
    // An unknown event type is a protocol error.
    let mut body = BytesMut::new();
    body.put_u16(1);
    put_string(&mut body, "NOT_AN_EVENT");
    listener.send(0, 6, Opcode::Register as u8, &body);
    assert_eq!(error_of(&listener.recv()).0, 0x000A);
}

#[test]
fn batch_of_queries_and_prepared() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    let mut body = BytesMut::new();
    body.put_u8(1); // unlogged
    body.put_u16(2);
    body.put_u8(0);
    put_long_string(&mut body, "insert 1");
    body.put_u16(0);
    body.put_u8(1);
    put_short_bytes(&mut body, b"id:x");
    body.put_u16(1);
    body.put_i32(-2); // unset
    body.put_u16(1); // consistency
    body.put_u8(0); // flags
    c.send(0, 3, Opcode::Batch as u8, &body);
    let r = c.recv();
    assert_eq!(reader(&r).read_i32().expect("kind"), 1, "Void");
}

#[test]
fn connection_in_flight_limit_holds_requests_back() {
    let node = TestNode::start_with(1, |c| c.max_inflight_per_connection = 4);
    let mut c = node.ready_client();
    let started = Instant::now();
    for s in 0..12 {
        c.send_query(s, "sleep 150");
    }
    for _ in 0..12 {
        assert_eq!(c.recv().opcode, Opcode::Result);
    }
    // Three waves of four.
    assert!(
        started.elapsed() >= Duration::from_millis(440),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn throw_on_overload_answers_overloaded() {
    let node = TestNode::start_with(1, |c| c.max_inflight_per_connection = 2);
    let mut c = Client::connect(node.native(), 5);
    c.startup(&[("THROW_ON_OVERLOAD", "1")]);
    for s in 0..6 {
        c.send_query(s, "sleep 300");
    }
    let codes: Vec<Opcode> = (0..6).map(|_| c.recv().opcode).collect();
    assert_eq!(
        codes.iter().filter(|o| **o == Opcode::Error).count(),
        4,
        "{codes:?}"
    );
}

#[test]
fn shard_in_flight_limit_spans_connections() {
    let node = TestNode::start_with(1, |c| c.max_inflight_per_shard = 3);
    let mut a = node.ready_client();
    let mut b = node.ready_client();
    let started = Instant::now();
    for s in 0..3 {
        a.send_query(s, "sleep 200");
    }
    std::thread::sleep(Duration::from_millis(50));
    b.send_query(1, "rows 1");
    // b waits for a slot on the shard.
    assert_eq!(b.recv().opcode, Opcode::Result);
    assert!(
        started.elapsed() >= Duration::from_millis(190),
        "{:?}",
        started.elapsed()
    );
    for _ in 0..3 {
        a.recv();
    }
}

#[test]
fn a_client_that_does_not_read_its_answers_is_not_buffered_without_limit() {
    let node = TestNode::start(1);
    let handled = || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        rt.block_on(amphora_server::metrics::gather(&node.shards))
            .expect("gather")[0]
            .requests_total
    };
    let mut c = node.ready_client();
    let base = handled();
    // 3000 requests of ~40 KB answers each (~120 MB), not read for a while.
    const N: i16 = 3000;
    for s in 0..N {
        c.send_query(s, "rows 5000");
    }
    std::thread::sleep(Duration::from_millis(1500));
    let taken = handled() - base;
    // One wave of the in-flight limit may run before the unsent answers stop the reader, plus
    // what fits in the socket buffers and the queued-bytes limit (~8 MiB / 40 KB each).
    let bound = amphora_server::transport::MAX_INFLIGHT_PER_CONNECTION as u64 + 400;
    assert!(
        taken <= bound,
        "the server took {taken} requests from a client that reads nothing"
    );
    // Reading resumes everything.
    let streams: HashSet<i16> = (0..N).map(|_| c.recv().stream).collect();
    assert_eq!(streams.len(), N as usize);
}

#[test]
fn warnings_travel_in_the_answer_prefix_from_v4() {
    let node = TestNode::start(1);
    for version in [3u8, 4, 5] {
        let mut c = Client::connect(node.native(), version);
        c.startup(&[]);
        let r = c.query(1, "warn 2");
        if version >= 4 {
            assert!(r.flags.contains(Flags::WARNING), "{r:?}");
            assert_eq!(
                warnings_of(&r),
                vec!["mock warning 0".to_string(), "mock warning 1".to_string()]
            );
        } else {
            // v3 has no warnings: the flag and the list are left out.
            assert!(!r.flags.contains(Flags::WARNING), "{r:?}");
        }
        assert_eq!(
            reader(&r).read_i32().expect("kind"),
            1,
            "Void after the list"
        );
        // An error answer carries the warnings raised before the failure.
        let r = c.query(2, "warn 1 error");
        assert_eq!(error_of(&r), (0x2200, "warned and failed".to_string()));
        assert_eq!(warnings_of(&r).len(), usize::from(version >= 4));
        // Traced: tracing id first, then the warnings.
        let mut body = BytesMut::new();
        put_long_string(&mut body, "warn 1");
        body.extend_from_slice(&params(version, 0, &[], None, None));
        c.send(0x02, 3, Opcode::Query as u8, &body);
        let r = c.recv();
        assert!(r.flags.contains(Flags::TRACING));
        assert_eq!(warnings_of(&r).len(), usize::from(version >= 4));
        assert_eq!(reader(&r).read_i32().expect("kind"), 1);
        // Warnings belong to their request only.
        let r = c.query(4, "rows 1");
        assert!(!r.flags.contains(Flags::WARNING), "{r:?}");
    }
}
