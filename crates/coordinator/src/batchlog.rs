//! The local batchlog (Cassandra's `system.batches`): makes a group of mutations that goes
//! to several shards all-or-nothing across a crash.
//!
//! Before a LOGGED batch spanning partitions (or a base write together with its secondary
//! index entries or materialized view updates) is applied, the whole group is written as one
//! entry of the hidden storage table `system.batches` on the coordinating shard. That write
//! goes through the shard's commitlog like any other, so it survives a crash as well as
//! the writes it protects. The mutations are then applied and the entry deleted. When the
//! node starts, [`replay`] re-applies every entry still there: mutations carry their own
//! timestamps, so applying one twice changes nothing.
//!
//! A materialized view's rows depend on the base row *before* the write, so the part of a
//! group that touches a table with views runs on the base partition's owning shard under a
//! per-partition lock ([`PartitionLocks`]): read the current rows, log them with the base
//! mutation (a view entry), apply the base mutation, read again and write the view rows,
//! then drop the entry. Replaying a view entry recomputes the view rows from the logged
//! rows, so a crash between the base and the view write leaves no stale view row.
//!
//! Single-partition writes without indexes or views, and UNLOGGED batches, never touch the
//! batchlog.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};

use amphora_storage::{PartitionRange, ReadCommand};
use amphora_types::CqlType;
use amphora_types::codec::{decode_mutation, encode_mutation};
use amphora_types::data::{
    Cell, Clustering, ColumnData, DeletionTime, Mutation, PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnId, ColumnKind, TableId, TableOptions, TableSchema,
};
use amphora_types::token::shard_of;
use bytes::{BufMut, Bytes, BytesMut};

use crate::api::QueryError;
use crate::exec::Inner;
use crate::schema::Schema;
use crate::write::Planned;

/// The batchlog table's id (fixed: it exists on every node without DDL).
pub const TABLE_ID: TableId = TableId(0x0000_0000_0000_0000_0000_0000_6261_7463);

/// The entry format version, first byte of `data`.
const VERSION: u8 = 1;

/// An entry protecting a whole group (replayed second).
const KIND_GROUP: u8 = 0;
/// An entry protecting one base partition's view maintenance (replayed first).
const KIND_VIEW: u8 = 1;

/// What a batchlog entry holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Entry {
    /// The mutations of the group, applied as they are.
    pub mutations: Vec<Mutation>,
    /// View entries only: for each base partition, the touched base rows as they were
    /// before the base mutation (a mutation of the base table holding those rows).
    pub before: Vec<Mutation>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BatchlogError {
    #[error("batchlog entry truncated: needs {expected} bytes at offset {offset}, has {received}")]
    Truncated {
        offset: usize,
        expected: usize,
        received: usize,
    },
    #[error("batchlog entry version {0} is not supported")]
    Version(u8),
    #[error("batchlog entry holds a bad mutation: {0}")]
    Mutation(String),
}

/// `system.batches`: `id blob PRIMARY KEY, kind int, data blob`, gc_grace_seconds 0 (an
/// entry is written once and deleted once; its tombstone need not outlive a compaction).
pub fn table() -> Arc<TableSchema> {
    static TABLE: OnceLock<Arc<TableSchema>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let col = |name: &str, ty: CqlType, kind: ColumnKind| ColumnDef {
                name: name.into(),
                ty,
                kind,
                position: 0,
                order: ClusteringOrder::Asc,
            };
            let columns = vec![
                col("id", CqlType::Blob, ColumnKind::PartitionKey),
                col("data", CqlType::Blob, ColumnKind::Regular),
                col("kind", CqlType::Int, ColumnKind::Regular),
            ];
            let options = TableOptions {
                gc_grace_seconds: 0,
                ..TableOptions::default()
            };
            Arc::new(TableSchema::new(
                TABLE_ID, "system", "batches", columns, options,
            ))
        })
        .clone()
}

const DATA: ColumnId = 1;
const KIND: ColumnId = 2;

fn put_chunk(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}

/// Serializes an entry: version, then the two mutation lists (u32 count, then u32 length
/// + the commitlog encoding of each mutation).
pub fn encode(e: &Entry) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(VERSION);
    for list in [&e.mutations, &e.before] {
        out.put_u32(list.len() as u32);
        for m in list {
            let mut buf = Vec::new();
            encode_mutation(m, &mut buf);
            put_chunk(&mut out, &buf);
        }
    }
    out.freeze()
}

