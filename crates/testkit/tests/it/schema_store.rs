//! The schema lives in the node's system keyspace (`system_schema.objects`, a storage
//! table of its own under `<data_dir>/system/`): every acknowledged DDL survives a SIGKILL,
//! dropped and recreated objects come back as last defined, and the schema version (a
//! digest of the schema) is the same after a restart.

use amphora_testkit::TestNode;
use scylla::client::session::Session;

use crate::{rt, session, temp_dir};

async fn texts(s: &Session, q: &str) -> Vec<String> {
    s.query_unpaged(q, &[])
        .await
        .expect(q)
        .into_rows_result()
        .expect("rows")
        .rows::<(String,)>()
        .expect("typed")
        .map(|r| r.expect("row").0)
        .collect()
}

async fn schema_version(s: &Session) -> uuid::Uuid {
    s.query_unpaged("SELECT schema_version FROM system.local", &[])
        .await
        .expect("local")
        .into_rows_result()
        .expect("rows")
        .single_row::<(uuid::Uuid,)>()
        .expect("one row")
        .0
}

/// What a restart must give back: the keyspace's DESCRIBE output and the schema version.
async fn snapshot(s: &Session) -> (Vec<String>, uuid::Uuid) {
    let mut describe = Vec::new();
    for ks in ["ss", "again"] {
        let r = s
            .query_unpaged(format!("DESCRIBE KEYSPACE {ks}"), &[])
            .await
            .expect("describe")
            .into_rows_result()
            .expect("rows");
        for row in r.rows::<(String, String, String, String)>().expect("typed") {
            describe.push(row.expect("row").3);
        }
    }
    (describe, schema_version(s).await)
}

#[test]
fn every_acknowledged_ddl_survives_a_kill() {
    let dir = temp_dir("schema");
    let mut node = TestNode::start_in(&dir, 2, &[]).expect("start node");
    let before = rt().block_on(async {
        let s = session(&node).await;
        for q in [
            "CREATE KEYSPACE ss WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TYPE ss.addr (street text, no int)",
            "CREATE TABLE ss.t (k int PRIMARY KEY, v text, a frozen<addr>)",
            "CREATE INDEX t_v ON ss.t (v)",
            "CREATE TABLE ss.gone (k int PRIMARY KEY, old int)",
            "DROP TABLE ss.gone",
            "CREATE TABLE ss.gone (k text PRIMARY KEY, w int) WITH comment = 'second'",
            "ALTER TABLE ss.t ADD x int",
            "ALTER TABLE ss.t WITH gc_grace_seconds = 3600",
            "CREATE KEYSPACE again WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TABLE again.t (k int PRIMARY KEY)",
            "DROP KEYSPACE again",
            "CREATE KEYSPACE again WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 2}",
            "CREATE KEYSPACE never WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "DROP KEYSPACE never",
            "INSERT INTO ss.t (k, v, x) VALUES (1, 'one', 10)",
        ] {
            s.query_unpaged(q, &[]).await.expect(q);
        }
        snapshot(&s).await
    });
    assert!(
        before.0.iter().any(|d| d.contains("comment = 'second'")),
        "{:?}",
        before.0
    );
    node.kill().expect("SIGKILL");
    assert!(dir.join("data/system").is_dir(), "the store's directory");
    assert!(
        !dir.join("data/schema.json").exists(),
        "no schema file any more"
    );

    let mut node = TestNode::start_in(&dir, 2, &[]).expect("restart after the kill");
    rt().block_on(async {
        let s = session(&node).await;
        assert_eq!(snapshot(&s).await, before, "the schema as it was acknowledged");
        let keyspaces = texts(&s, "SELECT keyspace_name FROM system_schema.keyspaces").await;
        assert!(keyspaces.contains(&"again".to_string()), "{keyspaces:?}");
        assert!(!keyspaces.contains(&"never".to_string()), "{keyspaces:?}");
        let cols = texts(
            &s,
            "SELECT column_name FROM system_schema.columns WHERE keyspace_name = 'ss' AND table_name = 'gone'",
        )
        .await;
        assert_eq!(cols, vec!["k", "w"], "the recreated table's columns");
        assert!(texts(&s, "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'again'")
            .await
            .is_empty());
        // The tables work: the added column and the index.
        s.query_unpaged("INSERT INTO ss.t (k, v, x) VALUES (2, 'two', 20)", &[])
            .await
            .expect("insert");
        let by_index = texts(&s, "SELECT v FROM ss.t WHERE v = 'two'").await;
        assert_eq!(by_index, vec!["two"]);
        // DDL after the restart is saved too (on top of the replayed store).
        s.query_unpaged("DROP TABLE ss.gone", &[]).await.expect("drop");
    });
    node.stop().expect("clean stop");
    let mut node = TestNode::start_in(&dir, 2, &[]).expect("restart after a clean stop");
    rt().block_on(async {
        let s = session(&node).await;
        let tables = texts(
            &s,
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'ss'",
        )
        .await;
        assert_eq!(tables, vec!["t"]);
    });
    node.stop().expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}
