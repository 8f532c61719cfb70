//! REST endpoints of the maintenance operations: garbagecollect, cleanup and scrub (tasks
//! like major compaction: started, then polled or waited on), refresh (load SSTables
//! from `upload/`), toppartitions (sample for a while, then answer), and the SSTable
//! histograms of tablehistograms. Each runs on every shard through `submit_to_all`.

use std::sync::Arc;
use std::time::Duration;

use amphora_replica::ShardDb;
use amphora_replica::maintenance::Sharding;
use amphora_replica::toppartitions::{SamplerKinds, TopKeys, merge};
use amphora_storage::maintenance::{Granularity, MaintenanceReport};
use amphora_types::cql_type::CqlType;
use amphora_types::schema::TableSchema;
use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiState;
use super::jobs::{TaskStatus, now_ms};
use super::routes::{ApiError, ApiResult, S, list, resolve, resolve_name, schema, update_task};

/// Longest toppartitions sampling (Cassandra has no limit; the request holds a
/// connection for the whole duration, and nodetool gives up on a request after 600 s).
pub const MAX_SAMPLING_MS: u64 = 300_000;
/// Longest toppartitions list (`-k`).
pub const MAX_LIST_SIZE: usize = 1000;

/// One refresh at a time on the node: two would load the same files (and their
/// outputs-only transaction logs would share a name).
static REFRESH: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn sharding(s: &ApiState) -> Sharding {
    Sharding {
        nr_shards: s.ctx.shared.info.nr_shards,
        ignore_msb: s.ctx.shared.info.ignore_msb,
    }
}

fn report_json(r: &MaintenanceReport) -> Value {
    json!({
        "sstables_in": r.sstables_in,
        "sstables_out": r.sstables_out,
        "bytes_in": r.bytes_in,
        "bytes_out": r.bytes_out,
        "partitions_kept": r.partitions_kept,
        "partitions_dropped": r.partitions_dropped,
        "partitions_skipped": r.partitions_skipped,
        "index_blocks_skipped": r.index_blocks_skipped,
        "sstables_salvaged": r.sstables_salvaged,
        "sstables_unreadable": r.sstables_unreadable,
    })
}

/// Which operation a task runs on each table of each shard.
#[derive(Debug, Clone, Copy)]
enum Op {
    GarbageCollect(Granularity),
    Cleanup(Sharding),
    Scrub { skip_corrupted: bool },
}

impl Op {
    fn kind(&self) -> &'static str {
        match self {
            Op::GarbageCollect(_) => "garbage_collect",
            Op::Cleanup(_) => "cleanup",
            Op::Scrub { .. } => "scrub",
        }
    }

    async fn run(
        self,
        db: &ShardDb,
        t: &TableSchema,
        progress: &mut dyn FnMut(u64),
    ) -> Result<MaintenanceReport, amphora_replica::ReplicaError> {
        match self {
            Op::GarbageCollect(g) => db.garbage_collect(t, g, progress).await,
            Op::Cleanup(sh) => db.cleanup(t, sh, progress).await,
            Op::Scrub { skip_corrupted } => db.scrub(t, skip_corrupted, progress).await,
        }
    }
}

/// Tables of a keyspace (or of every user keyspace when `keyspace` is None) that have
/// storage: system keyspaces are virtual here.
fn tables_of(
    s: &ApiState,
    keyspace: Option<&str>,
    cf: &Option<String>,
) -> Result<Vec<Arc<TableSchema>>, ApiError> {
    let schema = schema(s);
    match keyspace {
        Some(ks) => resolve(&schema, ks, &list(cf)),
        None => Ok(schema.tables().cloned().collect()),
    }
}