pub fn decode(b: &Bytes) -> Result<Entry, BatchlogError> {
    let mut pos = 0usize;
    let take = |pos: &mut usize, n: usize| -> Result<Bytes, BatchlogError> {
        if b.len().saturating_sub(*pos) < n {
            return Err(BatchlogError::Truncated {
                offset: *pos,
                expected: n,
                received: b.len().saturating_sub(*pos),
            });
        }
        let s = b.slice(*pos..*pos + n);
        *pos += n;
        Ok(s)
    };
    let u32_at = |pos: &mut usize| -> Result<usize, BatchlogError> {
        let s = take(pos, 4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize)
    };
    let v = take(&mut pos, 1)?[0];
    if v != VERSION {
        return Err(BatchlogError::Version(v));
    }
    let mut lists = [Vec::new(), Vec::new()];
    for list in &mut lists {
        let n = u32_at(&mut pos)?;
        for _ in 0..n {
            let len = u32_at(&mut pos)?;
            let m = decode_mutation(take(&mut pos, len)?)
                .map_err(|e| BatchlogError::Mutation(e.to_string()))?;
            list.push(m);
        }
    }
    let [mutations, before] = lists;
    Ok(Entry { mutations, before })
}

/// A key for a new entry whose token this shard owns, so the entry is written (and later
/// replayed) where it was created.
fn local_key(inner: &Inner) -> PartitionKey {
    let info = &inner.shared.info;
    let here = amphora_rt::current_shard().unwrap_or(0);
    loop {
        let key = PartitionKey::new(Bytes::copy_from_slice(uuid::Uuid::new_v4().as_bytes()));
        if info.nr_shards <= 1 || shard_of(key.token, info.nr_shards, info.ignore_msb) == here {
            return key;
        }
    }
}

fn fail(e: impl std::fmt::Display) -> QueryError {
    QueryError::Server(format!("batchlog: {e}"))
}

/// Writes an entry on this shard (through its commitlog) and returns its key.
async fn write(inner: &Inner, kind: u8, e: &Entry) -> Result<PartitionKey, QueryError> {
    let key = local_key(inner);
    let ts = inner.new_timestamp();
    let mut row = Row::new(Clustering::empty());
    row.cells = vec![
        (DATA, ColumnData::Simple(Cell::live(ts, encode(e)))),
        (
            KIND,
            ColumnData::Simple(Cell::live(
                ts,
                Bytes::copy_from_slice(&i32::from(kind).to_be_bytes()),
            )),
        ),
    ];
    let m = Mutation {
        table: TABLE_ID,
        key: key.clone(),
        update: PartitionUpdate {
            rows: vec![row],
            ..PartitionUpdate::default()
        },
    };
    let db = amphora_replica::local().map_err(fail)?;
    db.apply(m).await.map_err(fail)?;
    if kind == KIND_GROUP
        && failpoint_armed(Failpoint::Logged, &e.mutations.iter().collect::<Vec<_>>())
    {
        failpoint_abort(Failpoint::Logged);
    }
    Ok(key)
}

/// Deletes an entry (a partition tombstone newer than its write).
async fn remove(inner: &Inner, key: PartitionKey) -> Result<(), QueryError> {
    let ts = inner.new_timestamp();
    let now_s = (crate::exec::now_micros() / 1_000_000) as i32;
    let m = Mutation {
        table: TABLE_ID,
        key,
        update: PartitionUpdate {
            partition_deletion: Some(DeletionTime::new(ts, now_s)),
            ..PartitionUpdate::default()
        },
    };
    let db = amphora_replica::local().map_err(fail)?;
    db.apply(m).await.map_err(fail)
}

/// Where a test failpoint can abort the process.
#[derive(Clone, Copy, PartialEq)]
enum Failpoint {
    /// Right after a group is logged, before any of it is applied
    /// (`AMPHORA_FAILPOINT_BATCHLOG_ABORT=<keyspace>`).
    Logged,
    /// After a base write to a table with views is applied, before its view rows are
    /// written (`AMPHORA_FAILPOINT_BATCHLOG_ABORT=<keyspace>:view`).
    ViewBaseApplied,
}

