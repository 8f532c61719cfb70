//! The REST endpoints (docs/dev/rest-api.md). Handlers run on the API thread and reach
//! each shard's database only through `Shards::submit_to_all`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use amphora_coordinator::schema::{Schema, is_system_keyspace};
use amphora_replica::snapshot::{SnapshotInfo, valid_tag};
use amphora_replica::stats::{Histogram, TableCounters};
use amphora_storage::{StorageMetrics, TableStats};
use amphora_types::cql_type::CqlType;
use amphora_types::schema::{TableId, TableSchema};
use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::jobs::{CompactionRecord, TaskStatus, now_ms};
use super::maintenance;
use super::{ApiState, OperationMode};

pub(super) type S = State<Arc<ApiState>>;
pub(super) type ApiResult = Result<Json<Value>, ApiError>;

/// An error answered as `{"message": ..., "code": <http status>}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
    pub(super) fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    pub(super) fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    fn unsupported(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, m)
    }
    pub(super) fn internal(e: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %e, "api: request failed");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "message": self.message, "code": self.status.as_u16() });
        (self.status, Json(body)).into_response()
    }
}

pub(crate) fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        // node and ring
        .route("/storage_service/node_info", get(node_info))
        .route("/storage_service/hostid/local", get(host_id_local))
        .route("/storage_service/host_id", get(host_id_map))
        .route("/storage_service/release_version", get(release_version))
        .route(
            "/storage_service/amphora_release_version",
            get(amphora_version),
        )
        .route("/storage_service/cluster_name", get(cluster_name))
        .route("/storage_service/operation_mode", get(operation_mode))
        .route("/storage_service/load", get(load))
        .route("/storage_service/tokens", get(tokens))
        .route("/storage_service/tokens_endpoint", get(tokens_endpoint))
        .route("/storage_service/keyspaces", get(keyspaces))
        .route(
            "/storage_service/keyspaces_replication",
            get(keyspaces_replication),
        )
        .route("/storage_service/schema_version", get(schema_version))
        .route(
            "/storage_service/describe_ring/{keyspace}",
            get(describe_ring),
        )
        .route(
            "/storage_service/natural_endpoints/{keyspace}",
            get(natural_endpoints),
        )
        .route(
            "/storage_service/timeout/{kind}",
            get(timeout).post(timeout),
        )
        .route("/system/uptime_ms", get(uptime_ms))
        .route(
            "/system/logger",
            get(get_loggers).post(set_root_logger).delete(reset_loggers),
        )
        .route("/system/logger/{name}", post(set_logger))
        .route(
            "/storage_service/trace_probability",
            get(get_trace_probability).post(set_trace_probability),
        )
        .route(
            "/storage_service/slow_query",
            get(get_slow_query).post(set_slow_query),
        )
        .route("/failure_detector/simple_states", get(simple_states))
        .route("/failure_detector/endpoints", get(fd_endpoints))
        // native transport, drain, stop
        .route(
            "/storage_service/native_transport",
            get(native_status).post(native_start).delete(native_stop),
        )
        .route("/storage_service/drain", post(drain))
        .route("/storage_service/stop_daemon", post(stop_daemon))
        // tables
        .route("/column_family/", get(column_families))
        .route("/column_family/name", get(column_family_names))
        .route("/column_family/stats/{name}", get(table_stats))
        .route("/column_family/histograms/{name}", get(table_histograms))
        // flush, compaction, snapshots
        .route("/storage_service/flush", post(flush_all))
        .route(
            "/storage_service/keyspace_flush/{keyspace}",
            post(flush_keyspace),
        )
        .route("/storage_service/compact", post(compact_all))
        .route(
            "/storage_service/keyspace_compaction/{keyspace}",
            post(compact_keyspace),
        )
        .route("/storage_service/garbagecollect", post(maintenance::gc_all))
        .route(
            "/storage_service/keyspace_garbagecollect/{keyspace}",
            post(maintenance::gc_keyspace),
        )
        .route("/storage_service/cleanup", post(maintenance::cleanup_all))
        .route(
            "/storage_service/keyspace_cleanup/{keyspace}",
            post(maintenance::cleanup_keyspace),
        )
        .route("/storage_service/scrub", post(maintenance::scrub_all))
        .route(
            "/storage_service/keyspace_scrub/{keyspace}",
            post(maintenance::scrub_keyspace),
        )
        .route(
            "/storage_service/sstables/{keyspace}",
            post(maintenance::refresh),
        )
        .route(
            "/column_family/toppartitions/{name}",
            get(maintenance::toppartitions),
        )
        .route("/compaction_manager/compactions", get(compactions))
        .route(
            "/compaction_manager/metrics/pending_tasks",
            get(pending_tasks),
        )
        .route(
            "/compaction_manager/compaction_history",
            get(compaction_history),
        )
        .route("/task_manager/list_module_tasks/{module}", get(list_tasks))
        .route("/task_manager/task_status/{id}", get(task_status))
        .route("/task_manager/wait_task/{id}", get(wait_task))
        .route(
            "/storage_service/snapshots",
            get(list_snapshots)
                .post(take_snapshot)
                .delete(clear_snapshot),
        )
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(axum::middleware::map_response(json_errors))
        .with_state(state)
}

/// Errors axum answers itself (a query parameter of the wrong type, a missing path
/// segment) come as text: give them the API's JSON error shape too.
async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let body = axum::body::to_bytes(resp.into_body(), 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    ApiError::new(status, body).into_response()
}

// ---- helpers ----