/// Starts `op` as a task over `tables` on every shard; answers its id.
async fn start_task(
    s: Arc<ApiState>,
    op: Op,
    keyspace: String,
    tables: Vec<Arc<TableSchema>>,
) -> ApiResult {
    let ids: Vec<_> = tables.iter().map(|t| t.id).collect();
    let sizes = s
        .ctx
        .shards
        .submit_to_all(move |_| {
            let ids = ids.clone();
            async move {
                let db = amphora_replica::local().map_err(|e| e.to_string())?;
                Ok::<u64, String>(
                    ids.iter()
                        .filter_map(|id| db.storage().table_stats(*id))
                        .map(|st| st.sstable_bytes)
                        .sum(),
                )
            }
        })
        .await
        .map_err(ApiError::internal)?;
    let total: u64 = sizes.into_iter().filter_map(Result::ok).sum();
    let task = TaskStatus::running(op.kind(), keyspace, &tables, total, now_ms());
    let id = task.id.clone();
    if let Ok(mut j) = s.jobs.lock() {
        j.insert(task);
    }
    let state = s.clone();
    let task_id = id.clone();
    tokio::spawn(async move {
        let for_shards = state.clone();
        let tid = task_id.clone();
        let r = state
            .ctx
            .shards
            .submit_to_all(move |_| {
                let tables = tables.clone();
                let st = for_shards.clone();
                let tid = tid.clone();
                async move {
                    let db = amphora_replica::local().map_err(|e| e.to_string())?;
                    let mut sum = MaintenanceReport::default();
                    for t in tables {
                        // Progress moves as each SSTable is done.
                        let mut progress = |bytes: u64| {
                            update_task(&st, &tid, |task| {
                                task.progress_completed =
                                    (task.progress_completed + bytes).min(task.progress_total)
                            })
                        };
                        let r = op
                            .run(&db, &t, &mut progress)
                            .await
                            .map_err(|e| format!("{}.{}: {e}", t.keyspace, t.name))?;
                        sum.add(&r);
                    }
                    Ok::<MaintenanceReport, String>(sum)
                }
            })
            .await;
        let mut total = MaintenanceReport::default();
        let mut err = None;
        match r {
            Err(e) => err = Some(e.to_string()),
            Ok(v) => {
                for x in v {
                    match x {
                        Ok(r) => total.add(&r),
                        Err(e) => {
                            err.get_or_insert(e);
                        }
                    }
                }
            }
        }
        if let Some(e) = &err {
            tracing::warn!(task = %task_id, error = %e, kind = op.kind(), "api: task failed");
        }
        update_task(&state, &task_id, |t| {
            t.end_time_ms = Some(now_ms());
            if err.is_none() {
                t.progress_completed = t.progress_total;
            }
            t.state = if err.is_some() { "failed" } else { "done" }.into();
            t.error = err;
            t.result = Some(report_json(&total));
        });
    });
    Ok(Json(json!({ "task_id": id })))
}

#[derive(Deserialize)]
pub(super) struct GcQuery {
    cf: Option<String>,
    /// `ROW` (default) or `CELL`.
    granularity: Option<String>,
}

fn granularity(q: &GcQuery) -> Result<Granularity, ApiError> {
    q.granularity
        .as_deref()
        .unwrap_or("ROW")
        .parse()
        .map_err(|e: amphora_storage::StorageError| ApiError::bad_request(e.to_string()))
}

pub(super) async fn gc_all(State(s): S, Query(q): Query<GcQuery>) -> ApiResult {
    let g = granularity(&q)?;
    let tables = tables_of(&s, None, &None)?;
    start_task(s, Op::GarbageCollect(g), "*".into(), tables).await
}

pub(super) async fn gc_keyspace(
    State(s): S,
    Path(keyspace): Path<String>,
    Query(q): Query<GcQuery>,
) -> ApiResult {
    let g = granularity(&q)?;
    let tables = tables_of(&s, Some(&keyspace), &q.cf)?;
    start_task(s, Op::GarbageCollect(g), keyspace, tables).await
}

#[derive(Deserialize)]
pub(super) struct TablesQuery {
    cf: Option<String>,
}

pub(super) async fn cleanup_all(State(s): S) -> ApiResult {
    let tables = tables_of(&s, None, &None)?;
    let op = Op::Cleanup(sharding(&s));
    start_task(s, op, "*".into(), tables).await
}

