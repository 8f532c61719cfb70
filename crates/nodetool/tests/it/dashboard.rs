//! `dashboards/amphora.json` only queries metrics a real node exports, and the per-table
//! counters move with traffic.

use std::collections::BTreeSet;

use amphora_testkit::TestNode;
use serde_json::Value;

use crate::{rt, session, write_rows};

fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// Every `amphora_*` identifier in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("amphora_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Sum of the samples of `name` whose labels contain `labels`.
fn sum(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn every_dashboard_metric_is_exported() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dashboards/amphora.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard"))
        .expect("dashboard is JSON");
    let mut all = Vec::new();
    exprs(&dash, &mut all);
    assert!(
        all.len() > 20,
        "the dashboard has its queries: {}",
        all.len()
    );
    let names: BTreeSet<String> = all.iter().flat_map(|e| metric_names(e)).collect();

    let node = TestNode::start(2).expect("start node");
    write_rows(&node, 0, 50);
    rt().block_on(async {
        let s = session(&node).await;
        // One error so the per-code error family has a sample.
        assert!(
            s.query_unpaged("SELECT * FROM ks.missing", &[])
                .await
                .is_err()
        );
    });
    let text = node.metrics_text().expect("scrape /metrics");
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| {
            !text
                .lines()
                .any(|l| l.starts_with(&format!("{n}{{")) || l.starts_with(&format!("{n} ")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics /metrics lacks: {missing:?}"
    );

    // The per-table counters follow the traffic (50 writes, 10 reads by write_rows).
    let t = "ks=\"ks\",cf=\"t\"";
    assert_eq!(sum(&text, "amphora_column_family_writes_total", t), 50.0);
    assert_eq!(sum(&text, "amphora_column_family_reads_total", t), 10.0);
    assert_eq!(
        sum(&text, "amphora_column_family_write_latency_count", t),
        50.0
    );
    assert_eq!(sum(&text, "amphora_column_family_live_sstable", t), 0.0);
    let (code, _, err) = node.nodetool(&["flush"]).expect("nodetool");
    assert_eq!(code, 0, "{err}");
    let text = node.metrics_text().expect("scrape /metrics");
    assert_eq!(sum(&text, "amphora_column_family_live_sstable", t), 2.0);
    assert!(sum(&text, "amphora_memtables_flushes_total", "") >= 2.0);
}
