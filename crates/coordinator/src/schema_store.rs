//! The schema's durable home: the node's system keyspace, `system_schema.objects`, kept by
//! the storage engine like any table (commitlog in `batch` mode, memtable, SSTables).
//!
//! One row per schema object: `PRIMARY KEY ((keyspace_name), kind, name)` with `kind` one
//! of `keyspace` (name empty: replication and durable_writes), `table`, `type`, `index`,
//! `view`, and `definition` the object's JSON. DDL writes only the objects it changed
//! (a live row each, a row tombstone for a dropped object, a partition tombstone for a
//! dropped keyspace), one mutation per keyspace, timestamped like any write: schema is
//! data, so merging two nodes' schema in milestone 2 is merging these mutations.
//!
//! Data tables cannot be registered with the shards' storage before the schema is known,
//! so the store is a storage engine instance of its own in `<data_dir>/system/`, opened
//! (and its commitlog replayed) first, on a thread of its own that serves the rare DDL
//! writes. The schema version is a digest of the stored rows (as Cassandra's is of its
//! schema tables): equal schemas have equal versions, on every node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use amphora_storage::{PartitionRange, ReadCommand, ShardStorage, StorageConfig, SyncMode};
use amphora_types::CqlType;
use amphora_types::data::{
    Cell, Clustering, ColumnData, DeletionTime, LivenessInfo, Mutation, PartitionKey,
    PartitionUpdate, Row,
};
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnId, ColumnKind, TableId, TableOptions, TableSchema,
};
use bytes::Bytes;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::schema::{KeyspaceDef, Schema};

/// The store table's id (fixed: it exists on every node without DDL).
pub const TABLE_ID: TableId = TableId(0x0000_0000_0000_0000_0000_6f62_6a65_6374);

/// The file the schema lived in before it moved into the system keyspace; imported once.
const LEGACY_FILE: &str = "schema.json";

/// `definition`'s column id (after `keyspace_name`, `kind` and `name`).
const DEFINITION: ColumnId = 3;

#[derive(Debug, thiserror::Error)]
pub enum SchemaStoreError {
    #[error("schema store in {dir}: {message}")]
    Storage { dir: String, message: String },
    #[error("schema object {keyspace}.{kind} {name:?} cannot be read: {message}")]
    Corrupt {
        keyspace: String,
        kind: String,
        name: String,
        message: String,
    },
    #[error("cannot encode the schema: {0}")]
    Encode(String),
    #[error("legacy schema file {path}: {message}")]
    Legacy { path: String, message: String },
    #[error("the schema store has stopped")]
    Stopped,
}

/// `system_schema.objects`.
pub fn table() -> Arc<TableSchema> {
    static TABLE: OnceLock<Arc<TableSchema>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let col = |name: &str, kind: ColumnKind, position: u16| ColumnDef {
                name: name.into(),
                ty: CqlType::Text,
                kind,
                position,
                order: ClusteringOrder::Asc,
            };
            let columns = vec![
                col("keyspace_name", ColumnKind::PartitionKey, 0),
                col("kind", ColumnKind::Clustering, 0),
                col("name", ColumnKind::Clustering, 1),
                col("definition", ColumnKind::Regular, 0),
            ];
            Arc::new(TableSchema::new(
                TABLE_ID,
                "system_schema",
                "objects",
                columns,
                TableOptions::default(),
            ))
        })
        .clone()
}

/// A keyspace's own row: what is left of [`KeyspaceDef`] without its objects.
#[derive(Serialize, Deserialize)]
struct KeyspaceRow {
    replication: BTreeMap<String, String>,
    durable_writes: bool,
}

/// `(keyspace, kind, name)` → definition JSON: a schema as the rows that store it.
type Entries = BTreeMap<(String, &'static str, String), String>;

const KINDS: [&str; 5] = ["keyspace", "table", "type", "index", "view"];

fn json<T: Serialize>(v: &T) -> Result<String, SchemaStoreError> {
    serde_json::to_string(v).map_err(|e| SchemaStoreError::Encode(e.to_string()))
}

fn entries(s: &Schema) -> Result<Entries, SchemaStoreError> {
    let mut out = Entries::new();
    for (ks, k) in &s.keyspaces {
        let mut put = |kind: &'static str, name: &str, def: String| {
            out.insert((ks.clone(), kind, name.to_string()), def);
        };
        let row = KeyspaceRow {
            replication: k.replication.clone(),
            durable_writes: k.durable_writes,
        };
        put("keyspace", "", json(&row)?);
        for (n, t) in &k.tables {
            put("table", n, json(t)?);
        }
        for (n, t) in &k.types {
            put("type", n, json(t)?);
        }
        for (n, i) in &k.indexes {
            put("index", n, json(i)?);
        }
        for (n, v) in &k.views {
            put("view", n, json(v)?);
        }
    }
    Ok(out)
}