pub(super) async fn cleanup_keyspace(
    State(s): S,
    Path(keyspace): Path<String>,
    Query(q): Query<TablesQuery>,
) -> ApiResult {
    let tables = tables_of(&s, Some(&keyspace), &q.cf)?;
    let op = Op::Cleanup(sharding(&s));
    start_task(s, op, keyspace, tables).await
}

#[derive(Deserialize)]
pub(super) struct ScrubQuery {
    cf: Option<String>,
    skip_corrupted: Option<bool>,
}

pub(super) async fn scrub_all(State(s): S, Query(q): Query<ScrubQuery>) -> ApiResult {
    let tables = tables_of(&s, None, &None)?;
    let op = Op::Scrub {
        skip_corrupted: q.skip_corrupted.unwrap_or(false),
    };
    start_task(s, op, "*".into(), tables).await
}

pub(super) async fn scrub_keyspace(
    State(s): S,
    Path(keyspace): Path<String>,
    Query(q): Query<ScrubQuery>,
) -> ApiResult {
    let tables = tables_of(&s, Some(&keyspace), &q.cf)?;
    let op = Op::Scrub {
        skip_corrupted: q.skip_corrupted.unwrap_or(false),
    };
    start_task(s, op, keyspace, tables).await
}

#[derive(Deserialize)]
pub(super) struct RefreshQuery {
    cf: Option<String>,
}

/// Loads the SSTables placed in the table's `upload/` directories (of any shard) into
/// the shards owning their partitions, then deletes them from `upload/`.
pub(super) async fn refresh(
    State(s): S,
    Path(keyspace): Path<String>,
    Query(q): Query<RefreshQuery>,
) -> ApiResult {
    let cf =
        q.cf.as_deref()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| ApiError::bad_request("refresh needs the table (cf=)"))?;
    if cf.contains(',') {
        return Err(ApiError::bad_request("refresh takes one table"));
    }
    let t = resolve(&schema(&s), &keyspace, &[cf.to_owned()])?
        .pop()
        .ok_or_else(|| ApiError::not_found(format!("unknown table {keyspace}.{cf}")))?;
    let _one_at_a_time = REFRESH.lock().await;
    let for_dirs = t.clone();
    let dirs = s
        .ctx
        .shards
        .submit_to_all(move |_| {
            let t = for_dirs.clone();
            async move {
                let db = amphora_replica::local().map_err(|e| e.to_string())?;
                db.upload_dir(&t).map_err(|e| e.to_string())
            }
        })
        .await
        .map_err(ApiError::internal)?;
    let mut uploads = Vec::new();
    for d in dirs {
        let (dir, gens) = d.map_err(ApiError::internal)?;
        if !gens.is_empty() {
            uploads.push((dir, gens));
        }
    }
    let files: usize = uploads.iter().map(|(_, g)| g.len()).sum();
    if files == 0 {
        return Ok(Json(json!({
            "keyspace": t.keyspace, "table": t.name, "sstables_loaded": 0,
            "partitions_loaded": 0,
        })));
    }
    let sh = sharding(&s);
    let (for_shards, t2) = (uploads.clone(), t.clone());
    let r = s
        .ctx
        .shards
        .submit_to_all(move |_| {
            let uploads = for_shards.clone();
            let t = t2.clone();
            async move {
                let db = amphora_replica::local().map_err(|e| e.to_string())?;
                db.refresh(&t, uploads, sh).await.map_err(|e| e.to_string())
            }
        })
        .await
        .map_err(ApiError::internal)?;
    let mut total = MaintenanceReport::default();
    for x in r {
        // A corrupt or unreadable upload: nothing is deleted; what some shards loaded
        // is loaded again (same cells, same timestamps) by the next refresh.
        total.add(&x.map_err(|e| ApiError::bad_request(format!("refresh refused: {e}")))?);
    }
    amphora_storage::maintenance::remove_uploaded(&uploads);
    tracing::info!(
        table = %format!("{}.{}", t.keyspace, t.name),
        sstables = files,
        partitions = total.partitions_kept,
        "refresh loaded uploaded SSTables"
    );
    Ok(Json(json!({
        "keyspace": t.keyspace,
        "table": t.name,
        "sstables_loaded": files,
        "partitions_loaded": total.partitions_kept,
    })))
}