/// Whether the test failpoint `at` is armed for a write to one of `mutations`' keyspaces
/// (never, unless the environment variable is set).
fn failpoint_armed(at: Failpoint, mutations: &[&Mutation]) -> bool {
    static SPEC: OnceLock<Option<(String, Failpoint)>> = OnceLock::new();
    let spec = SPEC.get_or_init(|| {
        let v = std::env::var("AMPHORA_FAILPOINT_BATCHLOG_ABORT").ok()?;
        Some(match v.strip_suffix(":view") {
            Some(ks) => (ks.to_string(), Failpoint::ViewBaseApplied),
            None => (v, Failpoint::Logged),
        })
    });
    let Some((ks, point)) = spec else {
        return false;
    };
    let Some(c) = crate::exec::local() else {
        return false;
    };
    let schema = c.inner.schema();
    *point == at
        && mutations.iter().any(|m| {
            schema
                .table_by_id(m.table)
                .is_some_and(|t| t.keyspace == *ks)
        })
}

fn failpoint_abort(at: Failpoint) -> ! {
    let stage = match at {
        Failpoint::Logged => "after logging a batch",
        Failpoint::ViewBaseApplied => "after a base write, before its view rows",
    };
    tracing::error!("batchlog failpoint: aborting {stage}");
    std::process::abort();
}

/// Per-shard locks on base partitions, serializing materialized-view maintenance (read the
/// current rows, apply the base mutation, write the view rows) per partition. A lock exists
/// only while held or awaited.
#[derive(Default)]
pub struct PartitionLocks {
    held: RefCell<HashMap<(TableId, Bytes), PartitionLock>>,
}

type PartitionLock = Arc<tokio::sync::Mutex<()>>;

/// A held partition lock; released (and forgotten when nobody waits) on drop.
pub struct PartitionGuard {
    locks: &'static PartitionLocks,
    key: (TableId, Bytes),
    lock: PartitionLock,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for PartitionGuard {
    fn drop(&mut self) {
        self.guard.take();
        // The map and this guard are the only owners: nobody waits for it.
        if Arc::strong_count(&self.lock) == 2 {
            self.locks.held.borrow_mut().remove(&self.key);
        }
    }
}

impl PartitionLocks {
    /// This shard's lock table.
    pub fn local() -> &'static PartitionLocks {
        thread_local! {
            static LOCKS: &'static PartitionLocks = Box::leak(Box::default());
        }
        LOCKS.with(|l| *l)
    }

    pub async fn lock(&'static self, table: TableId, key: &Bytes) -> PartitionGuard {
        let k = (table, key.clone());
        let lock = self.held.borrow_mut().entry(k.clone()).or_default().clone();
        let guard = lock.clone().lock_owned().await;
        PartitionGuard {
            locks: self,
            key: k,
            lock,
            guard: Some(guard),
        }
    }