/// A schema's version, as [`SchemaStore::save`] returns it (tests).
#[cfg(test)]
fn version(s: &Schema) -> Result<[u8; 16], SchemaStoreError> {
    Ok(digest(&entries(s)?))
}

/// The schema version: a name-based (v3) UUID of the MD5 of every stored row, so two
/// nodes with the same schema agree on it and any change changes it.
fn digest(rows: &Entries) -> [u8; 16] {
    let mut h = Md5::new();
    for ((ks, kind, name), def) in rows {
        for part in [
            ks.as_bytes(),
            kind.as_bytes(),
            name.as_bytes(),
            def.as_bytes(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
    }
    let mut v: [u8; 16] = h.finalize().into();
    v[6] = (v[6] & 0x0f) | 0x30;
    v[8] = (v[8] & 0x3f) | 0x80;
    v
}

/// Rebuilds a schema from its rows.
fn from_entries(rows: Entries) -> Result<Schema, SchemaStoreError> {
    let mut s = Schema {
        version: digest(&rows),
        keyspaces: BTreeMap::new(),
    };
    for ((ks, kind, name), def) in rows {
        let corrupt = |message: String| SchemaStoreError::Corrupt {
            keyspace: ks.clone(),
            kind: kind.to_string(),
            name: name.clone(),
            message,
        };
        fn parse<T: serde::de::DeserializeOwned>(def: &str) -> Result<T, String> {
            serde_json::from_str(def).map_err(|e| e.to_string())
        }
        // Rows sort by kind, and "keyspace" is not first ("index" is): a keyspace's
        // objects may come before its own row (checked at the end).
        let k = s
            .keyspaces
            .entry(ks.clone())
            .or_insert_with(|| KeyspaceDef::empty(ks.clone(), BTreeMap::new(), true));
        match kind {
            "keyspace" => {
                let row: KeyspaceRow = parse(&def).map_err(corrupt)?;
                k.replication = row.replication;
                k.durable_writes = row.durable_writes;
            }
            "table" => {
                k.tables.insert(name.clone(), parse(&def).map_err(corrupt)?);
            }
            "type" => {
                k.types.insert(name.clone(), parse(&def).map_err(corrupt)?);
            }
            "index" => {
                k.indexes
                    .insert(name.clone(), parse(&def).map_err(corrupt)?);
            }
            "view" => {
                k.views.insert(name.clone(), parse(&def).map_err(corrupt)?);
            }
            other => return Err(corrupt(format!("unknown kind {other:?}"))),
        }
    }
    if let Some(k) = s.keyspaces.values().find(|k| k.replication.is_empty()) {
        return Err(SchemaStoreError::Corrupt {
            keyspace: k.name.clone(),
            kind: "keyspace".into(),
            name: String::new(),
            message: "objects without their keyspace row".into(),
        });
    }
    Ok(s)
}

fn text(b: &str) -> Bytes {
    Bytes::copy_from_slice(b.as_bytes())
}

/// The mutations that turn the stored `old` schema into `new`, at timestamp `ts`: one per
/// keyspace that changed.
fn diff(old: &Entries, new: &Entries, ts: i64, now_s: i32) -> Vec<Mutation> {
    let mut by_ks: BTreeMap<&str, PartitionUpdate> = BTreeMap::new();
    let dropped_ks: Vec<&str> = old
        .keys()
        .filter(|(ks, kind, _)| {
            *kind == "keyspace" && !new.contains_key(&(ks.clone(), *kind, String::new()))
        })
        .map(|(ks, _, _)| ks.as_str())
        .collect();
    for ks in &dropped_ks {
        by_ks.entry(ks).or_default().partition_deletion = Some(DeletionTime::new(ts, now_s));
    }
    let row_key = |kind: &str, name: &str| Clustering(vec![text(kind), text(name)]);
    for (key @ (ks, kind, name), def) in new {
        if old.get(key) == Some(def) {
            continue;
        }
        let mut row = Row::new(row_key(kind, name));
        row.marker = Some(LivenessInfo {
            timestamp: ts,
            ttl: 0,
            local_expiry: 0,
        });
        row.cells = vec![(DEFINITION, ColumnData::Simple(Cell::live(ts, text(def))))];
        by_ks.entry(ks).or_default().rows.push(row);
    }
    for (ks, kind, name) in old.keys() {
        if dropped_ks.contains(&ks.as_str()) || new.contains_key(&(ks.clone(), *kind, name.clone()))
        {
            continue;
        }
        let mut row = Row::new(row_key(kind, name));
        row.deletion = Some(DeletionTime::new(ts, now_s));
        by_ks.entry(ks).or_default().rows.push(row);
    }
    by_ks
        .into_iter()
        .map(|(ks, mut update)| {
            // Rows in clustering order (kind, then name), as a partition update holds them.
            update
                .rows
                .sort_by(|a, b| a.clustering.0.cmp(&b.clustering.0));
            Mutation {
                table: TABLE_ID,
                key: PartitionKey::new(text(ks)),
                update,
            }
        })
        .collect()
}

enum Command {
    Save {
        mutations: Vec<Mutation>,
        reply: oneshot::Sender<Result<(), SchemaStoreError>>,
    },
    Close {
        reply: oneshot::Sender<Result<(), SchemaStoreError>>,
    },
}

/// The running store: a handle to its thread.
pub struct SchemaStore {
    dir: PathBuf,
    tx: mpsc::UnboundedSender<Command>,
    /// The rows as last written (DDL is serialized, so this is what is stored).
    stored: Mutex<Entries>,
    /// The last timestamp written: each DDL's is later, even if the clock steps back.
    last_ts: Mutex<i64>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for SchemaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaStore")
            .field("dir", &self.dir)
            .finish()
    }
}

type Opened = Result<(Entries, i64), SchemaStoreError>;

impl SchemaStore {
    /// Opens the store under `data_dir/system` (replaying its commitlog) and reads the
    /// schema; a `schema.json` left by an older version is imported once (and renamed
    /// `schema.json.imported`). Blocks its caller while the store replays.
    pub async fn open(data_dir: &Path) -> Result<(SchemaStore, Schema), SchemaStoreError> {
        let dir = data_dir.join("system");
        let (tx, rx) = mpsc::unbounded_channel();
        let (opened_tx, opened_rx) = std::sync::mpsc::channel::<Opened>();
        let thread_dir = dir.clone();
        let thread = std::thread::Builder::new()
            .name("schema-store".into())
            .spawn(move || serve(thread_dir, rx, opened_tx))
            .map_err(|e| SchemaStoreError::Storage {
                dir: dir.display().to_string(),
                message: format!("cannot start its thread: {e}"),
            })?;
        let (rows, last_ts) = opened_rx.recv().map_err(|_| SchemaStoreError::Stopped)??;
        let schema = from_entries(rows.clone())?;
        let store = SchemaStore {
            dir,
            tx,
            stored: Mutex::new(rows),
            last_ts: Mutex::new(last_ts),
            thread: Mutex::new(Some(thread)),
        };
        if schema.keyspaces.is_empty() {
            let legacy = data_dir.join(LEGACY_FILE);
            if let Some(mut old) = read_legacy(&legacy)? {
                old.version = store.save(&old).await?;
                let done = legacy.with_extension("json.imported");
                std::fs::rename(&legacy, &done).map_err(|e| SchemaStoreError::Legacy {
                    path: legacy.display().to_string(),
                    message: e.to_string(),
                })?;
                tracing::info!(from = %legacy.display(), "schema imported into system_schema.objects");
                return Ok((store, old));
            }
        }
        Ok((store, schema))
    }

    /// Durably records `new` (written only as the objects that differ from what is
    /// stored); returns its version once the rows are synced to the store's commitlog.
    pub async fn save(&self, new: &Schema) -> Result<[u8; 16], SchemaStoreError> {
        let next = entries(new)?;
        let version = digest(&next);
        let mutations = {
            let stored = self.stored.lock().map_err(|_| SchemaStoreError::Stopped)?;
            let mut last = self.last_ts.lock().map_err(|_| SchemaStoreError::Stopped)?;
            let ts = crate::exec::now_micros().max(*last + 1);
            *last = ts;
            let now_s = (ts / 1_000_000) as i32;
            diff(&stored, &next, ts, now_s)
        };
        if mutations.is_empty() {
            return Ok(version);
        }
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Save { mutations, reply })
            .map_err(|_| SchemaStoreError::Stopped)?;
        answer.await.map_err(|_| SchemaStoreError::Stopped)??;
        *self.stored.lock().map_err(|_| SchemaStoreError::Stopped)? = next;
        Ok(version)
    }

    /// Flushes the store and stops its thread.
    pub async fn close(&self) -> Result<(), SchemaStoreError> {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Command::Close { reply }).is_err() {
            return Ok(());
        }
        let r = answer.await.map_err(|_| SchemaStoreError::Stopped)?;
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        r
    }
}

