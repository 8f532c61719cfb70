//! The Prometheus endpoint and the per-shard request counters.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use amphora_server::metrics;

use crate::client::*;

fn scrape(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}

fn counter(text: &str, name: &str, shard: u32) -> u64 {
    let prefix = format!("{name}{{shard=\"{shard}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{prefix} not in:\n{text}"))
}

#[test]
fn requests_are_counted_on_the_shard_that_owns_the_connection() {
    let node = TestNode::start(3);
    let m =
        metrics::start("127.0.0.1:0".parse().expect("addr"), node.shards.clone()).expect("metrics");
    let before = scrape(m.local_addr(), "/metrics");
    assert!(before.starts_with("HTTP/1.1 200 OK\r\n"), "{before}");
    let mut c = Client::connect(node.shard_aware(), 4);
    let shard = u32::from(c.local_port() % 3);
    let base = counter(&before, "amphora_cql_requests_total", shard);
    c.startup(&[]);
    for s in 0..10 {
        c.query(s, "rows 1");
    }
    c.query(11, "error invalid");
    let after = scrape(m.local_addr(), "/metrics");
    // STARTUP + 11 queries.
    assert_eq!(
        counter(&after, "amphora_cql_requests_total", shard),
        base + 12
    );
    assert!(counter(&after, "amphora_cql_connections", shard) >= 1);
    assert!(
        after.contains(&format!(
            "amphora_cql_errors_total{{shard=\"{shard}\",code=\"0x2200\"}} 1"
        )),
        "{after}"
    );
    assert!(scrape(m.local_addr(), "/nope").starts_with("HTTP/1.1 404"));
}
