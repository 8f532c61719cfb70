//! Materialized views under concurrent writes, and the batchlog across a crash.

use amphora_testkit::TestNode;
use scylla::client::session::Session;

use crate::{rt, session, temp_dir};

async fn rows_i32x3(s: &Session, q: &str) -> Vec<(i32, i32, i32)> {
    s.query_unpaged(q, &[])
        .await
        .expect(q)
        .into_rows_result()
        .expect("rows")
        .rows::<(i32, i32, i32)>()
        .expect("typed")
        .map(|r| r.expect("row"))
        .collect()
}

/// Concurrent updates of one base row, each moving its view row to a new key, leave exactly
/// one view row, the one matching the base row (the view maintenance of a partition is
/// serialized on its owning shard).
#[test]
fn concurrent_view_key_changes_leave_one_view_row() {
    // Batch commitlog sync: every write waits for its fdatasync, so concurrent writes of
    // one partition interleave between reading the base row and applying the write.
    let dir = temp_dir("mv");
    let mut node = TestNode::start_in(&dir, 2, &["--commitlog-sync", "batch"]).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        for q in [
            "CREATE KEYSPACE mvc WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TABLE mvc.base (k int, c int, v int, PRIMARY KEY (k, c))",
            "CREATE MATERIALIZED VIEW mvc.by_v AS SELECT k, c, v FROM mvc.base \
             WHERE v IS NOT NULL AND k IS NOT NULL AND c IS NOT NULL PRIMARY KEY (v, k, c)",
            "INSERT INTO mvc.base (k, c, v) VALUES (1, 1, 0)",
        ] {
            s.query_unpaged(q, &[]).await.expect(q);
        }
        let upd = s
            .prepare("UPDATE mvc.base SET v = ? WHERE k = 1 AND c = 1")
            .await
            .expect("prepare");
        let s = std::sync::Arc::new(s);
        for round in 0..40i32 {
            let mut writes = tokio::task::JoinSet::new();
            for i in 0..8i32 {
                let (s, upd) = (s.clone(), upd.clone());
                writes.spawn(async move {
                    s.execute_unpaged(&upd, (round * 100 + i + 1,))
                        .await
                        .map(|_| ())
                });
            }
            while let Some(r) = writes.join_next().await {
                r.expect("task").expect("update");
            }
            let base = rows_i32x3(&s, "SELECT k, c, v FROM mvc.base WHERE k = 1 AND c = 1").await;
            let view = rows_i32x3(&s, "SELECT k, c, v FROM mvc.by_v").await;
            assert_eq!(base.len(), 1, "round {round}");
            assert_eq!(view, base, "round {round}: the view must hold exactly the base row");
        }
    });
    node.stop().expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}

async fn count(s: &Session, q: &str) -> i64 {
    s.query_unpaged(q, &[])
        .await
        .expect(q)
        .into_rows_result()
        .expect("rows")
        .single_row::<(i64,)>()
        .expect("one row")
        .0
}

fn server_log(node: &TestNode) -> String {
    std::fs::read_to_string(node.data_dir.join("server.log")).unwrap_or_default()
}

/// A LOGGED batch across shards survives a crash between its batchlog write and its
/// mutations (the failpoint aborts the server there): the restarted node replays it. A
/// batch that completes leaves no entry behind.
#[test]
fn logged_batch_is_replayed_after_a_crash() {
    let dir = temp_dir("batchlog");
    let batch = "BEGIN BATCH \
        INSERT INTO blc.t (k, v) VALUES (1, 10); INSERT INTO blc.t (k, v) VALUES (2, 20); \
        INSERT INTO blc.t (k, v) VALUES (3, 30); INSERT INTO blc.t (k, v) VALUES (4, 40); \
        INSERT INTO blc.t (k, v) VALUES (5, 50); INSERT INTO blc.t (k, v) VALUES (6, 60) \
        APPLY BATCH";
    let mut node = TestNode::start_in_env(
        &dir,
        2,
        &["--commitlog-sync", "batch"],
        &[("AMPHORA_FAILPOINT_BATCHLOG_ABORT", "blc")],
    )
    .expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        for q in [
            "CREATE KEYSPACE blc WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TABLE blc.t (k int PRIMARY KEY, v int)",
        ] {
            s.query_unpaged(q, &[]).await.expect(q);
        }
        // The server aborts after logging the batch: the request fails.
        assert!(s.query_unpaged(batch, &[]).await.is_err());
    });
    node.stop().expect("the aborted server is gone");

    let mut node = TestNode::start_in(&dir, 2, &["--commitlog-sync", "batch"]).expect("restart");
    assert!(
        server_log(&node).contains("batchlog: replayed 1 entries"),
        "{}",
        server_log(&node)
    );
    rt().block_on(async {
        let s = session(&node).await;
        assert_eq!(count(&s, "SELECT count(*) FROM blc.t").await, 6);
        // A batch that completes deletes its entry.
        s.query_unpaged(batch.replace("0)", "1)"), &[])
            .await
            .expect("batch");
        assert_eq!(
            count(
                &s,
                "SELECT count(*) FROM blc.t WHERE v = 11 ALLOW FILTERING"
            )
            .await,
            1
        );
    });
    node.stop().expect("stop");
    let mut node = TestNode::start_in(&dir, 2, &["--commitlog-sync", "batch"]).expect("restart");
    assert!(
        !server_log(&node).contains("batchlog: replayed"),
        "{}",
        server_log(&node)
    );
    node.stop().expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A crash after a base write to a table with views but before its view rows are written
/// (the failpoint aborts there): the restarted node redoes the view maintenance from the
/// logged base rows, so the view row moves to the new key and none stays at the old one.
#[test]
fn view_update_is_redone_after_a_crash() {
    let dir = temp_dir("batchlog-view");
    let args = ["--commitlog-sync", "batch"];
    let mut node = TestNode::start_in(&dir, 2, &args).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        for q in [
            "CREATE KEYSPACE mvk WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TABLE mvk.base (k int, c int, v int, PRIMARY KEY (k, c))",
            "CREATE MATERIALIZED VIEW mvk.by_v AS SELECT k, c, v FROM mvk.base \
             WHERE v IS NOT NULL AND k IS NOT NULL AND c IS NOT NULL PRIMARY KEY (v, k, c)",
            "INSERT INTO mvk.base (k, c, v) VALUES (1, 1, 1)",
        ] {
            s.query_unpaged(q, &[]).await.expect(q);
        }
    });
    node.stop().expect("stop");

    let mut node = TestNode::start_in_env(
        &dir,
        2,
        &args,
        &[("AMPHORA_FAILPOINT_BATCHLOG_ABORT", "mvk:view")],
    )
    .expect("start with the failpoint");
    rt().block_on(async {
        let s = session(&node).await;
        let r = s
            .query_unpaged("UPDATE mvk.base SET v = 2 WHERE k = 1 AND c = 1", &[])
            .await;
        assert!(r.is_err(), "the server aborts before answering");
    });
    node.stop().expect("the aborted server is gone");

    let mut node = TestNode::start_in(&dir, 2, &args).expect("restart");
    assert!(
        server_log(&node).contains("batchlog: replayed"),
        "{}",
        server_log(&node)
    );
    rt().block_on(async {
        let s = session(&node).await;
        let base = rows_i32x3(&s, "SELECT k, c, v FROM mvk.base").await;
        let view = rows_i32x3(&s, "SELECT k, c, v FROM mvk.by_v").await;
        assert_eq!(base, vec![(1, 1, 2)]);
        assert_eq!(view, base);
    });
    node.stop().expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}