fn read_legacy(path: &Path) -> Result<Option<Schema>, SchemaStoreError> {
    let legacy = |message: String| SchemaStoreError::Legacy {
        path: path.display().to_string(),
        message,
    };
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| legacy(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(legacy(e.to_string())),
    }
}

/// The store's thread: opens the storage, reports the rows, then applies saves.
fn serve(
    dir: PathBuf,
    mut rx: mpsc::UnboundedReceiver<Command>,
    opened: std::sync::mpsc::Sender<Opened>,
) {
    let fail = |message: String| SchemaStoreError::Storage {
        dir: dir.display().to_string(),
        message,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = opened.send(Err(fail(e.to_string())));
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let mut cfg = StorageConfig::new(&dir, 0);
        // Every DDL is acknowledged only once synced.
        cfg.commitlog_sync = SyncMode::Batch { window_ms: 0 };
        cfg.commitlog_segment_size_bytes = 1 << 20;
        cfg.commitlog_total_space_bytes = 8 << 20;
        cfg.memtable_budget_bytes = 16 << 20;
        cfg.block_cache_bytes = Some(0);
        cfg.row_cache_bytes = Some(0);
        let storage = match ShardStorage::open(cfg, vec![table()]) {
            Ok((s, report)) => {
                tracing::debug!(?report, "schema store opened");
                s
            }
            Err(e) => {
                let _ = opened.send(Err(fail(e.to_string())));
                return;
            }
        };
        tokio::task::spawn_local(storage.run_background());
        let _ = opened.send(read_all(&storage).map_err(fail));
        while let Some(cmd) = rx.recv().await {
            match cmd {
                Command::Save { mutations, reply } => {
                    let _ = reply.send(apply_all(&storage, mutations).await.map_err(fail));
                }
                Command::Close { reply } => {
                    let r = storage.shutdown().await.map_err(|e| fail(e.to_string()));
                    let _ = reply.send(r);
                    return;
                }
            }
        }
        // Every handle dropped without a close: the commitlog has every save.
    });
}