pub(super) fn schema(s: &ApiState) -> Arc<Schema> {
    match s.ctx.shared.schema.lock() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

fn host_id(s: &ApiState) -> String {
    uuid::Uuid::from_bytes(s.ctx.shared.info.host_id).to_string()
}

fn address(s: &ApiState) -> String {
    s.ctx.shared.info.listen_address.to_string()
}

const DATACENTER: &str = "datacenter1";
const RACK: &str = "rack1";

fn mode(s: &ApiState) -> OperationMode {
    s.mode.lock().map(|m| *m).unwrap_or(OperationMode::Normal)
}

fn set_mode(s: &ApiState, m: OperationMode) {
    if let Ok(mut g) = s.mode.lock() {
        *g = m;
    }
}

/// Comma-separated list (`cf=a,b`); empty or absent = none.
pub(super) fn list(v: &Option<String>) -> Vec<String> {
    v.as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The tables of `keyspace` named in `cfs` (all of them when empty).
pub(super) fn resolve(
    schema: &Schema,
    keyspace: &str,
    cfs: &[String],
) -> Result<Vec<Arc<TableSchema>>, ApiError> {
    let ks = schema.keyspace(keyspace).ok_or_else(|| {
        if is_system_keyspace(keyspace) {
            ApiError::bad_request(format!(
                "keyspace {keyspace} is a virtual system keyspace with no tables on disk"
            ))
        } else {
            ApiError::not_found(format!("unknown keyspace {keyspace}"))
        }
    })?;
    if cfs.is_empty() {
        return Ok(ks.tables.values().cloned().collect());
    }
    cfs.iter()
        .map(|cf| {
            ks.tables
                .get(cf)
                .cloned()
                .ok_or_else(|| ApiError::not_found(format!("unknown table {keyspace}.{cf}")))
        })
        .collect()
}

/// `ks:cf` (ScyllaDB's column family name) or `ks.cf`.
pub(super) fn resolve_name(schema: &Schema, name: &str) -> Result<Arc<TableSchema>, ApiError> {
    let (ks, cf) = name
        .split_once(':')
        .or_else(|| name.split_once('.'))
        .ok_or_else(|| ApiError::bad_request(format!("expected keyspace:table, got {name}")))?;
    let mut t = resolve(schema, ks, &[cf.to_owned()])?;
    t.pop()
        .ok_or_else(|| ApiError::not_found(format!("unknown table {ks}.{cf}")))
}

/// One shard's storage metrics and the numbers of the asked tables.
#[derive(Debug, Clone)]
struct ShardTables {
    shard: u32,
    metrics: StorageMetrics,
    tables: Vec<(TableId, Option<TableStats>, TableCounters)>,
}

async fn gather(s: &ApiState, ids: Vec<TableId>) -> Result<Vec<ShardTables>, ApiError> {
    let r = s
        .ctx
        .shards
        .submit_to_all(move |shard| {
            let ids = ids.clone();
            async move {
                let db = amphora_replica::local().map_err(|e| e.to_string())?;
                let counters = db.table_counters();
                let tables = ids
                    .iter()
                    .map(|id| {
                        (
                            *id,
                            db.storage().table_stats(*id),
                            counters.get(id).cloned().unwrap_or_default(),
                        )
                    })
                    .collect();
                Ok::<_, String>(ShardTables {
                    shard,
                    metrics: db.storage().metrics(),
                    tables,
                })
            }
        })
        .await
        .map_err(ApiError::internal)?;
    r.into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::internal)
}

// ---- node and ring ----

async fn node_info(State(s): S) -> ApiResult {
    let shards = gather(&s, Vec::new()).await?;
    let sum = |f: fn(&StorageMetrics) -> u64| shards.iter().map(|x| f(&x.metrics)).sum::<u64>();
    let info = &s.ctx.shared.info;
    let started = s
        .started_wall
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Json(json!({
        "host_id": host_id(&s),
        "address": address(&s),
        "cluster_name": info.cluster_name,
        "datacenter": DATACENTER,
        "rack": RACK,
        "release_version": amphora_coordinator::system::RELEASE_VERSION,
        "amphora_version": env!("CARGO_PKG_VERSION"),
        "shards": info.nr_shards,
        "generation": started,
        "uptime_seconds": s.started_at.elapsed().as_secs(),
        "load_bytes": sum(|m| m.sstable_bytes),
        "memtable_bytes": sum(|m| m.memtable_bytes),
        "commitlog_bytes": sum(|m| m.commitlog_bytes),
        "sstable_count": sum(|m| m.sstable_count),
        "tokens": amphora_coordinator::system::node_tokens(info).len(),
        "native_transport": s.ctx.native.is_running(),
        "native_port": info.native_port,
        "shard_aware_port": info.shard_aware_port,
        "operation_mode": mode(&s).as_str(),
        "data_dir": s.ctx.data_dir.display().to_string(),
        "schema_version": uuid::Uuid::from_bytes(schema(&s).version).to_string(),
    })))
}

async fn schema_version(State(s): S) -> ApiResult {
    Ok(Json(json!(
        uuid::Uuid::from_bytes(schema(&s).version).to_string()
    )))
}

async fn keyspaces_replication(State(s): S) -> ApiResult {
    let schema = schema(&s);
    let out: Vec<Value> = schema
        .keyspaces
        .values()
        .map(|k| json!({ "keyspace": k.name, "replication": k.replication, "durable_writes": k.durable_writes }))
        .collect();
    Ok(Json(json!(out)))
}

async fn host_id_local(State(s): S) -> ApiResult {
    Ok(Json(json!(host_id(&s))))
}

async fn host_id_map(State(s): S) -> ApiResult {
    Ok(Json(json!([{ "key": address(&s), "value": host_id(&s) }])))
}

