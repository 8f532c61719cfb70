//! The CQL listeners: the native port (connections spread round-robin over shards) and the
//! shard-aware port (connection goes to shard `client_port % nr_shards`, as ScyllaDB does).
//!
//! Both accept loops run on shard 0. An accepted socket crosses to its shard as a
//! `std::net::TcpStream` and is registered with that shard's event loop there.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use amphora_rt::{RtError, ShardId, Shards};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::TransportConfig;
use super::backend::Backend;
use super::connection::{close_local_connections, serve_connection_with};

/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

type Done = std::pin::Pin<Box<dyn Future<Output = Result<(), RtError>> + Send>>;

/// The running listeners. Dropping it closes the listening sockets (not the connections).
pub struct ListenersHandle {
    native_addr: SocketAddr,
    shard_aware_addr: SocketAddr,
    stop: watch::Sender<bool>,
    shards: Shards,
    done: Option<Done>,
}

impl ListenersHandle {
    /// The bound native-port address (the real port when configured as 0).
    pub fn native_addr(&self) -> SocketAddr {
        self.native_addr
    }

    /// The bound shard-aware-port address.
    pub fn shard_aware_addr(&self) -> SocketAddr {
        self.shard_aware_addr
    }

    /// Closes the listening sockets now; with `close_connections`, also asks every open
    /// connection on every shard to finish its in-flight requests and close. The returned
    /// future resolves once the sockets are closed and the connections were asked; dropping
    /// it does not cancel the stop.
    pub fn stop(&mut self, close_connections: bool) -> impl Future<Output = ()> + Send + use<> {
        let _ = self.stop.send(true);
        let done = self.done.take();
        let shards = close_connections.then(|| self.shards.clone());
        async move {
            if let Some(d) = done {
                let _ = d.await;
            }
            if let Some(shards) = shards {
                let _ = shards
                    .submit_to_all(|_| async { close_local_connections() })
                    .await;
            }
        }
    }
}

impl Drop for ListenersHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Binds the native and shard-aware ports of `cfg` and serves them with each shard's
/// coordinator.
pub fn start_listeners(cfg: TransportConfig, shards: Shards) -> io::Result<ListenersHandle> {
    start_listeners_with(cfg, shards, super::coordinator_backend::local_backend)
}

/// [`start_listeners`] with the backend `backend()` returns on the connection's shard.
pub fn start_listeners_with<B: Backend>(
    mut cfg: TransportConfig,
    shards: Shards,
    backend: fn() -> Rc<B>,
) -> io::Result<ListenersHandle> {
    let native = bind(SocketAddr::new(cfg.listen_address, cfg.native_port))?;
    let aware = bind(SocketAddr::new(cfg.listen_address, cfg.shard_aware_port))?;
    let native_addr = native.local_addr()?;
    let shard_aware_addr = aware.local_addr()?;
    cfg.native_port = native_addr.port();
    cfg.shard_aware_port = shard_aware_addr.port();
    let (stop_tx, stop_rx) = watch::channel(false);
    let cfg = Arc::new(cfg);
    let for_loop = shards.clone();
    let done = shards.submit_to(0, move || {
        accept_loop(native, aware, for_loop, cfg, backend, stop_rx)
    });
    tracing::info!(%native_addr, %shard_aware_addr, "transport: listening for CQL clients");
    Ok(ListenersHandle {
        native_addr,
        shard_aware_addr,
        stop: stop_tx,
        shards,
        done: Some(Box::pin(done)),
    })
}

fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

async fn accept_loop<B: Backend>(
    native: std::net::TcpListener,
    aware: std::net::TcpListener,
    shards: Shards,
    cfg: Arc<TransportConfig>,
    backend: fn() -> Rc<B>,
    mut stop: watch::Receiver<bool>,
) {
    let (native, aware) = match (TcpListener::from_std(native), TcpListener::from_std(aware)) {
        (Ok(n), Ok(a)) => (n, a),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "transport: cannot register the listeners");
            return;
        }
    };
    let nr_shards = shards.nr_shards().max(1);
    let mut next: ShardId = 0;
    loop {
        let (accepted, shard_aware) = tokio::select! {
            r = native.accept() => (r, false),
            r = aware.accept() => (r, true),
            _ = stop.changed() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                let shard = if shard_aware {
                    ShardId::from(peer.port()) % nr_shards
                } else {
                    let s = next;
                    next = (next + 1) % nr_shards;
                    s
                };
                hand_off(stream, peer, shard, &shards, &cfg, backend);
            }
            Err(e) => {
                tracing::warn!(error = %e, "transport: accept failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
            }
        }
    }
    tracing::info!("transport: listeners closed");
}

fn hand_off<B: Backend>(
    stream: TcpStream,
    peer: SocketAddr,
    shard: ShardId,
    shards: &Shards,
    cfg: &Arc<TransportConfig>,
    backend: fn() -> Rc<B>,
) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer, error = %e, "transport: cannot set TCP_NODELAY");
    }
    let std_stream = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "transport: cannot detach an accepted socket");
            return;
        }
    };
    let cfg = cfg.clone();
    // The connection runs on its shard until it closes; nobody waits for it here.
    let running = shards.submit_to(shard, move || async move {
        match TcpStream::from_std(std_stream) {
            Ok(s) => serve_connection_with(s, shard, Rc::new((*cfg).clone()), backend()).await,
            Err(e) => tracing::warn!(%peer, error = %e, "transport: cannot register a socket"),
        }
    });
    drop(running);
}
