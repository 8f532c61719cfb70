//! The REST admin API (ScyllaDB-style paths on `api_address:api_port`, default
//! 127.0.0.1:10000), which `amphora nodetool` talks to. Endpoints: docs/dev/rest-api.md and
//! docs/dev/rest-api.openapi.yaml.
//!
//! It runs on its own small thread (a tokio `current_thread` runtime with axum), never on
//! a shard: an admin request only sends messages to the shards (`submit_to_all`) and
//! gathers their answers, so the shards' data stays lock-free.

mod jobs;
mod maintenance;
mod routes;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use amphora_coordinator::NodeShared;
use amphora_rt::Shards;
use tokio::sync::oneshot;

use crate::transport::{self, ListenersHandle, TransportConfig};

pub use jobs::{CompactionRecord, TaskStatus};

/// The CQL listeners, stoppable and restartable (`nodetool disablebinary/enablebinary`,
/// `drain`). Restarting binds the same ports as the first start.
pub struct NativeTransport {
    cfg: TransportConfig,
    shards: Shards,
    handle: Mutex<Option<ListenersHandle>>,
}

impl NativeTransport {
    pub fn new(cfg: TransportConfig, shards: Shards, running: ListenersHandle) -> Self {
        let mut cfg = cfg;
        cfg.native_port = running.native_addr().port();
        cfg.shard_aware_port = running.shard_aware_addr().port();
        NativeTransport {
            cfg,
            shards,
            handle: Mutex::new(Some(running)),
        }
    }

    pub fn is_running(&self) -> bool {
        self.handle.lock().map(|h| h.is_some()).unwrap_or(false)
    }

    /// Starts the listeners again (no-op when running).
    pub fn start(&self) -> io::Result<()> {
        let mut h = self
            .handle
            .lock()
            .map_err(|_| io::Error::other("native transport lock poisoned"))?;
        if h.is_none() {
            *h = Some(transport::start_listeners(
                self.cfg.clone(),
                self.shards.clone(),
            )?);
        }
        Ok(())
    }

    /// Closes the listeners and asks open connections to finish and close.
    pub async fn stop(&self) {
        let h = self.handle.lock().ok().and_then(|mut h| h.take());
        if let Some(mut h) = h {
            h.stop(true).await;
        }
    }
}

/// What the node hands the API at start.
pub struct ApiContext {
    pub shared: Arc<NodeShared>,
    pub shards: Shards,
    pub native: Arc<NativeTransport>,
    pub data_dir: PathBuf,
}

/// `NORMAL`, `DRAINING`, `DRAINED` (nodetool info / netstats "Mode").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationMode {
    Normal,
    Draining,
    Drained,
}

impl OperationMode {
    pub fn as_str(self) -> &'static str {
        match self {
            OperationMode::Normal => "NORMAL",
            OperationMode::Draining => "DRAINING",
            OperationMode::Drained => "DRAINED",
        }
    }
}

pub(crate) struct ApiState {
    ctx: ApiContext,
    started_at: Instant,
    started_wall: SystemTime,
    mode: Mutex<OperationMode>,
    jobs: Mutex<jobs::Jobs>,
}

/// The running API server.
pub struct ApiHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl ApiHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting requests (requests in progress finish on the API thread).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl Drop for ApiHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Binds `addr` now (errors are returned here) and serves the API on a new thread.
pub fn start(addr: SocketAddr, ctx: ApiContext) -> io::Result<ApiHandle> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let state = Arc::new(ApiState {
        ctx,
        started_at: Instant::now(),
        started_wall: SystemTime::now(),
        mode: Mutex::new(OperationMode::Normal),
        jobs: Mutex::new(jobs::Jobs::default()),
    });
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("rest-api".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "api: cannot register the listener");
                        return;
                    }
                };
                let app = routes::router(state);
                let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                    let _ = stop_rx.await;
                });
                if let Err(e) = served.await {
                    tracing::error!(error = %e, "api: server failed");
                }
            });
        })?;
    tracing::info!(addr = %bound, "api: REST admin API listening");
    Ok(ApiHandle {
        addr: bound,
        stop: Some(stop_tx),
    })
}