async fn release_version() -> ApiResult {
    Ok(Json(json!(amphora_coordinator::system::RELEASE_VERSION)))
}

async fn amphora_version() -> ApiResult {
    Ok(Json(json!(env!("CARGO_PKG_VERSION"))))
}

async fn cluster_name(State(s): S) -> ApiResult {
    Ok(Json(json!(s.ctx.shared.info.cluster_name)))
}

async fn operation_mode(State(s): S) -> ApiResult {
    Ok(Json(json!(mode(&s).as_str())))
}

async fn load(State(s): S) -> ApiResult {
    let shards = gather(&s, Vec::new()).await?;
    Ok(Json(json!(
        shards.iter().map(|x| x.metrics.sstable_bytes).sum::<u64>()
    )))
}

fn sorted_tokens(s: &ApiState) -> Vec<i64> {
    let mut t = amphora_coordinator::system::node_tokens(&s.ctx.shared.info);
    t.sort_unstable();
    t
}

async fn tokens(State(s): S) -> ApiResult {
    let t: Vec<String> = sorted_tokens(&s).iter().map(i64::to_string).collect();
    Ok(Json(json!(t)))
}

async fn tokens_endpoint(State(s): S) -> ApiResult {
    let a = address(&s);
    let t: Vec<Value> = sorted_tokens(&s)
        .iter()
        .map(|t| json!({ "key": t.to_string(), "value": a }))
        .collect();
    Ok(Json(json!(t)))
}

#[derive(Deserialize)]
struct KeyspacesQuery {
    /// `user` (default: without system keyspaces) or `all`.
    #[serde(rename = "type")]
    kind: Option<String>,
}

async fn keyspaces(State(s): S, Query(q): Query<KeyspacesQuery>) -> ApiResult {
    let schema = schema(&s);
    let mut out: Vec<String> = schema.keyspaces.keys().cloned().collect();
    match q.kind.as_deref() {
        None | Some("user") | Some("non_local_strategy") => {
            out.retain(|k| !is_system_keyspace(k));
        }
        Some("all") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown keyspace type {other} (user, all, non_local_strategy)"
            )));
        }
    }
    Ok(Json(json!(out)))
}

async fn describe_ring(State(s): S, Path(keyspace): Path<String>) -> ApiResult {
    let schema = schema(&s);
    if schema.keyspace(&keyspace).is_none() {
        return Err(ApiError::not_found(format!("unknown keyspace {keyspace}")));
    }
    let toks = sorted_tokens(&s);
    let a = address(&s);
    let n = toks.len();
    let ranges: Vec<Value> = (0..n)
        .map(|i| {
            // Each token ends the range that starts at the previous token (wrapping).
            let start = toks[(i + n - 1) % n];
            let end = toks[i];
            json!({
                "start_token": start.to_string(),
                "end_token": end.to_string(),
                "endpoints": [a],
                "rpc_endpoints": [a],
                "endpoint_details": [{ "host": a, "datacenter": DATACENTER, "rack": RACK }],
            })
        })
        .collect();
    Ok(Json(json!(ranges)))
}

#[derive(Deserialize)]
struct EndpointsQuery {
    cf: Option<String>,
    key: Option<String>,
}

/// Serializes one partition-key component given as text (nodetool getendpoints syntax).
fn key_component(ty: &CqlType, text: &str) -> Result<Vec<u8>, String> {
    let bad = |e: &dyn std::fmt::Display| format!("'{text}' is not a valid {ty:?}: {e}");
    Ok(match ty {
        CqlType::Text | CqlType::Ascii => text.as_bytes().to_vec(),
        CqlType::Int => text
            .parse::<i32>()
            .map_err(|e| bad(&e))?
            .to_be_bytes()
            .to_vec(),
        CqlType::Bigint | CqlType::Counter => text
            .parse::<i64>()
            .map_err(|e| bad(&e))?
            .to_be_bytes()
            .to_vec(),
        CqlType::Smallint => text
            .parse::<i16>()
            .map_err(|e| bad(&e))?
            .to_be_bytes()
            .to_vec(),
        CqlType::Tinyint => text
            .parse::<i8>()
            .map_err(|e| bad(&e))?
            .to_be_bytes()
            .to_vec(),
        CqlType::Boolean => match text.to_ascii_lowercase().as_str() {
            "true" => vec![1],
            "false" => vec![0],
            _ => return Err(bad(&"expected true or false")),
        },
        CqlType::Uuid | CqlType::Timeuuid => uuid::Uuid::parse_str(text)
            .map_err(|e| bad(&e))?
            .as_bytes()
            .to_vec(),
        CqlType::Blob => {
            let h = text.strip_prefix("0x").unwrap_or(text);
            if !h.len().is_multiple_of(2) {
                return Err(bad(&"odd number of hex digits"));
            }
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(h.get(i..i + 2).unwrap_or(""), 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|e| bad(&e))?
        }
        other => {
            return Err(format!(
                "partition keys of type {other:?} are not supported yet"
            ));
        }
    })
}

