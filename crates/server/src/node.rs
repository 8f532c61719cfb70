//! A node: starts the shards (storage replay, coordinator), the CQL listeners and the
//! metrics endpoint, in that order, and stops them in reverse.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use amphora_coordinator::schema_store::SchemaStore;
use amphora_coordinator::{NodeInfo, NodeShared};
use amphora_storage::{StorageConfig, SyncMode};
use serde::{Deserialize, Serialize};

use crate::config::{CommitlogSync, NodeConfig};
use crate::transport::{self, Authenticator, TransportConfig};

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("shard {shard} failed to start: {message}")]
    Shard { shard: u32, message: String },
    #[error("starting the CQL transport: {0}")]
    Transport(std::io::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Rt(#[from] amphora_rt::RtError),
}

/// Facts about the node that outlive restarts (`<data_dir>/node.json`).
#[derive(Debug, Serialize, Deserialize)]
struct NodeIdentity {
    host_id: String,
    /// Data is partitioned by shard; a different shard count needs resharding (not built).
    smp: u32,
}

pub struct Node {
    runtime: Option<amphora_rt::Runtime>,
    listeners: Arc<crate::api::NativeTransport>,
    metrics: Option<crate::metrics::MetricsHandle>,
    api: Option<crate::api::ApiHandle>,
    shared: Arc<NodeShared>,
    pub native_addr: SocketAddr,
    pub shard_aware_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub api_addr: Option<SocketAddr>,
    pub nr_shards: u32,
    pub startup_ms: u128,
}

/// An experiment knob given in MB (`NAME=N`), as bytes; `None` when unset or not a number.
fn env_mb(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|mb| mb << 20)
}

fn free_port(ip: std::net::IpAddr, port: u16) -> Result<u16, NodeError> {
    if port != 0 {
        return Ok(port);
    }
    let addr = SocketAddr::new(ip, 0);
    let l = TcpListener::bind(addr).map_err(|source| NodeError::Listen { addr, source })?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|source| NodeError::Listen { addr, source })
}

fn load_identity(dir: &Path, smp: u32) -> Result<[u8; 16], NodeError> {
    let path = dir.join("node.json");
    let io = |source| NodeError::DataDir {
        path: path.display().to_string(),
        source,
    };
    match std::fs::read(&path) {
        Ok(b) => {
            let id: NodeIdentity = serde_json::from_slice(&b)
                .map_err(|e| NodeError::Invalid(format!("{} is corrupt: {e}", path.display())))?;
            if id.smp != smp {
                return Err(NodeError::Invalid(format!(
                    "this data directory was written with --smp {} but the node was started with --smp {smp}; resharding is not supported yet",
                    id.smp
                )));
            }
            let u = uuid::Uuid::parse_str(&id.host_id).map_err(|e| {
                NodeError::Invalid(format!("bad host_id in {}: {e}", path.display()))
            })?;
            Ok(*u.as_bytes())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let u = uuid::Uuid::new_v4();
            let id = NodeIdentity {
                host_id: u.to_string(),
                smp,
            };
            let json =
                serde_json::to_vec_pretty(&id).map_err(|e| NodeError::Invalid(e.to_string()))?;
            let tmp = dir.join("node.json.tmp");
            std::fs::write(&tmp, json).map_err(io)?;
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(io)?;
            std::fs::rename(&tmp, &path).map_err(io)?;
            Ok(*u.as_bytes())
        }
        Err(e) => Err(io(e)),
    }
}

