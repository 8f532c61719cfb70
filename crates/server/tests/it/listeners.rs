//! Stopping and restarting the listeners (shutdown, `disablebinary` / `enablebinary`).

use std::net::TcpStream;

use amphora_protocol::Opcode;
use amphora_server::transport::{TransportConfig, start_listeners_with};

use crate::client::*;
use crate::mock;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
        .block_on(f)
}

#[test]
fn stop_drains_in_flight_requests_closes_connections_and_frees_the_ports() {
    let mut node = TestNode::start(2);
    let (native, aware) = (node.native(), node.shard_aware());
    let mut busy = node.ready_client();
    busy.send_query(1, "sleep 300");
    let mut idle = Client::connect(aware, 4);
    idle.startup(&[]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    block_on(node.listeners.stop(true));
    // The request in flight still answers, then the connection closes.
    let r = busy.recv();
    assert_eq!((r.stream, r.opcode), (1, Opcode::Result));
    busy.expect_closed();
    idle.expect_closed();
    assert!(
        TcpStream::connect(native).is_err(),
        "native port still open"
    );
    // enablebinary: the same ports bind again.
    node.listeners = start_listeners_with(
        TransportConfig {
            native_port: native.port(),
            shard_aware_port: aware.port(),
            ..TransportConfig::default()
        },
        node.shards.clone(),
        mock::local,
    )
    .expect("listen again");
    let mut c = node.ready_client();
    assert_eq!(rows_of(&c.query(1, "rows 1")).rows.len(), 1);
}

#[test]
fn stop_without_closing_keeps_connections() {
    let mut node = TestNode::start(1);
    let mut c = node.ready_client();
    block_on(node.listeners.stop(false));
    assert!(TcpStream::connect(node.native()).is_err());
    assert_eq!(rows_of(&c.query(1, "rows 1")).rows.len(), 1);
}