async fn natural_endpoints(
    State(s): S,
    Path(keyspace): Path<String>,
    Query(q): Query<EndpointsQuery>,
) -> ApiResult {
    let schema = schema(&s);
    let cf =
        q.cf.ok_or_else(|| ApiError::bad_request("missing cf (the table)"))?;
    let key = q
        .key
        .ok_or_else(|| ApiError::bad_request("missing key (the partition key)"))?;
    let t = resolve(&schema, &keyspace, &[cf])?
        .pop()
        .ok_or_else(|| ApiError::not_found("unknown table"))?;
    let types: Vec<&CqlType> = t
        .partition_key
        .iter()
        .filter_map(|c| t.columns.get(*c as usize).map(|c| &c.ty))
        .collect();
    let parts: Vec<&str> = if types.len() == 1 {
        vec![key.as_str()]
    } else {
        key.split(':').collect()
    };
    if parts.len() != types.len() {
        return Err(ApiError::bad_request(format!(
            "the partition key of {}.{} has {} components (separate them with ':'), got {}",
            t.keyspace,
            t.name,
            types.len(),
            parts.len()
        )));
    }
    let comps = types
        .iter()
        .zip(&parts)
        .map(|(ty, p)| key_component(ty, p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::bad_request)?;
    let bytes = if comps.len() == 1 {
        comps.into_iter().next().unwrap_or_default()
    } else {
        let refs: Vec<&[u8]> = comps.iter().map(Vec::as_slice).collect();
        amphora_types::token::serialize_composite_key(&refs)
    };
    // One node owns every token range, so the key's token has this node as its replica.
    let _token = amphora_types::token::murmur3_token(&bytes);
    Ok(Json(json!([address(&s)])))
}

async fn timeout(Path(kind): Path<String>) -> ApiResult {
    Err(ApiError::unsupported(format!(
        "request timeouts ({kind}) are not configurable yet"
    )))
}

async fn uptime_ms(State(s): S) -> ApiResult {
    Ok(Json(json!(s.started_at.elapsed().as_millis() as u64)))
}

async fn simple_states(State(s): S) -> ApiResult {
    Ok(Json(json!([{ "key": address(&s), "value": "UP" }])))
}

async fn fd_endpoints(State(s): S) -> ApiResult {
    Ok(Json(json!([{
        "addrs": address(&s),
        "is_alive": true,
        "host_id": host_id(&s),
        "datacenter": DATACENTER,
        "rack": RACK,
        "status": if mode(&s) == OperationMode::Normal { "NORMAL" } else { mode(&s).as_str() },
    }])))
}

// ---- log levels ----

fn logging_error(e: crate::logging::LoggingError) -> ApiError {
    use crate::logging::LoggingError as E;
    match e {
        E::NotInstalled => ApiError::unsupported(e.to_string()),
        E::BadLevel(_) | E::BadTarget(_) => ApiError::bad_request(e.to_string()),
        E::Reload(_) => ApiError::internal(e),
    }
}

fn levels_json(l: &crate::logging::Levels) -> Value {
    let mut out = vec![json!({ "logger": "ROOT", "level": l.root.to_ascii_uppercase() })];
    for (t, lv) in &l.targets {
        out.push(json!({ "logger": t, "level": lv.to_ascii_uppercase() }));
    }
    json!(out)
}

#[derive(Deserialize)]
struct LevelQuery {
    level: Option<String>,
}

async fn get_loggers() -> ApiResult {
    let l = crate::logging::levels().map_err(logging_error)?;
    Ok(Json(levels_json(&l)))
}

async fn set_root_logger(Query(q): Query<LevelQuery>) -> ApiResult {
    let level = q
        .level
        .ok_or_else(|| ApiError::bad_request("missing level"))?;
    let l = crate::logging::set_level(None, Some(&level)).map_err(logging_error)?;
    Ok(Json(levels_json(&l)))
}

async fn set_logger(Path(name): Path<String>, Query(q): Query<LevelQuery>) -> ApiResult {
    let l = crate::logging::set_level(Some(&name), q.level.as_deref()).map_err(logging_error)?;
    Ok(Json(levels_json(&l)))
}

async fn reset_loggers() -> ApiResult {
    let l = crate::logging::set_level(None, None).map_err(logging_error)?;
    Ok(Json(levels_json(&l)))
}

// ---- tracing ----

#[derive(Deserialize)]
struct ProbabilityQuery {
    probability: Option<String>,
}

async fn get_trace_probability() -> ApiResult {
    Ok(Json(json!(amphora_trace::probability())))
}

async fn set_trace_probability(Query(q): Query<ProbabilityQuery>) -> ApiResult {
    let raw = q
        .probability
        .ok_or_else(|| ApiError::bad_request("missing parameter: probability"))?;
    let p: f64 = raw
        .trim()
        .parse()
        .map_err(|_| ApiError::bad_request(format!("probability is not a number: {raw}")))?;
    amphora_trace::set_probability(p).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Json(json!(p)))
}

#[derive(Deserialize)]
struct SlowQueryQuery {
    /// Microseconds (ScyllaDB's `threshold` parameter); 0 turns the log off.
    threshold: Option<u64>,
    enable: Option<bool>,
}

fn slow_query_json() -> serde_json::Value {
    let t = amphora_trace::slow_query_threshold();
    json!({"enable": !t.is_zero(), "threshold": t.as_micros() as u64})
}

async fn get_slow_query() -> ApiResult {
    Ok(Json(slow_query_json()))
}

async fn set_slow_query(Query(q): Query<SlowQueryQuery>) -> ApiResult {
    match (q.enable, q.threshold) {
        (Some(false), _) => amphora_trace::set_slow_query_threshold(Duration::ZERO),
        (_, Some(us)) => amphora_trace::set_slow_query_threshold(Duration::from_micros(us)),
        (Some(true), None) if amphora_trace::slow_query_threshold().is_zero() => {
            amphora_trace::set_slow_query_threshold(Duration::from_millis(500))
        }
        _ => {}
    }
    Ok(Json(slow_query_json()))
}

// ---- native transport, drain ----

async fn native_status(State(s): S) -> ApiResult {
    Ok(Json(json!(s.ctx.native.is_running())))
}