#[derive(Deserialize)]
pub(super) struct TopQuery {
    duration: Option<u64>,
    /// Keys listed per sampler (`-k`, default 10).
    list_size: Option<usize>,
    /// Keys tracked per shard (`-s`, default 256).
    capacity: Option<usize>,
    /// `READS,WRITES` (default both).
    samplers: Option<String>,
}

/// A partition key in Cassandra's text form (`a:b` for a composite key).
fn key_text(t: &TableSchema, key: &[u8]) -> String {
    let types: Vec<&CqlType> = t
        .partition_key
        .iter()
        .filter_map(|id| t.columns.get(*id as usize).map(|c| &c.ty))
        .collect();
    let text = |ty: &CqlType, v: &[u8]| {
        amphora_coordinator::json::value_text(ty, v).unwrap_or_else(|| {
            v.iter().fold(String::from("0x"), |mut s, b| {
                s.push_str(&format!("{b:02x}"));
                s
            })
        })
    };
    match types.as_slice() {
        [one] => text(one, key),
        many => match amphora_types::token::split_composite_key(key, many.len()) {
            Some(parts) => parts
                .iter()
                .zip(many)
                .map(|(v, ty)| text(ty, v))
                .collect::<Vec<_>>()
                .join(":"),
            None => text(&CqlType::Blob, key),
        },
    }
}

fn top_json(t: &TableSchema, k: &TopKeys) -> Value {
    json!({
        "cardinality": k.cardinality,
        "partitions": k.top.iter().map(|(key, count, error)| json!({
            "partition": key_text(t, key),
            "count": count,
            "error": error,
        })).collect::<Vec<_>>(),
    })
}

/// Samples the table's partition keys on every shard for `duration` ms and answers the
/// top keys of reads and writes.
pub(super) async fn toppartitions(
    State(s): S,
    Path(name): Path<String>,
    Query(q): Query<TopQuery>,
) -> ApiResult {
    let t = resolve_name(&schema(&s), &name)?;
    let duration = q
        .duration
        .ok_or_else(|| ApiError::bad_request("duration (ms) is required"))?;
    if duration == 0 || duration > MAX_SAMPLING_MS {
        return Err(ApiError::bad_request(format!(
            "duration must be 1..={MAX_SAMPLING_MS} ms, not {duration}"
        )));
    }
    let list_size = q.list_size.unwrap_or(10);
    let capacity = q.capacity.unwrap_or(256);
    if list_size == 0 || list_size > MAX_LIST_SIZE {
        return Err(ApiError::bad_request(format!(
            "list_size must be 1..={MAX_LIST_SIZE}"
        )));
    }
    if capacity < list_size || capacity > amphora_replica::toppartitions::MAX_CAPACITY {
        return Err(ApiError::bad_request(format!(
            "capacity must be between list_size ({list_size}) and {}",
            amphora_replica::toppartitions::MAX_CAPACITY
        )));
    }
    let mut kinds = SamplerKinds {
        reads: false,
        writes: false,
    };
    for k in q.samplers.as_deref().unwrap_or("READS,WRITES").split(',') {
        match k.trim().to_ascii_uppercase().as_str() {
            "READS" => kinds.reads = true,
            "WRITES" => kinds.writes = true,
            "" => {}
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown sampler {other} (READS or WRITES)"
                )));
            }
        }
    }
    if !kinds.reads && !kinds.writes {
        return Err(ApiError::bad_request("no sampler given (READS, WRITES)"));
    }
    let t2 = t.clone();
    let started = s
        .ctx
        .shards
        .submit_to_all(move |_| {
            let t = t2.clone();
            async move {
                let db = amphora_replica::local().map_err(|e| e.to_string())?;
                db.start_sampling(&t, capacity, kinds)
                    .map_err(|e| e.to_string())
            }
        })
        .await
        .map_err(ApiError::internal)?;
    let busy = started.iter().find_map(|r| r.as_ref().err().cloned());
    if busy.is_some() {
        // Stops only the samplers this request started.
        let mine: Vec<bool> = started.iter().map(Result::is_ok).collect();
        let _ = s
            .ctx
            .shards
            .submit_to_all(move |shard| {
                let stop = mine.get(shard as usize).copied().unwrap_or(false);
                async move {
                    if stop && let Ok(db) = amphora_replica::local() {
                        db.stop_sampling();
                    }
                }
            })
            .await;
    }
    if let Some(e) = busy {
        return Err(ApiError::new(axum::http::StatusCode::CONFLICT, e));
    }
    // The samplers stop even if the client goes away before the end (a task of its own,
    // not this request's future).
    let shards = s.ctx.shards.clone();
    let results = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(duration)).await;
        shards
            .submit_to_all(|_| async move {
                amphora_replica::local()
                    .ok()
                    .and_then(|db| db.stop_sampling())
            })
            .await
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    let (reads, writes): (Vec<TopKeys>, Vec<TopKeys>) = results.into_iter().flatten().unzip();
    let mut out = json!({
        "keyspace": t.keyspace,
        "table": t.name,
        "duration_ms": duration,
    });
    if kinds.writes {
        out["writes"] = top_json(&t, &merge(&writes, list_size));
    }
    if kinds.reads {
        out["reads"] = top_json(&t, &merge(&reads, list_size));
    }
    Ok(Json(out))
}

