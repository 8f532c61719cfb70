//! amphora-rt: the shard-per-core runtime façade.
//!
//! Owns: the shard threads (one OS thread per shard, pinned to a core when possible, each
//! running a tokio `current_thread` runtime with a `LocalSet`), and cross-shard calls by
//! message passing (`Shards::submit_to`). Nothing here knows about CQL or storage.
//!
//! Must never depend on: any other amphora crate.
//!
//! Key types: [`Shards`] (handle to all shards, cheap to clone and `Send`), [`ShardId`],
//! [`current_shard`].
//!
//! Design: a shard never shares mutable state with another. Work for shard B is sent to B's
//! inbox as a boxed `FnOnce` that B runs on its own event loop; the caller awaits a oneshot
//! with the result. Shard-local state lives in thread-locals owned by the crates above
//! (e.g. the replica's per-shard database), so the hot path takes no locks.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

pub type ShardId = u32;

type Task = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// A message in a shard's inbox.
enum Msg {
    Run(Task),
    /// Ends the shard's loop once the messages queued before it were started.
    Stop,
}

thread_local! {
    static CURRENT_SHARD: Cell<Option<ShardId>> = const { Cell::new(None) };
    static SHARDS: std::cell::RefCell<Option<Shards>> = const { std::cell::RefCell::new(None) };
}

/// The shard the calling thread runs, or `None` off the shard threads.
pub fn current_shard() -> Option<ShardId> {
    CURRENT_SHARD.with(|c| c.get())
}

/// The handle of the runtime the calling shard thread belongs to.
pub fn shards() -> Option<Shards> {
    SHARDS.with(|s| s.borrow().clone())
}

#[derive(Debug, thiserror::Error)]
pub enum RtError {
    #[error("shard {shard} is not running (nr_shards = {nr_shards})")]
    NoSuchShard { shard: ShardId, nr_shards: u32 },
    #[error("shard {shard} stopped before answering")]
    ShardStopped { shard: ShardId },
    #[error("failed to start shard thread {shard}: {source}")]
    Spawn {
        shard: ShardId,
        source: std::io::Error,
    },
}

/// Handle to every shard's inbox.
#[derive(Clone)]
pub struct Shards {
    inboxes: Arc<Vec<mpsc::UnboundedSender<Msg>>>,
}

impl Shards {
    pub fn nr_shards(&self) -> u32 {
        self.inboxes.len() as u32
    }

    /// Runs `f` on `shard`'s event loop and returns its output. When called on `shard`
    /// itself the future is still spawned as its own task, so borrow scopes stay short.
    pub fn submit_to<F, Fut, T>(
        &self,
        shard: ShardId,
        f: F,
    ) -> impl Future<Output = Result<T, RtError>> + use<F, Fut, T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let task: Task = Box::new(move || {
            Box::pin(async move {
                let out = f().await;
                let _ = tx.send(out);
            })
        });
        let nr_shards = self.nr_shards();
        let sent = match self.inboxes.get(shard as usize) {
            Some(inbox) => inbox
                .send(Msg::Run(task))
                .map_err(|_| RtError::ShardStopped { shard }),
            None => Err(RtError::NoSuchShard { shard, nr_shards }),
        };
        async move {
            sent?;
            rx.await.map_err(|_| RtError::ShardStopped { shard })
        }
    }

    /// Runs `f` on every shard and collects the outputs in shard order.
    pub async fn submit_to_all<F, Fut, T>(&self, f: F) -> Result<Vec<T>, RtError>
    where
        F: Fn(ShardId) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let mut pending = Vec::with_capacity(self.inboxes.len());
        for shard in 0..self.nr_shards() {
            let f = f.clone();
            pending.push(self.submit_to(shard, move || f(shard)));
        }
        let mut out = Vec::with_capacity(pending.len());
        for p in pending {
            out.push(p.await?);
        }
        Ok(out)
    }

    /// Closes every inbox: each shard's loop ends once its queued tasks are done.
    pub fn close(&self) {
        for inbox in self.inboxes.iter() {
            let _ = inbox.send(Msg::Stop);
        }
    }
}

/// Options for [`start`].
pub struct RtConfig {
    pub nr_shards: u32,
    /// Pin shard i to core i (modulo the cores available).
    pub pin: bool,
}

/// A running set of shard threads.
pub struct Runtime {
    shards: Shards,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Runtime {
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// Waits for every shard thread to finish (after [`Shards::close`]).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Starts `cfg.nr_shards` shard threads. `init(shard)` runs first on each shard's loop
/// (to set up its thread-local state) before the shard starts taking messages.
pub fn start<I, Fut>(cfg: RtConfig, init: I) -> Result<Runtime, RtError>
where
    I: Fn(ShardId) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let nr = cfg.nr_shards.max(1);
    let cores = if cfg.pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut senders = Vec::with_capacity(nr as usize);
    let mut receivers = Vec::with_capacity(nr as usize);
    for _ in 0..nr {
        let (tx, rx) = mpsc::unbounded_channel::<Msg>();
        senders.push(tx);
        receivers.push(rx);
    }
    let shards = Shards {
        inboxes: Arc::new(senders),
    };
    let mut threads = Vec::with_capacity(nr as usize);
    for (i, mut rx) in receivers.into_iter().enumerate() {
        let shard = i as ShardId;
        let core = if cores.is_empty() {
            None
        } else {
            cores.get(i % cores.len()).copied()
        };
        let shards_for_thread = shards.clone();
        let init = init.clone();
        let handle = std::thread::Builder::new()
            .name(format!("shard-{shard}"))
            .spawn(move || {
                if let Some(core) = core {
                    core_affinity::set_for_current(core);
                }
                CURRENT_SHARD.with(|c| c.set(Some(shard)));
                SHARDS.with(|s| *s.borrow_mut() = Some(shards_for_thread));
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(shard, error = %e, "cannot build shard event loop");
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    init(shard).await;
                    while let Some(Msg::Run(task)) = rx.recv().await {
                        tokio::task::spawn_local(task());
                    }
                });
                SHARDS.with(|s| *s.borrow_mut() = None);
            })
            .map_err(|source| RtError::Spawn { shard, source })?;
        threads.push(handle);
    }
    Ok(Runtime { shards, threads })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_runs_on_the_target_shard() {
        let rt = start(
            RtConfig {
                nr_shards: 3,
                pin: false,
            },
            |_| async {},
        )
        .expect("start");
        let shards = rt.shards().clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = shards.clone();
        let fut = async move {
            let mut seen = Vec::new();
            for target in [2u32, 0, 1] {
                let got = s2
                    .submit_to(target, move || async move { current_shard() })
                    .await
                    .expect("submit");
                seen.push((target, got));
            }
            let all = s2
                .submit_to_all(|s| async move { (s, current_shard()) })
                .await
                .expect("all");
            (seen, all)
        };
        // submit_to sends the task at once; the returned future only waits for its output.
        drop(shards.submit_to(1, move || async move {
            let r = fut.await;
            let _ = tx.send(r);
        }));
        let (seen, all) = rx.recv().expect("result");
        for (target, got) in seen {
            assert_eq!(Some(target), got);
        }
        assert_eq!(all, vec![(0, Some(0)), (1, Some(1)), (2, Some(2))]);
        assert!(matches!(
            futures_lite_block(shards.submit_to(7, || async {})),
            Err(RtError::NoSuchShard { shard: 7, .. })
        ));
        shards.close();
        rt.join();
    }

    fn futures_lite_block<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt")
            .block_on(f)
    }
}