async fn native_start(State(s): S) -> ApiResult {
    if mode(&s) != OperationMode::Normal {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "the node is {}; restart it to serve clients",
                mode(&s).as_str()
            ),
        ));
    }
    s.ctx.native.start().map_err(ApiError::internal)?;
    Ok(Json(json!(true)))
}

async fn native_stop(State(s): S) -> ApiResult {
    s.ctx.native.stop().await;
    Ok(Json(json!(false)))
}

/// Stops serving clients and flushes every memtable (`nodetool drain`).
async fn do_drain(s: &ApiState) -> Result<(), ApiError> {
    if mode(s) == OperationMode::Drained {
        return Ok(());
    }
    set_mode(s, OperationMode::Draining);
    s.ctx.native.stop().await;
    let r = s
        .ctx
        .shards
        .submit_to_all(|_| async {
            let db = amphora_replica::local().map_err(|e| e.to_string())?;
            db.flush_all().await.map_err(|e| e.to_string())
        })
        .await
        .map_err(ApiError::internal)?;
    r.into_iter()
        .collect::<Result<Vec<()>, _>>()
        .map_err(ApiError::internal)?;
    set_mode(s, OperationMode::Drained);
    tracing::info!("api: node drained");
    Ok(())
}

async fn drain(State(s): S) -> ApiResult {
    do_drain(&s).await?;
    Ok(Json(json!(mode(&s).as_str())))
}

/// Drains, then asks the process to stop as SIGTERM does (the binary's clean shutdown).
async fn stop_daemon(State(s): S) -> ApiResult {
    do_drain(&s).await?;
    tokio::spawn(async {
        // Lets the response go out first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        tracing::info!("api: stop_daemon: stopping the process");
        if let Err(e) =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM)
        {
            tracing::error!(error = %e, "api: cannot signal the process to stop");
        }
    });
    Ok(Json(json!("stopping")))
}

// ---- tables ----

async fn column_families(State(s): S) -> ApiResult {
    let schema = schema(&s);
    let out: Vec<Value> = schema
        .tables()
        .map(|t| json!({ "ks": t.keyspace, "cf": t.name, "type": "ColumnFamilies", "id": t.id.to_string() }))
        .collect();
    Ok(Json(json!(out)))
}

async fn column_family_names(State(s): S) -> ApiResult {
    let schema = schema(&s);
    let out: Vec<String> = schema
        .tables()
        .map(|t| format!("{}:{}", t.keyspace, t.name))
        .collect();
    Ok(Json(json!(out)))
}

fn stats_json(
    t: &TableSchema,
    per_shard: &[(u32, Option<TableStats>, TableCounters)],
    snapshots_bytes: u64,
) -> Value {
    let mut total = TableStats::default();
    let mut counters = TableCounters::default();
    let mut shards = Vec::new();
    for (shard, st, c) in per_shard {
        let st = st.clone().unwrap_or_default();
        shards.push(json!({
            "shard": shard,
            "sstable_count": st.sstable_count,
            "live_disk_space_used": st.sstable_bytes,
            "memtable_data_size": st.memtable_bytes,
            "read_count": c.reads,
            "write_count": c.writes,
        }));
        total.memtable_bytes += st.memtable_bytes;
        total.memtable_partitions += st.memtable_partitions;
        total.flushing_memtables += st.flushing_memtables;
        total.sstable_count += st.sstable_count;
        total.sstable_bytes += st.sstable_bytes;
        total.sstable_uncompressed_bytes += st.sstable_uncompressed_bytes;
        total.estimated_partitions += st.estimated_partitions;
        total.sstable_levels.extend(st.sstable_levels);
        counters.merge(c);
    }
    let ratio = if total.sstable_uncompressed_bytes > 0 {
        total.sstable_bytes as f64 / total.sstable_uncompressed_bytes as f64
    } else {
        -1.0
    };
    let mut levels: BTreeMap<u32, u64> = BTreeMap::new();
    for l in &total.sstable_levels {
        *levels.entry(*l).or_default() += 1;
    }
    json!({
        "keyspace": t.keyspace,
        "table": t.name,
        "id": t.id.to_string(),
        "sstable_count": total.sstable_count,
        "sstables_in_each_level": levels.iter().map(|(l, n)| json!({"level": l, "count": n})).collect::<Vec<_>>(),
        "live_disk_space_used": total.sstable_bytes,
        "snapshots_size_bytes": snapshots_bytes,
        "sstable_uncompressed_bytes": total.sstable_uncompressed_bytes,
        "compression_ratio": ratio,
        "estimated_partitions": total.estimated_partitions,
        "memtable_data_size": total.memtable_bytes,
        "memtable_partitions": total.memtable_partitions,
        "pending_flushes": total.flushing_memtables,
        "read_count": counters.reads,
        "read_latency_mean_us": counters.read_latency.mean(),
        "write_count": counters.writes,
        "write_latency_mean_us": counters.write_latency.mean(),
        "read_errors": counters.read_errors,
        "write_errors": counters.write_errors,
        "shards": shards,
    })
}

async fn table_stats(State(s): S, Path(name): Path<String>) -> ApiResult {
    let schema = schema(&s);
    let tables: Vec<Arc<TableSchema>> = if name == "all" {
        schema.tables().cloned().collect()
    } else if !name.contains(':') && !name.contains('.') {
        resolve(&schema, &name, &[])?
    } else {
        vec![resolve_name(&schema, &name)?]
    };
    let shards = gather(&s, tables.iter().map(|t| t.id).collect()).await?;
    let snapshots = gather_snapshots(&s, tables.clone()).await?;
    let out: Vec<Value> = tables
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let per: Vec<_> = shards
                .iter()
                .filter_map(|sh| {
                    sh.tables
                        .get(i)
                        .map(|(_, st, c)| (sh.shard, st.clone(), c.clone()))
                })
                .collect();
            let snap: u64 = snapshots
                .iter()
                .filter(|x| x.keyspace == t.keyspace && x.table == t.name)
                .map(|x| x.size_bytes)
                .sum();
            stats_json(t, &per, snap)
        })
        .collect();
    Ok(Json(json!(out)))
}

