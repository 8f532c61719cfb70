//! The REST API itself: every GET path of the OpenAPI spec is served, and bad requests get
//! a 4xx with a JSON error.

use amphora_nodetool::{Client, NodetoolError};
use amphora_testkit::TestNode;

use crate::write_rows;

/// (path, methods) from docs/dev/rest-api.openapi.yaml.
fn spec_paths() -> Vec<(String, Vec<String>)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/dev/rest-api.openapi.yaml"
    );
    let text = std::fs::read_to_string(path).expect("spec");
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_paths = false;
    for line in text.lines() {
        if line == "paths:" {
            in_paths = true;
            continue;
        }
        if in_paths && !line.starts_with(' ') {
            break;
        }
        if let Some(p) = line.strip_prefix("  /") {
            out.push((format!("/{}", p.trim_end_matches(':')), Vec::new()));
        } else if let Some(m) = line.strip_prefix("    ")
            && !m.starts_with(' ')
            && let Some(last) = out.last_mut()
        {
            last.1.push(m.trim_end_matches(':').to_string());
        }
    }
    out
}

#[test]
fn every_documented_get_is_served_and_errors_are_json() {
    let node = TestNode::start(1).expect("start node");
    write_rows(&node, 0, 5);
    let c = Client::new("127.0.0.1", node.api.port());
    let paths = spec_paths();
    assert!(paths.len() > 30, "{paths:?}");
    for (p, methods) in &paths {
        if !methods.iter().any(|m| m == "get") {
            continue;
        }
        let concrete = p
            .replace("{keyspace}", "ks")
            .replace("{name}", "ks:t")
            .replace("{module}", "compaction")
            .replace("{type}", "read")
            .replace("{id}", "no-such-task");
        let concrete = if concrete.contains("natural_endpoints") {
            format!("{concrete}?cf=t&key=1")
        } else if concrete.contains("toppartitions") {
            // At the limits: the longest list, the largest capacity.
            format!("{concrete}?duration=10&list_size=1000&capacity=1024")
        } else {
            concrete
        };
        match c.get(&concrete) {
            Ok(_) => {}
            Err(NodetoolError::Server { status, message }) => {
                assert_ne!(message, "no such endpoint", "{concrete} is not routed");
                assert!(
                    (status == 404 && concrete.contains("no-such-task")) || status == 408,
                    "GET {concrete}: {status} {message}"
                );
            }
            Err(NodetoolError::NotImplemented(_)) => {
                assert!(
                    concrete.contains("timeout") || concrete == "/system/logger",
                    "{concrete} answered 501"
                )
            }
            Err(e) => panic!("GET {concrete}: {e}"),
        }
    }
    for (method, path, status, needle) in [
        ("get", "/nope", 404, "no such endpoint"),
        (
            "post",
            "/storage_service/keyspace_flush/nope",
            404,
            "unknown keyspace nope",
        ),
        (
            "post",
            "/storage_service/keyspace_flush/ks?cf=nope",
            404,
            "unknown table ks.nope",
        ),
        ("get", "/column_family/stats/ks:nope", 404, "unknown table"),
        (
            "get",
            "/column_family/histograms/nocolon",
            400,
            "expected keyspace:table",
        ),
        (
            "post",
            "/storage_service/snapshots?tag=a%2Fb",
            400,
            "invalid snapshot tag",
        ),
        (
            "post",
            "/storage_service/snapshots?kn=ks,ks2&cf=t",
            400,
            "exactly one keyspace",
        ),
        (
            "get",
            "/storage_service/natural_endpoints/ks?cf=t",
            400,
            "missing key",
        ),
        (
            "get",
            "/storage_service/keyspaces?type=weird",
            400,
            "unknown keyspace type",
        ),
        (
            "post",
            "/storage_service/keyspace_cleanup/nope",
            404,
            "unknown keyspace nope",
        ),
        (
            "post",
            "/storage_service/keyspace_scrub/ks?cf=nope",
            404,
            "unknown table ks.nope",
        ),
        (
            "post",
            "/storage_service/keyspace_garbagecollect/ks?granularity=ALL",
            400,
            "granularity must be ROW or CELL",
        ),
        (
            "post",
            "/storage_service/sstables/ks",
            400,
            "refresh needs the table",
        ),
        (
            "get",
            "/column_family/toppartitions/ks:t",
            400,
            "duration (ms) is required",
        ),
        (
            "get",
            "/column_family/toppartitions/ks:t?duration=10&list_size=50&capacity=10",
            400,
            "capacity must be between",
        ),
        // Limits: one past each is refused.
        (
            "get",
            "/column_family/toppartitions/ks:t?duration=300001",
            400,
            "duration must be 1..=300000",
        ),
        (
            "get",
            "/column_family/toppartitions/ks:t?duration=10&list_size=10&capacity=1025",
            400,
            "capacity must be between",
        ),
        (
            "get",
            "/column_family/toppartitions/ks:t?duration=10&list_size=1001&capacity=1024",
            400,
            "list_size must be 1..=1000",
        ),
        // Parameters of the wrong type: axum's own rejection, in the JSON error shape.
        (
            "post",
            "/storage_service/keyspace_scrub/ks?skip_corrupted=maybe",
            400,
            "skip_corrupted",
        ),
        (
            "get",
            "/column_family/toppartitions/ks:t?duration=soon",
            400,
            "duration",
        ),
        (
            "get",
            "/task_manager/wait_task/x?timeout=-1",
            400,
            "timeout",
        ),
    ] {
        let r = if method == "get" {
            c.get(path)
        } else {
            c.post(path)
        };
        match r {
            Err(NodetoolError::Server { status: s, message }) => {
                assert_eq!(s, status, "{method} {path}: {message}");
                assert!(message.contains(needle), "{method} {path}: {message}");
            }
            other => panic!("{method} {path}: expected {status}, got {other:?}"),
        }
    }
}

#[test]
fn background_compaction_is_a_task_with_progress() {
    let node = TestNode::start(2).expect("start node");
    write_rows(&node, 0, 50);
    let (code, _, err) = node.nodetool(&["flush"]).expect("run");
    assert_eq!(code, 0, "{err}");
    write_rows(&node, 50, 100);
    let (code, out, err) = node
        .nodetool(&["compact", "--background", "ks", "t"])
        .expect("run");
    assert_eq!(code, 0, "{err}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("Started major compaction task "))
        .unwrap_or_else(|| panic!("no task id in: {out}"))
        .trim()
        .to_string();
    let c = Client::new("127.0.0.1", node.api.port());
    let t = c
        .get(&format!("/task_manager/wait_task/{id}?timeout=30"))
        .expect("wait");
    assert_eq!(t["state"], "done", "{t}");
    assert_eq!(t["keyspace"], "ks");
    assert!(t["progress_total"].as_u64().unwrap_or(0) > 0, "{t}");
    assert_eq!(t["progress_completed"], t["progress_total"], "{t}");
    let listed = c
        .get("/task_manager/list_module_tasks/compaction")
        .expect("list");
    assert!(
        listed
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["id"] == id.as_str()))
    );
    // Nothing is running any more.
    let running = c.get("/compaction_manager/compactions").expect("running");
    assert_eq!(running.as_array().map(Vec::len), Some(0));
}
