//! Prepared statement ids (Cassandra's MD5 of keyspace + query, stable across restarts)
//! and lightweight transactions under contention, through the Rust driver.

use amphora_testkit::TestNode;
use scylla::value::{CqlValue, Row};

use crate::{rt, session, temp_dir};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The ids a driver gets are MD5(query) without a keyspace and MD5(keyspace ‖ query) after
/// USE (the test vectors were computed with Python's hashlib), and a restarted node hands
/// out the same ids, so drivers' cached statements stay valid.
#[test]
fn prepared_ids_are_md5_of_keyspace_and_query_and_survive_restarts() {
    const UNQUALIFIED_ID: &str = "8e0a42ddcd9841a032c772755c567a7b"; // md5("pidSELECT v FROM t WHERE k = ?")
    const QUALIFIED_ID: &str = "32a9eb09d63da942a49b0c313ec8c5a9"; // md5("SELECT v FROM pid.t WHERE k = ?")
    let dir = temp_dir("prepared-id");
    let mut node = TestNode::start_in(&dir, 2, &[]).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        for q in [
            "CREATE KEYSPACE pid WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TABLE pid.t (k int PRIMARY KEY, v int)",
            "INSERT INTO pid.t (k, v) VALUES (1, 10)",
        ] {
            s.query_unpaged(q, &[]).await.expect(q);
        }
        let p = s
            .prepare("SELECT v FROM pid.t WHERE k = ?")
            .await
            .expect("prepare");
        assert_eq!(hex(p.get_id()), QUALIFIED_ID);
        s.use_keyspace("pid", false).await.expect("use");
        let p = s
            .prepare("SELECT v FROM t WHERE k = ?")
            .await
            .expect("prepare");
        assert_eq!(hex(p.get_id()), UNQUALIFIED_ID);
    });
    node.stop().expect("stop");
    let mut node = TestNode::start_in(&dir, 2, &[]).expect("restart");
    rt().block_on(async {
        let s = session(&node).await;
        let p = s
            .prepare("SELECT v FROM pid.t WHERE k = ?")
            .await
            .expect("prepare after restart");
        assert_eq!(hex(p.get_id()), QUALIFIED_ID);
        let (v,) = s
            .execute_unpaged(&p, (1i32,))
            .await
            .expect("execute")
            .into_rows_result()
            .expect("rows")
            .single_row::<(i32,)>()
            .expect("row");
        assert_eq!(v, 10);
    });
    node.stop().expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Eight clients increment one value by compare-and-set (`UPDATE .. IF v = ?`) at the same
/// time: every applied CAS is one increment, so the final value equals the number of
/// applied CASes; a lost or doubled update (a check and write that are not atomic) would
/// break the equality.
#[test]
fn concurrent_compare_and_set_loses_no_update() {
    let node = TestNode::start(2).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        for q in [
            "CREATE KEYSPACE lwtc WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TABLE lwtc.t (k int PRIMARY KEY, v int)",
            "INSERT INTO lwtc.t (k, v) VALUES (1, 0)",
        ] {
            s.query_unpaged(q, &[]).await.expect(q);
        }
        let cas = s
            .prepare("UPDATE lwtc.t SET v = ? WHERE k = 1 IF v = ?")
            .await
            .expect("prepare");
        let s = std::sync::Arc::new(s);
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (s, cas) = (s.clone(), cas.clone());
            clients.spawn(async move {
                let (mut guess, mut applied) = (0i32, 0i32);
                for _ in 0..40 {
                    let rows = s
                        .execute_unpaged(&cas, (guess + 1, guess))
                        .await
                        .expect("cas")
                        .into_rows_result()
                        .expect("rows");
                    let row: Row = rows.first_row::<Row>().expect("one row");
                    match row.columns.as_slice() {
                        [Some(CqlValue::Boolean(true))] => {
                            applied += 1;
                            guess += 1;
                        }
                        [Some(CqlValue::Boolean(false)), Some(CqlValue::Int(now))] => guess = *now,
                        other => panic!("unexpected LWT result {other:?}"),
                    }
                }
                applied
            });
        }
        let mut applied = 0;
        while let Some(r) = clients.join_next().await {
            applied += r.expect("client");
        }
        assert!(applied > 0);
        let (v,) = s
            .query_unpaged("SELECT v FROM lwtc.t WHERE k = 1", &[])
            .await
            .expect("select")
            .into_rows_result()
            .expect("rows")
            .single_row::<(i32,)>()
            .expect("row");
        assert_eq!(v, applied, "final value vs applied compare-and-sets");
    });
}