fn histogram_json(h: &Histogram) -> Value {
    let min = h
        .buckets
        .iter()
        .position(|n| *n > 0)
        .map_or(0, |i| amphora_replica::stats::bucket_offsets()[i]);
    json!({
        "count": h.count,
        "p50": h.percentile(0.50),
        "p75": h.percentile(0.75),
        "p95": h.percentile(0.95),
        "p98": h.percentile(0.98),
        "p99": h.percentile(0.99),
        "min": min.min(h.max),
        "max": h.max,
        "mean": h.mean(),
    })
}

fn small_histogram_json(counts: &[u64]) -> Value {
    let total: u64 = counts.iter().sum();
    let pct = |p: f64| -> u64 {
        if total == 0 {
            return 0;
        }
        let target = ((total as f64) * p).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= target {
                return i as u64;
            }
        }
        counts.len() as u64
    };
    json!({
        "count": total,
        "p50": pct(0.5), "p75": pct(0.75), "p95": pct(0.95), "p98": pct(0.98), "p99": pct(0.99),
        "min": counts.iter().position(|n| *n > 0).unwrap_or(0),
        "max": counts.iter().rposition(|n| *n > 0).unwrap_or(0),
    })
}

async fn table_histograms(State(s): S, Path(name): Path<String>) -> ApiResult {
    let schema = schema(&s);
    let t = resolve_name(&schema, &name)?;
    let shards = gather(&s, vec![t.id]).await?;
    let (partition_size, cell_count) = maintenance::sstable_histograms(&s, t.clone()).await?;
    let mut c = TableCounters::default();
    let mut per_read = [0u64; 16];
    for sh in &shards {
        if let Some((_, _, tc)) = sh.tables.first() {
            c.merge(tc);
        }
        for (a, b) in per_read.iter_mut().zip(sh.metrics.sstables_per_read.iter()) {
            *a += b;
        }
    }
    Ok(Json(json!({
        "keyspace": t.keyspace,
        "table": t.name,
        "read_latency_us": histogram_json(&c.read_latency),
        "write_latency_us": histogram_json(&c.write_latency),
        // The storage engine counts SSTables per read per shard, not per table yet.
        "sstables_per_read_node_wide": small_histogram_json(&per_read),
        "partition_size_bytes": partition_size,
        "cell_count": cell_count,
    })))
}

// ---- flush ----

#[derive(Deserialize)]
struct TablesQuery {
    cf: Option<String>,
}

async fn run_on_tables<F, Fut>(
    s: &ApiState,
    tables: Vec<Arc<TableSchema>>,
    f: F,
) -> Result<Vec<Value>, ApiError>
where
    F: Fn(Arc<TableSchema>) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<Value, String>> + 'static,
{
    let r = s
        .ctx
        .shards
        .submit_to_all(move |_| {
            let tables = tables.clone();
            let f = f.clone();
            async move {
                let mut out = Vec::new();
                for t in tables {
                    out.push(f(t).await?);
                }
                Ok::<_, String>(out)
            }
        })
        .await
        .map_err(ApiError::internal)?;
    let mut all = Vec::new();
    for shard in r {
        all.extend(shard.map_err(ApiError::internal)?);
    }
    Ok(all)
}

async fn flush_tables(s: &ApiState, tables: Vec<Arc<TableSchema>>) -> Result<usize, ApiError> {
    let n = tables.len();
    run_on_tables(s, tables, |t| async move {
        let db = amphora_replica::local().map_err(|e| e.to_string())?;
        db.storage().flush(t.id).await.map_err(|e| e.to_string())?;
        Ok(Value::Null)
    })
    .await?;
    Ok(n)
}

async fn flush_all(State(s): S) -> ApiResult {
    let tables: Vec<_> = schema(&s).tables().cloned().collect();
    let n = flush_tables(&s, tables).await?;
    Ok(Json(json!({ "flushed_tables": n })))
}

async fn flush_keyspace(
    State(s): S,
    Path(keyspace): Path<String>,
    Query(q): Query<TablesQuery>,
) -> ApiResult {
    let tables = resolve(&schema(&s), &keyspace, &list(&q.cf))?;
    let n = flush_tables(&s, tables).await?;
    Ok(Json(json!({ "flushed_tables": n })))
}

// ---- compaction ----

#[derive(Deserialize)]
struct CompactQuery {
    cf: Option<String>,
    split_output: Option<bool>,
}

async fn compact_all(State(s): S, Query(q): Query<CompactQuery>) -> ApiResult {
    if q.split_output == Some(true) {
        return Err(ApiError::unsupported("--split-output is not supported yet"));
    }
    let tables: Vec<_> = schema(&s).tables().cloned().collect();
    start_major(s, "*".into(), tables).await
}

async fn compact_keyspace(
    State(s): S,
    Path(keyspace): Path<String>,
    Query(q): Query<CompactQuery>,
) -> ApiResult {
    if q.split_output == Some(true) {
        return Err(ApiError::unsupported("--split-output is not supported yet"));
    }
    let tables = resolve(&schema(&s), &keyspace, &list(&q.cf))?;
    start_major(s, keyspace, tables).await
}