/// Percentiles of a power-of-two histogram (bucket i = `[2^i, 2^(i+1))`; bucket 0 also
/// holds 0): each percentile is its bucket's upper bound, as Cassandra reports a bucket
/// offset.
fn pow2_json(counts: &[u64; 40]) -> Value {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return Value::Null;
    }
    let upper = |i: usize| (1u64 << (i + 1)) - 1;
    let pct = |p: f64| -> u64 {
        let target = ((total as f64) * p).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= target {
                return upper(i);
            }
        }
        upper(counts.len() - 1)
    };
    let first = counts.iter().position(|n| *n > 0).unwrap_or(0);
    let last = counts.iter().rposition(|n| *n > 0).unwrap_or(0);
    json!({
        "count": total,
        "p50": pct(0.5), "p75": pct(0.75), "p95": pct(0.95), "p98": pct(0.98), "p99": pct(0.99),
        "min": if first == 0 { 0 } else { 1u64 << first },
        "max": upper(last),
    })
}

/// Partition size (bytes) and cell count percentiles of the table's live SSTables on
/// every shard (tablehistograms); JSON null when the table has no SSTable.
pub(super) async fn sstable_histograms(
    s: &ApiState,
    t: Arc<TableSchema>,
) -> Result<(Value, Value), ApiError> {
    let r = s
        .ctx
        .shards
        .submit_to_all(move |_| {
            let t = t.clone();
            async move {
                let db = amphora_replica::local().map_err(|e| e.to_string())?;
                Ok::<_, String>(db.sstable_histograms(&t))
            }
        })
        .await
        .map_err(ApiError::internal)?;
    let mut size = [0u64; 40];
    let mut cells = [0u64; 40];
    for h in r {
        let h = h.map_err(ApiError::internal)?;
        for (a, b) in size.iter_mut().zip(h.partition_size) {
            *a += b;
        }
        for (a, b) in cells.iter_mut().zip(h.cell_count) {
            *a += b;
        }
    }
    Ok((pow2_json(&size), pow2_json(&cells)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_percentiles_are_bucket_upper_bounds() {
        let mut h = [0u64; 40];
        h[9] = 90; // [512, 1024)
        h[12] = 10; // [4096, 8192)
        let v = pow2_json(&h);
        assert_eq!(v["count"], 100);
        assert_eq!(v["p50"], 1023);
        assert_eq!(v["p95"], 8191);
        assert_eq!(v["min"], 512);
        assert_eq!(v["max"], 8191);
        assert_eq!(pow2_json(&[0; 40]), Value::Null);
    }
}