async fn apply_all(storage: &ShardStorage, mutations: Vec<Mutation>) -> Result<(), String> {
    for m in &mutations {
        storage.admit().await.map_err(|e| e.to_string())?;
        let ack = storage.apply(m).map_err(|e| e.to_string())?;
        ack.await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Every stored row, and the latest timestamp among them.
fn read_all(storage: &ShardStorage) -> Result<(Entries, i64), String> {
    let now_s = (crate::exec::now_micros() / 1_000_000) as i32;
    let cmd = ReadCommand::new(TABLE_ID, PartitionRange::all(), now_s);
    let res = storage.read(&cmd).map_err(|e| e.to_string())?;
    let mut out = Entries::new();
    let mut last_ts = i64::MIN;
    let utf8 = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|e| e.to_string());
    for p in res.partitions {
        let ks = utf8(&p.key.key)?;
        for row in &p.rows {
            let [kind, name] = &row.clustering.0[..] else {
                return Err(format!("a row of keyspace {ks} has a bad clustering"));
            };
            let kind = utf8(kind)?;
            let Some(kind) = KINDS.iter().copied().find(|k| *k == kind) else {
                return Err(format!(
                    "keyspace {ks} has an object of unknown kind {kind:?}"
                ));
            };
            let def = row.cells.iter().find_map(|(c, d)| match d {
                ColumnData::Simple(x) if *c == DEFINITION => Some(x),
                _ => None,
            });
            let Some(def) = def else { continue };
            last_ts = last_ts.max(def.timestamp);
            out.insert((ks.clone(), kind, utf8(name)?), utf8(&def.value)?);
        }
    }
    Ok((out, last_ts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_with(keyspaces: &[&str]) -> Schema {
        let mut s = Schema::default();
        for k in keyspaces {
            let mut r = BTreeMap::new();
            r.insert(
                "class".to_string(),
                "org.apache.cassandra.locator.SimpleStrategy".to_string(),
            );
            r.insert("replication_factor".to_string(), "1".to_string());
            s.keyspaces
                .insert(k.to_string(), KeyspaceDef::empty(k.to_string(), r, true));
        }
        s
    }

    #[test]
    fn rows_round_trip_and_the_version_is_a_digest() {
        let s = schema_with(&["a", "b"]);
        let back = from_entries(entries(&s).expect("entries")).expect("back");
        assert_eq!(back.keyspaces, s.keyspaces);
        assert_eq!(back.version, version(&s).expect("v"));
        assert_ne!(version(&schema_with(&["a"])).expect("v"), back.version);
        assert_eq!(back.version[6] >> 4, 3, "a version 3 uuid");
    }

    #[test]
    fn diff_writes_only_changes_and_deletes_dropped_objects() {
        let a = entries(&schema_with(&["a", "b"])).expect("a");
        let b = entries(&schema_with(&["b", "c"])).expect("b");
        let ms = diff(&a, &b, 7, 0);
        let keys: Vec<&[u8]> = ms.iter().map(|m| &m.key.key[..]).collect();
        assert_eq!(keys, vec![&b"a"[..], &b"c"[..]], "b is unchanged");
        assert!(
            ms[0].update.partition_deletion.is_some(),
            "a is dropped whole"
        );
        assert!(ms[0].update.rows.is_empty());
        assert_eq!(ms[1].update.rows.len(), 1, "c's keyspace row");
        assert!(diff(&a, &a, 8, 0).is_empty());
    }

    #[test]
    fn objects_without_their_keyspace_row_are_refused() {
        let mut rows = entries(&schema_with(&["a"])).expect("a");
        rows.remove(&("a".to_string(), "keyspace", String::new()));
        rows.insert(("a".into(), "type", "t".into()), "{}".into());
        assert!(from_entries(rows).is_err());
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// The store keeps the schema across a close and across a crash (no close: the
    /// commitlog, synced before each save returns, is replayed), and a `schema.json`
    /// from before the store is imported once.
    #[test]
    fn store_reopens_after_close_and_crash_and_imports_the_legacy_file() {
        let d = tempfile::tempdir().expect("tmp");
        let legacy = schema_with(&["a", "b"]);
        std::fs::write(
            d.path().join("schema.json"),
            serde_json::to_vec(&legacy).expect("json"),
        )
        .expect("write");
        let (store, s) = block_on(SchemaStore::open(d.path())).expect("open");
        assert_eq!(s.keyspaces, legacy.keyspaces);
        assert_eq!(s.version, version(&legacy).expect("v"));
        assert!(!d.path().join("schema.json").exists());
        assert!(d.path().join("schema.json.imported").exists());
        let next = schema_with(&["b", "c"]);
        block_on(store.save(&next)).expect("save");
        block_on(store.close()).expect("close");

        let (store, s) = block_on(SchemaStore::open(d.path())).expect("reopen");
        assert_eq!(s.keyspaces, next.keyspaces, "b and c after a close");
        // A third change, then the handle goes without a close (the thread ends when its
        // channel closes; nothing is flushed).
        let last = schema_with(&["a", "c"]);
        block_on(store.save(&last)).expect("save");
        let SchemaStore { tx, thread, .. } = store;
        drop(tx);
        if let Some(t) = thread.into_inner().expect("lock") {
            t.join().expect("thread");
        }
        let (store, s) = block_on(SchemaStore::open(d.path())).expect("reopen");
        assert_eq!(s.keyspaces, last.keyspaces, "a and c after a crash");
        assert_eq!(s.version, version(&last).expect("v"));
        block_on(store.close()).expect("close");
    }
}