pub(super) fn update_task(s: &ApiState, id: &str, f: impl FnOnce(&mut TaskStatus)) {
    if let Ok(mut j) = s.jobs.lock()
        && let Some(t) = j.tasks.get_mut(id)
    {
        f(t);
    }
}

/// Starts a major compaction task of `tables` on every shard and returns its id.
async fn start_major(
    s: Arc<ApiState>,
    keyspace: String,
    tables: Vec<Arc<TableSchema>>,
) -> ApiResult {
    let before = gather(&s, tables.iter().map(|t| t.id).collect()).await?;
    let total: u64 = before
        .iter()
        .flat_map(|sh| sh.tables.iter())
        .filter_map(|(_, st, _)| st.as_ref().map(|st| st.sstable_bytes))
        .sum();
    let task = TaskStatus::running("major_compaction", keyspace, &tables, total, now_ms());
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
            .submit_to_all(move |shard| {
                let tables = tables.clone();
                let st = for_shards.clone();
                let tid = tid.clone();
                async move {
                    let db = amphora_replica::local().map_err(|e| e.to_string())?;
                    for t in tables {
                        let pre = db.storage().table_stats(t.id).unwrap_or_default();
                        db.storage()
                            .compact_major(t.id)
                            .await
                            .map_err(|e| format!("{}.{}: {e}", t.keyspace, t.name))?;
                        let post = db.storage().table_stats(t.id).unwrap_or_default();
                        update_task(&st, &tid, |task| {
                            task.progress_completed = (task.progress_completed + pre.sstable_bytes)
                                .min(task.progress_total)
                        });
                        if pre.sstable_count > 1
                            && let Ok(mut j) = st.jobs.lock()
                        {
                            {
                                j.record(CompactionRecord {
                                    id: uuid::Uuid::new_v4().to_string(),
                                    keyspace: t.keyspace.clone(),
                                    table: t.name.clone(),
                                    shard,
                                    compacted_at_ms: now_ms(),
                                    bytes_in: pre.sstable_bytes,
                                    bytes_out: post.sstable_bytes,
                                    sstables_in: pre.sstable_count,
                                    sstables_out: post.sstable_count,
                                });
                            }
                        }
                    }
                    Ok::<(), String>(())
                }
            })
            .await;
        let err = match r {
            Err(e) => Some(e.to_string()),
            Ok(v) => v.into_iter().find_map(Result::err),
        };
        if let Some(e) = &err {
            tracing::warn!(task = %task_id, error = %e, "api: major compaction failed");
        }
        update_task(&state, &task_id, |t| {
            t.end_time_ms = Some(now_ms());
            if err.is_none() {
                // Flushes during the task can change the input sizes measured at its start.
                t.progress_completed = t.progress_total;
            }
            t.state = if err.is_some() { "failed" } else { "done" }.into();
            t.error = err;
        });
    });
    Ok(Json(json!({ "task_id": id })))
}

async fn compactions(State(s): S) -> ApiResult {
    let running: Vec<TaskStatus> = s
        .jobs
        .lock()
        .map(|j| j.tasks.values().filter(|t| !t.is_done()).cloned().collect())
        .unwrap_or_default();
    Ok(Json(json!(running)))
}

async fn pending_tasks(State(s): S) -> ApiResult {
    let shards = gather(&s, Vec::new()).await?;
    let per: Vec<Value> = shards
        .iter()
        .map(|x| json!({ "shard": x.shard, "pending": x.metrics.pending_compactions }))
        .collect();
    Ok(Json(json!({
        "pending_tasks": shards.iter().map(|x| x.metrics.pending_compactions).sum::<u64>(),
        "completed_tasks": shards.iter().map(|x| x.metrics.compactions).sum::<u64>(),
        "bytes_compacted_in": shards.iter().map(|x| x.metrics.compacted_bytes_in).sum::<u64>(),
        "bytes_compacted_out": shards.iter().map(|x| x.metrics.compacted_bytes_out).sum::<u64>(),
        "shards": per,
    })))
}

async fn compaction_history(State(s): S) -> ApiResult {
    let h: Vec<CompactionRecord> = s
        .jobs
        .lock()
        .map(|j| j.history.iter().rev().cloned().collect())
        .unwrap_or_default();
    Ok(Json(json!(h)))
}

async fn list_tasks(State(s): S, Path(module): Path<String>) -> ApiResult {
    if module != "compaction" {
        return Err(ApiError::not_found(format!("unknown task module {module}")));
    }
    let all: Vec<TaskStatus> = s
        .jobs
        .lock()
        .map(|j| j.tasks.values().cloned().collect())
        .unwrap_or_default();
    Ok(Json(json!(all)))
}

fn task(s: &ApiState, id: &str) -> Result<TaskStatus, ApiError> {
    s.jobs
        .lock()
        .ok()
        .and_then(|j| j.tasks.get(id).cloned())
        .ok_or_else(|| ApiError::not_found(format!("unknown task {id}")))
}

async fn task_status(State(s): S, Path(id): Path<String>) -> ApiResult {
    Ok(Json(json!(task(&s, &id)?)))
}

#[derive(Deserialize)]
struct WaitQuery {
    /// Seconds; default and maximum 3600.
    timeout: Option<u64>,
}