    /// How many partitions have a lock entry (held or awaited).
    pub fn len(&self) -> usize {
        self.held.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Applies a group of writes with what they imply (index entries, view rows), through the
/// batchlog when the group is not a single partition's plain write: `logged` asks for
/// atomicity across partitions (a LOGGED batch).
pub async fn apply_group(
    inner: &Rc<Inner>,
    schema: &Schema,
    mut planned: Vec<Planned>,
    logged: bool,
) -> Result<(), QueryError> {
    let refs: Vec<&Mutation> = planned
        .iter()
        .filter_map(|p| match p {
            Planned::Mutation(m) => Some(m),
            Planned::Counter(_) => None,
        })
        .collect();
    let extra = crate::index::derived_mutations(schema, &refs);
    // Base mutations of tables with views go through the owning shard's locked path.
    let (viewed, plain): (Vec<Planned>, Vec<Planned>) = planned
        .drain(..)
        .partition(|p| matches!(p, Planned::Mutation(m) if crate::view::has_views(schema, m)));
    let mut plain = plain;
    let has_index_entries = !extra.is_empty();
    plain.extend(extra.into_iter().map(Planned::Mutation));
    let info = &inner.shared.info;
    let mut shards: Vec<u32> = plain
        .iter()
        .map(|p| {
            let token = match p {
                Planned::Mutation(m) => m.key.token,
                Planned::Counter(c) => c.key.token,
            };
            shard_of(token, info.nr_shards, info.ignore_msb)
        })
        .collect();
    shards.sort_unstable();
    shards.dedup();
    // Statements of one partition may come as several mutations: count partitions.
    let mut keys: Vec<(TableId, &Bytes)> = plain
        .iter()
        .chain(&viewed)
        .filter_map(|p| match p {
            Planned::Mutation(m) => Some((m.table, &m.key.key)),
            Planned::Counter(_) => None,
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let partitions = keys.len();
    let log =
        !viewed.is_empty() || (logged && partitions > 1) || (has_index_entries && shards.len() > 1);
    let entry_key = if log {
        let all: Vec<Mutation> = plain
            .iter()
            .chain(&viewed)
            .filter_map(|p| match p {
                Planned::Mutation(m) => Some(m.clone()),
                Planned::Counter(_) => None,
            })
            .collect();
        let e = Entry {
            mutations: all,
            before: Vec::new(),
        };
        Some(write(inner, KIND_GROUP, &e).await?)
    } else {
        None
    };
    let views = async {
        for p in viewed {
            if let Planned::Mutation(m) = p {
                apply_viewed(inner, m).await?;
            }
        }
        Ok::<(), QueryError>(())
    };
    let (a, b) = futures_join(crate::write::apply_planned(inner, plain), views).await;
    a?;
    b?;
    if let Some(key) = entry_key {
        remove(inner, key).await?;
    }
    Ok(())
}

async fn futures_join<A, B>(a: A, b: B) -> (A::Output, B::Output)
where
    A: std::future::Future,
    B: std::future::Future,
{
    tokio::join!(a, b)
}

/// One base mutation of a table with views, run on its owning shard under the partition
/// lock: read the touched rows, log them with the mutation, apply it, write the view rows,
/// drop the log entry.
async fn apply_viewed(inner: &Rc<Inner>, m: Mutation) -> Result<(), QueryError> {
    let info = &inner.shared.info;
    let shard = shard_of(m.key.token, info.nr_shards, info.ignore_msb);
    crate::exec::on_shard(inner, shard, move || async move {
        let c = crate::exec::local().ok_or_else(|| fail("no coordinator on this shard"))?;
        let inner = c.inner.clone();
        let _guard = PartitionLocks::local().lock(m.table, &m.key.key).await;
        let schema = inner.schema();
        let pending = crate::view::prepare(&inner, &schema, &[&m]).await?;
        let before = pending.before();
        let key = write(
            &inner,
            KIND_VIEW,
            &Entry {
                mutations: vec![m.clone()],
                before,
            },
        )
        .await?;
        let abort = failpoint_armed(Failpoint::ViewBaseApplied, &[&m]);
        crate::write::apply_planned(&inner, vec![Planned::Mutation(m)]).await?;
        if abort {
            failpoint_abort(Failpoint::ViewBaseApplied);
        }
        crate::view::finish(&inner, &schema, pending).await?;
        remove(&inner, key).await
    })
    .await?
}

/// Logs a view entry on this shard (the caller holds the partition lock): the base
/// mutations and the rows read before them. Returns the entry's key for [`forget`].
pub(crate) async fn log_view(
    inner: &Inner,
    mutations: Vec<Mutation>,
    before: Vec<Mutation>,
) -> Result<PartitionKey, QueryError> {
    write(inner, KIND_VIEW, &Entry { mutations, before }).await
}

/// Deletes an entry of this shard once what it protects is applied.
pub(crate) async fn forget(inner: &Inner, key: PartitionKey) -> Result<(), QueryError> {
    remove(inner, key).await
}

/// Replays one view entry: applies the base mutation again, then rewrites the view rows
/// from the logged rows to the current ones.
async fn replay_view(inner: &Rc<Inner>, e: Entry) -> Result<(), QueryError> {
    let schema = inner.schema();
    let pending = crate::view::pending_from(&schema, &e.mutations, e.before);
    let planned = e.mutations.into_iter().map(Planned::Mutation).collect();
    crate::write::apply_planned(inner, planned).await?;
    crate::view::finish(inner, &schema, pending).await
}

/// Reads this shard's entries: (key, kind, entry).
fn local_entries() -> Result<Vec<(PartitionKey, u8, Entry)>, QueryError> {
    let now_s = (crate::exec::now_micros() / 1_000_000) as i32;
    let cmd = ReadCommand::new(TABLE_ID, PartitionRange::all(), now_s);
    let db = amphora_replica::local().map_err(fail)?;
    let res = db.read(&cmd).map_err(fail)?;
    let mut out = Vec::new();
    for p in res.partitions {
        let Some(row) = p.rows.first() else { continue };
        let cell = |id: ColumnId| {
            row.cells.iter().find_map(|(c, d)| match d {
                ColumnData::Simple(x) if *c == id => Some(x.value.clone()),
                _ => None,
            })
        };
        let Some(data) = cell(DATA) else { continue };
        let kind = cell(KIND)
            .and_then(|k| <[u8; 4]>::try_from(&k[..]).ok())
            .map(i32::from_be_bytes)
            .unwrap_or(i32::from(KIND_GROUP));
        match decode(&data) {
            Ok(e) => out.push((p.key.clone(), kind as u8, e)),
            Err(err) => tracing::error!(error = %err, "batchlog: skipping an unreadable entry"),
        }
    }
    Ok(out)
}

/// Replays every shard's leftover entries (view entries first, then groups) and deletes
/// them. Runs once at node start, before clients connect. Returns how many were replayed.
pub async fn replay(inner: &Rc<Inner>) -> Result<usize, QueryError> {
    let nr = inner.shared.info.nr_shards;
    let mut found: Vec<(u32, PartitionKey, u8, Entry)> = Vec::new();
    for shard in 0..nr {
        let entries = crate::exec::on_shard(inner, shard, || async { local_entries() }).await??;
        found.extend(entries.into_iter().map(|(k, kind, e)| (shard, k, kind, e)));
    }
    found.sort_by_key(|(_, _, kind, _)| u8::from(*kind != KIND_VIEW));
    let mut n = 0;
    for (shard, key, kind, mut e) in found {
        // Mutations of tables dropped since are dropped with them.
        let schema = inner.schema();
        e.mutations
            .retain(|m| schema.table_by_id(m.table).is_some());
        let r = if kind == KIND_VIEW {
            replay_view(inner, e).await
        } else {
            let planned = e.mutations.into_iter().map(Planned::Mutation).collect();
            apply_group(inner, &schema, planned, false).await
        };
        if let Err(err) = r {
            // Kept for the next start; the node still starts.
            tracing::error!(error = %err, "batchlog: replaying an entry failed");
            continue;
        }
        n += 1;
        crate::exec::on_shard(inner, shard, move || async move {
            let c = crate::exec::local().ok_or_else(|| fail("no coordinator on this shard"))?;
            remove(&c.inner, key).await
        })
        .await??;
    }
    if n > 0 {
        tracing::info!("batchlog: replayed {n} entries");
    }
    Ok(n)
}

/// [`replay`] from this shard's coordinator, for the node's start (after every shard has
/// its coordinator, before the listeners open). Returns how many entries were replayed.
pub async fn replay_on_start() -> Result<usize, QueryError> {
    let c = crate::exec::local().ok_or_else(|| fail("no coordinator on this shard"))?;
    replay(&c.inner).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutation(k: &str, v: &str, ts: i64) -> Mutation {
        let mut row = Row::new(Clustering::empty());
        row.cells = vec![(
            1,
            ColumnData::Simple(Cell::live(ts, Bytes::from(v.to_string()))),
        )];
        Mutation {
            table: TableId(7),
            key: PartitionKey::new(Bytes::from(k.to_string())),
            update: PartitionUpdate {
                rows: vec![row],
                ..PartitionUpdate::default()
            },
        }
    }

    #[test]
    fn entry_round_trips() {
        let e = Entry {
            mutations: vec![mutation("a", "x", 10), mutation("b", "y", 11)],
            before: vec![mutation("a", "old", 5)],
        };
        let b = encode(&e);
        assert_eq!(decode(&b), Ok(e));
    }

    #[test]
    fn truncated_and_unknown_entries_are_errors() {
        let e = Entry {
            mutations: vec![mutation("a", "x", 10)],
            before: Vec::new(),
        };
        let b = encode(&e);
        let cut = b.slice(..b.len() - 3);
        assert!(matches!(decode(&cut), Err(BatchlogError::Truncated { .. })));
        let mut other = b.to_vec();
        other[0] = 9;
        assert_eq!(decode(&Bytes::from(other)), Err(BatchlogError::Version(9)));
    }

    #[test]
    fn partition_locks_serialize_and_clean_up() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let locks = PartitionLocks::local();
            let key = Bytes::from_static(b"k");
            let order = Rc::new(RefCell::new(Vec::new()));
            let mut tasks = Vec::new();
            for i in 0..3 {
                let order = order.clone();
                let key = key.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    let _g = locks.lock(TableId(1), &key).await;
                    order.borrow_mut().push((i, "in"));
                    tokio::task::yield_now().await;
                    order.borrow_mut().push((i, "out"));
                }));
            }
            for t in tasks {
                t.await.expect("task");
            }
            // Each holder leaves before the next one enters.
            let o = order.borrow();
            for pair in o.chunks(2) {
                assert_eq!(pair[0].0, pair[1].0);
                assert_eq!((pair[0].1, pair[1].1), ("in", "out"));
            }
            assert!(locks.is_empty());
        });
    }
}
