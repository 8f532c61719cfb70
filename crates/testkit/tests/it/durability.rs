//! The periodic commitlog mode's promise (DESIGN.md §5): a write is acknowledged only once
//! its commitlog entry is handed to the OS, so a SIGKILL loses no acknowledged write, with
//! many writes in flight (64 concurrent writers through the driver). A commitlog that acks
//! entries it has not written out loses tens of thousands of them here.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use amphora_testkit::TestNode;

use crate::{rt, session, temp_dir};

#[test]
fn periodic_mode_loses_no_acknowledged_write_on_sigkill() {
    let dir = temp_dir("durability");
    let mut node =
        TestNode::start_in(&dir, 2, &["--commitlog-sync", "periodic"]).expect("start node");
    let acked: Vec<i32> = rt().block_on(async {
        let s = Arc::new(session(&node).await);
        for q in [
            "CREATE KEYSPACE dur WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TABLE dur.t (k int PRIMARY KEY, v text)",
        ] {
            s.query_unpaged(q, &[]).await.expect(q);
        }
        let insert = Arc::new(
            s.prepare("INSERT INTO dur.t (k, v) VALUES (?, ?)")
                .await
                .expect("prepare"),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..64i32 {
            let (s, insert, stop) = (s.clone(), insert.clone(), stop.clone());
            writers.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut k = w;
                while !stop.load(Ordering::Relaxed) {
                    match s.execute_unpaged(&insert, (k, format!("value {k}"))).await {
                        Ok(_) => acked.push(k),
                        Err(_) => break,
                    }
                    k += 64;
                }
                acked
            }));
        }
        // Let writes flow, then kill the server under them.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        node.kill().expect("SIGKILL");
        stop.store(true, Ordering::Relaxed);
        let mut acked = Vec::new();
        for w in writers {
            acked.extend(w.await.expect("writer"));
        }
        acked
    });
    assert!(
        acked.len() > 1_000,
        "only {} writes were acknowledged",
        acked.len()
    );

    let mut node = TestNode::start_in(&dir, 2, &["--commitlog-sync", "periodic"]).expect("restart");
    rt().block_on(async {
        let s = session(&node).await;
        let rows = s
            .query_unpaged("SELECT k, v FROM dur.t", &[])
            .await
            .expect("select")
            .into_rows_result()
            .expect("rows");
        let mut found = std::collections::HashMap::new();
        for r in rows.rows::<(i32, String)>().expect("typed") {
            let (k, v) = r.expect("row");
            found.insert(k, v);
        }
        let lost: Vec<&i32> = acked
            .iter()
            .filter(|k| found.get(k) != Some(&format!("value {k}")))
            .collect();
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged writes lost: {:?}",
            lost.len(),
            acked.len(),
            &lost[..lost.len().min(10)]
        );
    });
    node.stop().expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}