/// Polls the task until it ends; 408 with its status if `timeout` passes first.
async fn wait_task(State(s): S, Path(id): Path<String>, Query(q): Query<WaitQuery>) -> Response {
    let deadline =
        std::time::Instant::now() + Duration::from_secs(q.timeout.unwrap_or(3600).min(3600));
    loop {
        let t = match task(&s, &id) {
            Ok(t) => t,
            Err(e) => return e.into_response(),
        };
        if t.is_done() {
            return Json(json!(t)).into_response();
        }
        if std::time::Instant::now() >= deadline {
            return (StatusCode::REQUEST_TIMEOUT, Json(json!(t))).into_response();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- snapshots ----

#[derive(Deserialize)]
struct SnapshotQuery {
    tag: Option<String>,
    /// Keyspaces (comma-separated); all user keyspaces when absent.
    kn: Option<String>,
    /// Tables of the one keyspace in `kn`.
    cf: Option<String>,
    skip_flush: Option<bool>,
}

fn snapshot_tables(s: &ApiState, q: &SnapshotQuery) -> Result<Vec<Arc<TableSchema>>, ApiError> {
    let schema = schema(s);
    let kns = list(&q.kn);
    let cfs = list(&q.cf);
    if !cfs.is_empty() && kns.len() != 1 {
        return Err(ApiError::bad_request(
            "tables (cf) can be given for exactly one keyspace (kn)",
        ));
    }
    if kns.is_empty() {
        return Ok(schema.tables().cloned().collect());
    }
    let mut out = Vec::new();
    for k in &kns {
        out.extend(resolve(&schema, k, &cfs)?);
    }
    Ok(out)
}

async fn gather_snapshots(
    s: &ApiState,
    tables: Vec<Arc<TableSchema>>,
) -> Result<Vec<SnapshotInfo>, ApiError> {
    let per = run_on_tables(s, tables, |t| async move {
        let db = amphora_replica::local().map_err(|e| e.to_string())?;
        let l = db.list_snapshots(&t).map_err(|e| e.to_string())?;
        Ok(json!(
            l.into_iter()
                .map(|x| (
                    x.tag,
                    x.keyspace,
                    x.table,
                    x.files,
                    x.size_bytes,
                    x.true_size_bytes
                ))
                .collect::<Vec<_>>()
        ))
    })
    .await?;
    // Sum the shards' parts of each (tag, keyspace, table).
    let mut merged: BTreeMap<(String, String, String), SnapshotInfo> = BTreeMap::new();
    for v in per {
        let rows: Vec<(String, String, String, u64, u64, u64)> =
            serde_json::from_value(v).map_err(ApiError::internal)?;
        for (tag, ks, cf, files, size, true_size) in rows {
            let e = merged
                .entry((tag.clone(), ks.clone(), cf.clone()))
                .or_insert(SnapshotInfo {
                    tag,
                    keyspace: ks,
                    table: cf,
                    files: 0,
                    size_bytes: 0,
                    true_size_bytes: 0,
                });
            e.files += files;
            e.size_bytes += size;
            e.true_size_bytes += true_size;
        }
    }
    Ok(merged.into_values().collect())
}

async fn list_snapshots(State(s): S) -> ApiResult {
    let tables: Vec<_> = schema(&s).tables().cloned().collect();
    let snaps = gather_snapshots(&s, tables).await?;
    let out: Vec<Value> = snaps
        .iter()
        .map(|x| {
            json!({
                "tag": x.tag, "keyspace": x.keyspace, "table": x.table, "files": x.files,
                "size_bytes": x.size_bytes, "true_size_bytes": x.true_size_bytes,
            })
        })
        .collect();
    Ok(Json(json!(out)))
}

async fn take_snapshot(State(s): S, Query(q): Query<SnapshotQuery>) -> ApiResult {
    let tag = q.tag.clone().unwrap_or_else(|| now_ms().to_string());
    if !valid_tag(&tag) {
        return Err(ApiError::bad_request(format!(
            "invalid snapshot tag '{tag}' (letters, digits, '-', '_', '.')"
        )));
    }
    let tables = snapshot_tables(&s, &q)?;
    let existing = gather_snapshots(&s, tables.clone()).await?;
    if existing.iter().any(|x| x.tag == tag) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("Snapshot {tag} already exists."),
        ));
    }
    let skip_flush = q.skip_flush.unwrap_or(false);
    let tag_for = tag.clone();
    let files = run_on_tables(&s, tables.clone(), move |t| {
        let tag = tag_for.clone();
        async move {
            let db = amphora_replica::local().map_err(|e| e.to_string())?;
            if !skip_flush {
                db.storage().flush(t.id).await.map_err(|e| e.to_string())?;
            }
            // No await between listing the live SSTables and linking them.
            let n = db.snapshot_table(&t, &tag).map_err(|e| e.to_string())?;
            Ok(json!(n))
        }
    })
    .await?;
    let files: u64 = files.iter().filter_map(Value::as_u64).sum();
    Ok(Json(
        json!({ "tag": tag, "tables": tables.len(), "files": files }),
    ))
}

async fn clear_snapshot(State(s): S, Query(q): Query<SnapshotQuery>) -> ApiResult {
    if let Some(tag) = &q.tag
        && !valid_tag(tag)
    {
        return Err(ApiError::bad_request(format!(
            "invalid snapshot tag '{tag}'"
        )));
    }
    let tables = snapshot_tables(&s, &q)?;
    let tag = q.tag.clone();
    let removed = run_on_tables(&s, tables, move |t| {
        let tag = tag.clone();
        async move {
            let db = amphora_replica::local().map_err(|e| e.to_string())?;
            let n = db
                .clear_snapshot(&t, tag.as_deref())
                .map_err(|e| e.to_string())?;
            Ok(json!(n))
        }
    })
    .await?;
    let removed: u64 = removed.iter().filter_map(Value::as_u64).sum();
    Ok(Json(json!({ "removed": removed })))
}