impl Node {
    pub async fn start(cfg: NodeConfig) -> Result<Node, NodeError> {
        let started = Instant::now();
        amphora_trace::set_slow_query_threshold(std::time::Duration::from_millis(
            cfg.slow_query_log_timeout_ms,
        ));
        amphora_coordinator::guardrails::set_batch_thresholds(
            cfg.batch_size_warn_threshold_bytes,
            cfg.batch_size_fail_threshold_bytes,
            cfg.unlogged_batch_across_partitions_warn_threshold,
        );
        let nr_shards = cfg.shards();
        std::fs::create_dir_all(&cfg.data_dir).map_err(|source| NodeError::DataDir {
            path: cfg.data_dir.display().to_string(),
            source,
        })?;
        let host_id = load_identity(&cfg.data_dir, nr_shards)?;
        // The schema first: the shards' storage opens with its tables.
        let (schema_store, schema) = SchemaStore::open(&cfg.data_dir)
            .await
            .map_err(|e| NodeError::Invalid(e.to_string()))?;
        let schema = Arc::new(schema);
        let native_port = free_port(cfg.listen_address, cfg.native_port)?;
        let shard_aware_port = free_port(cfg.listen_address, cfg.shard_aware_port)?;
        let info = NodeInfo {
            host_id,
            nr_shards,
            ignore_msb: 12,
            shard_aware_port,
            native_port,
            listen_address: cfg.listen_address,
            cluster_name: cfg.cluster_name.clone(),
        };
        // AMPHORA_MEMTABLE_MB: the memtables' budget per shard, in place of a quarter of its
        // memory (an experiment knob, not a cassandra.yaml key; the row cache's default is
        // a multiple of it, so set AMPHORA_ROW_CACHE_MB with it).
        let memtable_budget = env_mb("AMPHORA_MEMTABLE_MB")
            .unwrap_or(cfg.memory() / u64::from(nr_shards) / 4)
            .max(16 << 20);
        let sync = match cfg.commitlog_sync {
            CommitlogSync::Periodic => SyncMode::Periodic {
                period_ms: cfg.commitlog_sync_period_ms,
            },
            CommitlogSync::Batch => SyncMode::Batch { window_ms: 0 },
            CommitlogSync::Group => SyncMode::Group {
                window_ms: cfg.commitlog_sync_group_window_ms,
            },
        };
        let (events, _) = tokio::sync::broadcast::channel(1024);
        let (init_tx, init_rx) = std::sync::mpsc::channel::<(u32, Result<(), String>)>();
        let data_dir = cfg.data_dir.clone();
        let segment = cfg.commitlog_segment_size_bytes;
        let total = cfg.commitlog_total_space_bytes;
        let failure_policy = cfg.commit_failure_policy;
        // Experiments only (not a cassandra.yaml key): the compaction thread's
        // nice value, default amphora_storage::DEFAULT_BACKGROUND_NICE.
        // "idle" is SCHED_IDLE (`amphora_storage::config::SCHED_IDLE_NICE`).
        let nice_env = |name: &str| {
            std::env::var(name).ok().and_then(|v| match v.trim() {
                "idle" => Some(amphora_storage::config::SCHED_IDLE_NICE),
                v => v.parse::<i32>().ok(),
            })
        };
        let background_nice = nice_env("AMPHORA_BACKGROUND_NICE");
        let flush_nice = nice_env("AMPHORA_FLUSH_NICE");
        let micros_env = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map(std::time::Duration::from_micros)
        };
        // AMPHORA_BACKGROUND_GATE=1: `StorageConfig::background_gate` (with
        // AMPHORA_FLUSH_NICE / AMPHORA_BACKGROUND_NICE=idle as measured).
        let background_gate = std::env::var("AMPHORA_BACKGROUND_GATE").is_ok_and(|v| v == "1");
        let grant_slice = micros_env("AMPHORA_GRANT_SLICE_US");
        let grant_every = micros_env("AMPHORA_GRANT_EVERY_US");
        // AMPHORA_COMPACTION_GRANT_AMP: `StorageConfig::compaction_grant_amplification`
        // (0: off), an experiment knob, not a cassandra.yaml key.
        let f64_env = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        let grant_amp = f64_env("AMPHORA_COMPACTION_GRANT_AMP");
        // AMPHORA_COMPACTION_GRANT_PENDING: `StorageConfig::compaction_grant_pending` (0:
        // off), an experiment knob, not a cassandra.yaml key.
        let grant_pending = std::env::var("AMPHORA_COMPACTION_GRANT_PENDING")
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        // AMPHORA_COMPACTION_GRANT_BACKLOG(_SHARE): `StorageConfig::compaction_grant_backlog`
        // and its share, experiment knobs, not cassandra.yaml keys.
        let grant_backlog = f64_env("AMPHORA_COMPACTION_GRANT_BACKLOG");
        let grant_backlog_share = f64_env("AMPHORA_COMPACTION_GRANT_BACKLOG_SHARE");
        // AMPHORA_LARGE_COMPACTION_MB: `StorageConfig::large_compaction_bytes` (0: one
        // compaction thread; unset: twice the memtable budget), an experiment knob, not a
        // cassandra.yaml key.
        let large_compaction_bytes = env_mb("AMPHORA_LARGE_COMPACTION_MB");
        // AMPHORA_ROW_CACHE_MB: the row cache's capacity per shard (0: none), in place of its
        // share of the memory (`StorageConfig::row_cache_bytes`; an experiment knob, not a
        // cassandra.yaml key).
        let row_cache_bytes = env_mb("AMPHORA_ROW_CACHE_MB");
        let flush_pace_max = std::env::var("AMPHORA_FLUSH_PACE_MAX_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(std::time::Duration::from_millis);
        // AMPHORA_FLUSH_ACTIVE_SHARE / AMPHORA_FLUSH_PACE_SHARE:
        // `StorageConfig::flush_active_share` / `flush_pace_share` (experiment knobs, not
        // cassandra.yaml keys).
        let share_env = |name: &str| f64_env(name).filter(|v| *v > 0.0);
        let flush_active_share = share_env("AMPHORA_FLUSH_ACTIVE_SHARE");
        let flush_pace_share = share_env("AMPHORA_FLUSH_PACE_SHARE");
        // Flushes write their Data.db with O_DIRECT with AMPHORA_FLUSH_DIRECT=1
        // (`StorageConfig::flush_direct`): an experiment knob, not a cassandra.yaml key.
        let flush_direct = std::env::var("AMPHORA_FLUSH_DIRECT").is_ok_and(|v| v == "1");
        // AMPHORA_FLUSH_DIRECT_BEHIND: `StorageConfig::flush_direct_behind` (0: off), an
        // experiment knob, not a cassandra.yaml key.
        let flush_direct_behind = std::env::var("AMPHORA_FLUSH_DIRECT_BEHIND")
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        // Compaction outputs are read into the page cache with AMPHORA_WARM_OUTPUTS=1
        // (`StorageConfig::warm_compaction_outputs`): an experiment knob.
        let warm_outputs = std::env::var("AMPHORA_WARM_OUTPUTS").is_ok_and(|v| v == "1");
        // Commitlog segments written with pwrite instead of through a mapping with
        // AMPHORA_COMMITLOG_MMAP=0 (`StorageConfig::commitlog_mmap`, on by default): an
        // experiment knob, not a cassandra.yaml key.
        let commitlog_mmap = std::env::var("AMPHORA_COMMITLOG_MMAP").map_or(true, |v| v != "0");
        // Spare data files for flushes (`StorageConfig::spare_data_bytes`; 0 keeps none):
        // an experiment knob, not a cassandra.yaml key.
        let spare_data_bytes = env_mb("AMPHORA_SPARE_DATA_MB");
        // Shard threads keep their freed pages up to the memtable budget (what a memtable
        // cycle reuses) unless AMPHORA_SHARD_KEEP_PAGES=0; AMPHORA_SHARD_KEPT_PAGES_CAP_MB
        // overrides the cap (experiment knobs, not cassandra.yaml keys).
        let kept_pages_cap = std::env::var("AMPHORA_SHARD_KEEP_PAGES")
            .map_or(true, |v| v != "0")
            .then(|| env_mb("AMPHORA_SHARD_KEPT_PAGES_CAP_MB").unwrap_or(memtable_budget));
        // Kept pages also go back to the OS while the allocator's resident memory is above
        // the node's memory plus an eighth (its budgets take fifteen sixteenths of it; the
        // rest and the eighth are for what they do not count: indexes, filters, slack in
        // the allocator's slabs). AMPHORA_RESIDENT_LIMIT_MB overrides it, 0 for none (an
        // experiment knob, not a cassandra.yaml key).
        let resident_limit = match std::env::var("AMPHORA_RESIDENT_LIMIT_MB")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            Some(0) => None,
            Some(mb) => Some(mb << 20),
            None => Some(cfg.memory() + cfg.memory() / 8),
        };
        // AMPHORA_SHARD_PREFAULT=0: no pages faulted in ahead of the shard (an experiment
        // knob, not a cassandra.yaml key).
        let prefault = std::env::var("AMPHORA_SHARD_PREFAULT").map_or(true, |v| v != "0");
        let cache_update_pause_us = std::env::var("AMPHORA_CACHE_UPDATE_PAUSE_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        let mut tables: Vec<_> = schema.tables().cloned().collect();
        // The batchlog's hidden table exists on every node, outside the schema.
        tables.push(amphora_coordinator::batchlog::table());
        let runtime = amphora_rt::start(
            amphora_rt::RtConfig {
                nr_shards,
                pin: cfg.pin_shards,
            },
            move |shard| {
                let init_tx = init_tx.clone();
                let data_dir = data_dir.clone();
                let tables = tables.clone();
                async move {
                    // This shard's freed memory stays resident, up to
                    // `kept_pages_cap_bytes`: see `AllocatorHooks::keep_pages_on_this_thread`.
                    if kept_pages_cap.is_some()
                        && let Some(hooks) = amphora_storage::alloc::hooks()
                    {
                        (hooks.keep_pages_on_this_thread)();
                    }
                    let mut scfg =
                        StorageConfig::new(data_dir.join(format!("shard-{shard}")), shard);
                    scfg.commitlog_sync = sync;
                    scfg.commitlog_segment_size_bytes = segment;
                    scfg.commitlog_total_space_bytes = total;
                    scfg.commit_failure_policy = failure_policy;
                    if let Some(n) = background_nice {
                        scfg.background_nice = n;
                    }
                    if let Some(n) = flush_nice {
                        scfg.flush_nice = n;
                    }
                    scfg.background_gate = background_gate;
                    if row_cache_bytes.is_some() {
                        scfg.row_cache_bytes = row_cache_bytes;
                    }
                    if let Some(d) = grant_slice {
                        scfg.grant_slice = d;
                    }
                    if let Some(d) = grant_every {
                        scfg.grant_every = d;
                    }
                    if let Some(a) = grant_amp {
                        scfg.compaction_grant_amplification = a;
                    }
                    if let Some(n) = grant_pending {
                        scfg.compaction_grant_pending = n;
                    }
                    if let Some(b) = large_compaction_bytes {
                        scfg.large_compaction_bytes = Some(b);
                    }
                    if let Some(v) = grant_backlog {
                        scfg.compaction_grant_backlog = v;
                    }
                    if let Some(v) = grant_backlog_share {
                        scfg.compaction_grant_backlog_share = v.min(1.0);
                    }
                    if let Some(d) = flush_pace_max {
                        scfg.flush_pace_max = d;
                    }
                    if let Some(v) = flush_active_share {
                        scfg.flush_active_share = v;
                    }
                    if let Some(v) = flush_pace_share {
                        scfg.flush_pace_share = v;
                    }
                    scfg.flush_direct = flush_direct;
                    if let Some(n) = flush_direct_behind {
                        scfg.flush_direct_behind = n;
                    }
                    scfg.warm_compaction_outputs = warm_outputs;
                    scfg.commitlog_mmap = commitlog_mmap;
                    if spare_data_bytes.is_some() {
                        scfg.spare_data_bytes = spare_data_bytes;
                    }
                    if let Some(us) = cache_update_pause_us {
                        scfg.cache_update_pause = std::time::Duration::from_micros(us);
                    }
                    scfg.memtable_budget_bytes = memtable_budget;
                    scfg.kept_pages_cap_bytes = kept_pages_cap;
                    scfg.resident_limit_bytes = resident_limit;
                    scfg.prefault = prefault;
                    let r = amphora_replica::init_shard(scfg, tables, u128::from_be_bytes(host_id))
                        .map(|_| ())
                        .map_err(|e| e.to_string());
                    let _ = init_tx.send((shard, r));
                }
            },
        )?;
        let shared = Arc::new(NodeShared {
            info,
            schema_store,
            schema: Mutex::new(schema),
            prepared: Mutex::new(Default::default()),
            events,
            shards: runtime.shards().clone(),
        });
        for _ in 0..nr_shards {
            match init_rx.recv() {
                Ok((_, Ok(()))) => {}
                Ok((shard, Err(message))) => {
                    runtime.shards().close();
                    return Err(NodeError::Shard { shard, message });
                }
                Err(_) => {
                    return Err(NodeError::Invalid(
                        "a shard thread exited during start".into(),
                    ));
                }
            }
        }
        // Storage is open on every shard: now each shard gets its coordinator.
        let for_shards = shared.clone();
        runtime
            .shards()
            .submit_to_all(move |_| {
                let shared = for_shards.clone();
                async move {
                    amphora_coordinator::install(shared);
                }
            })
            .await?;
        // A crash in the middle of a logged batch (or of a write with index/view updates)
        // left batchlog entries: apply them before clients connect.
        runtime
            .shards()
            .submit_to(0, amphora_coordinator::batchlog::replay_on_start)
            .await?
            .map_err(|e| NodeError::Invalid(format!("batchlog replay failed: {e}")))?;
        let tcfg = TransportConfig {
            listen_address: cfg.listen_address,
            native_port,
            shard_aware_port,
            max_frame_size: cfg.max_frame_size_bytes,
            authenticator: if cfg.password_authenticator {
                Authenticator::Password
            } else {
                Authenticator::AllowAll
            },
            ..TransportConfig::default()
        };
        let listeners = transport::start_listeners(tcfg.clone(), runtime.shards().clone())
            .map_err(NodeError::Transport)?;
        let (native_addr, shard_aware_addr) =
            (listeners.native_addr(), listeners.shard_aware_addr());
        let listeners = Arc::new(crate::api::NativeTransport::new(
            tcfg,
            runtime.shards().clone(),
            listeners,
        ));
        let metrics = match cfg.prometheus_port {
            Some(p) => {
                let addr = SocketAddr::new(cfg.prometheus_address, p);
                Some(
                    crate::metrics::start(addr, runtime.shards().clone())
                        .map_err(|source| NodeError::Listen { addr, source })?,
                )
            }
            None => None,
        };
        // REST admin API (nodetool). A busy port is logged, not fatal, so tests that run
        // several in-process nodes on the default port still start.
        let api_addr = SocketAddr::new(cfg.api_address, cfg.api_port);
        let api_ctx = crate::api::ApiContext {
            shared: shared.clone(),
            shards: runtime.shards().clone(),
            native: listeners.clone(),
            data_dir: cfg.data_dir.clone(),
        };
        let api = crate::api::start(api_addr, api_ctx)
            .inspect_err(|e| tracing::error!(addr = %api_addr, error = %e, "REST API not started"))
            .ok();
        let startup_ms = started.elapsed().as_millis();
        tracing::info!(shards = nr_shards, native = %native_addr, startup_ms, "node started");
        Ok(Node {
            native_addr,
            shard_aware_addr,
            metrics_addr: metrics.as_ref().map(|m| m.local_addr()),
            api_addr: api.as_ref().map(|a| a.local_addr()),
            listeners,
            metrics,
            api,
            runtime: Some(runtime),
            shared,
            nr_shards,
            startup_ms,
        })
    }

    /// Stops clients, flushes memtables, closes commitlogs, stops the shards.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        if let Some(mut a) = self.api.take() {
            a.stop();
        }
        self.listeners.stop().await;
        if let Some(m) = self.metrics.take() {
            m.stop();
        }
        let Some(rt) = self.runtime.take() else {
            return Ok(());
        };
        let results = rt
            .shards()
            .submit_to_all(|_| async {
                amphora_coordinator::uninstall();
                match amphora_replica::uninstall() {
                    Some(db) => db.shutdown().await.map_err(|e| e.to_string()),
                    None => Ok(()),
                }
            })
            .await;
        rt.shards().close();
        let joined = tokio::task::spawn_blocking(move || rt.join()).await;
        let _ = joined;
        let mut first_err = None;
        if let Err(e) = self.shared.schema_store.close().await {
            tracing::error!(error = %e, "schema store shutdown failed");
            first_err = Some(NodeError::Invalid(e.to_string()));
        }
        for (shard, r) in results?.into_iter().enumerate() {
            if let Err(message) = r {
                tracing::error!(shard, %message, "shard shutdown failed");
                first_err.get_or_insert(NodeError::Shard {
                    shard: shard as u32,
                    message,
                });
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
