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
//!
//! Idle polling: a shard whose inputs (reads the transport reports with [`note_io`]) arrive
//! on average less than the idle-poll window apart keeps polling the I/O driver (epoll with
//! a zero timeout) for up to that window after the last input instead of sleeping in
//! `epoll_wait`, so the next request is picked up without a sleep/wake-up (a context switch
//! and, on a VM, a halted vCPU to wake). Off by default ([`DEFAULT_IDLE_POLL`]); set with
//! [`set_idle_poll`] or `AMPHORA_IDLE_POLL_US`. The polling time counts as the shard's CPU.
//!
//! Idle naps (the opposite trade, for a shard that is nearly saturated by small batches):
//! when a shard that has been busy more than [`NAP_BUSY_ABOVE`] of its time runs out of
//! work after a short round (under [`NAP_ROUND_NAPS`] naps), it sleeps for the nap
//! (`AMPHORA_IDLE_NAP_US`) before it waits in `epoll_wait`, so what
//! arrives meanwhile is read, run and answered in one round: one `recv`, one commitlog
//! write-out and one `send` for several times the requests (like a NIC's interrupt
//! coalescing). Each round's fixed cost (four syscalls, the loopback delivery of the answer)
//! is what makes a fixed rate near the maximum cost more CPU per request than saturation
//! does. A lightly loaded shard never naps; a nap adds its length plus the VM's wake-up
//! (~20 µs here) to a request: a napping shard thread sleeps with a 1 µs timer slack, not
//! the kernel's default 50 µs. A closed-loop client with few requests in flight is
//! slowed down by naps (each of its rounds waits for one: with naps after every short
//! round, 32 in flight wrote 45% slower), and nothing in a round tells it from a fixed
//! rate, so a nap probe (`NapProbe`) keeps naps only while trying them shows the input
//! rate unchanged. Off by default (docs/benchmarks.md, "Idle naps" and "The nap probe").

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

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
    /// The shard thread's idle-nap bookkeeping (see [`Napper`]).
    static NAPPER: RefCell<Napper> = const { RefCell::new(Napper::off()) };
    static CURRENT_SHARD: Cell<Option<ShardId>> = const { Cell::new(None) };
    static SHARDS: std::cell::RefCell<Option<Shards>> = const { std::cell::RefCell::new(None) };
    /// Set by [`note_io`]; taken by the idle poller.
    static IO_SEEN: Cell<bool> = const { Cell::new(false) };
    /// Bytes the transport read on this shard ([`note_io`]): what the nap probe compares.
    static IO_BYTES: Cell<u64> = const { Cell::new(0) };
    /// The idle poller's waker while it sleeps (no recent I/O).
    static POLLER: RefCell<Option<Waker>> = const { RefCell::new(None) };
    /// Turns of the event loop the idle poller kept from sleeping (see [`idle_poll_turns`]).
    static POLL_TURNS: Cell<u64> = const { Cell::new(0) };
    /// See [`set_park_hook`].
    static PARK_HOOK: RefCell<Option<ParkHook>> = const { RefCell::new(None) };
}

/// Told `true` when the shard's event loop starts running tasks (an unpark) and `false`
/// when it has none left to run and waits for I/O or a timer (a park).
pub type ParkHook = std::rc::Rc<dyn Fn(bool)>;

/// Registers `hook` to run on the calling shard thread each time its event loop parks
/// and unparks (the storage layer lets its background threads run while the shard waits:
/// `amphora_storage::ShardStorage::park_hook`). Replaces an earlier one.
pub fn set_park_hook(hook: Option<ParkHook>) {
    PARK_HOOK.with(|h| *h.borrow_mut() = hook);
}

fn run_park_hook(running: bool) {
    PARK_HOOK.with(|h| {
        if let Some(hook) = &*h.borrow() {
            hook(running);
        }
    });
}

/// How many times the calling shard's idle poller yielded to poll for I/O instead of
/// letting the event loop sleep (0 off the shard threads or with polling off).
pub fn idle_poll_turns() -> u64 {
    POLL_TURNS.with(|c| c.get())
}

/// How long a shard keeps polling for I/O (epoll with a zero timeout) after its last input
/// before it lets the event loop sleep, in nanoseconds; 0 = never poll. See [`set_idle_poll`].
static IDLE_POLL_NS: AtomicU64 = AtomicU64::new(DEFAULT_IDLE_POLL.as_nanos() as u64);

/// Default of [`set_idle_poll`] (overridden by `AMPHORA_IDLE_POLL_US` at [`start`]).
pub const DEFAULT_IDLE_POLL: Duration = Duration::from_micros(0);

/// Sets the idle-poll window of shards started afterwards (see the crate docs, "Idle
/// polling"). `Duration::ZERO` turns polling off.
pub fn set_idle_poll(window: Duration) {
    IDLE_POLL_NS.store(
        window.as_nanos().min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
}

/// The idle-poll window shards start with.
pub fn idle_poll() -> Duration {
    Duration::from_nanos(IDLE_POLL_NS.load(Ordering::Relaxed))
}

/// Tells the calling shard's idle poller and nap probe that `bytes` of input arrived (the
/// transport calls it after each read that returned bytes). Cheap: thread-local cells, plus
/// a local wake-up when the poller was asleep.
pub fn note_io(bytes: usize) {
    IO_BYTES.with(|b| b.set(b.get().wrapping_add(bytes as u64)));
    IO_SEEN.with(|f| f.set(true));
    if let Some(w) = POLLER.with(|p| p.borrow_mut().take()) {
        w.wake();
    }
}

/// A shard starts napping before it parks once it was busy more than this share of its time
/// (its own work over its wall time, naps included, over roughly its last eight turns of
/// parking), and stops once under [`NAP_BUSY_BELOW`].
pub const NAP_BUSY_ABOVE: f64 = 0.5;

/// See [`NAP_BUSY_ABOVE`].
pub const NAP_BUSY_BELOW: f64 = 0.3;

/// A shard naps only after a round (from an unpark to the next park) shorter than this many
/// naps: at saturation a round carries many requests already, and a client that waits for
/// the answers before it sends more would only wait longer (a 30 µs nap after every round
/// cost saturation writes 26%).
pub const NAP_ROUND_NAPS: u32 = 3;

/// Length of each of a nap probe's three windows (`NapProbe`).
pub const PROBE_WINDOW: Duration = Duration::from_millis(100);

/// Time from a nap probe's verdict to the next probe, at first; it doubles with each
/// probe that confirms the verdict, up to [`PROBE_PERIOD_MAX`].
pub const PROBE_PERIOD_MIN: Duration = Duration::from_secs(1);

/// See [`PROBE_PERIOD_MIN`].
pub const PROBE_PERIOD_MAX: Duration = Duration::from_secs(16);

/// Naps stay allowed while the input rate with them is at least this share of the rate
/// without them.
pub const PROBE_KEEP: f64 = 0.95;

/// Whether a busy shard's naps pay, found by trying. A nap cannot tell a client that sends
/// at its own pace (a fixed rate: the nap only makes the rounds bigger, and the rate stays)
/// from one that waits for its answers before it sends more (a closed loop with a few
/// requests in flight: the nap delays the answers, so the rate falls). So while the shard
/// would nap, every probe period it measures its input rate (bytes read) over three
/// windows: as it is, with the other choice, and as it is again; it keeps naps only while
/// the rate with them is at least [`PROBE_KEEP`] of the rate without (the two outer
/// windows' mean, so that a rate that rises or falls steadily does not decide). It starts
/// with naps not allowed.
struct NapProbe {
    allowed: bool,
    period: Duration,
    next: Option<Instant>,
    /// The probe under way: its current window (0, 1: the trial, 2), that window's start
    /// and the bytes read by then, and the rates of the windows before it.
    window: Option<ProbeWindow>,
}

#[derive(Clone, Copy)]
struct ProbeWindow {
    index: u8,
    start: Instant,
    bytes: u64,
    rates: [f64; 2],
}

impl NapProbe {
    const fn new() -> Self {
        NapProbe {
            allowed: false,
            period: PROBE_PERIOD_MIN,
            next: None,
            window: None,
        }
    }

    /// Whether a nap is allowed now, for a shard that would nap (`wants`) and has read
    /// `bytes` in all. A shard that would not nap ends any probe under way.
    fn allows(&mut self, now: Instant, bytes: u64, wants: bool) -> bool {
        if !wants {
            self.window = None;
            self.next = None;
            return false;
        }
        let next = *self.next.get_or_insert(now + self.period);
        let Some(mut w) = self.window else {
            if now >= next {
                self.window = Some(ProbeWindow {
                    index: 0,
                    start: now,
                    bytes,
                    rates: [0.0; 2],
                });
            }
            return self.allowed;
        };
        let trial = |w: &ProbeWindow| (w.index == 1) != self.allowed;
        let took = now.saturating_duration_since(w.start);
        if took < PROBE_WINDOW {
            return trial(&w);
        }
        let rate = bytes.wrapping_sub(w.bytes) as f64 / took.as_secs_f64();
        if w.index < 2 {
            w.rates[usize::from(w.index)] = rate;
            w.index += 1;
            w.start = now;
            w.bytes = bytes;
            self.window = Some(w);
            return trial(&w);
        }
        let (tried, kept) = (w.rates[1], (w.rates[0] + rate) / 2.0);
        let (with, without) = if self.allowed {
            (kept, tried)
        } else {
            (tried, kept)
        };
        let verdict = with >= without * PROBE_KEEP;
        self.period = if verdict == self.allowed {
            (self.period * 2).min(PROBE_PERIOD_MAX)
        } else {
            PROBE_PERIOD_MIN
        };
        self.allowed = verdict;
        self.window = None;
        self.next = Some(now + self.period);
        self.allowed
    }
}

/// Decides, each time the shard's event loop is about to park, whether it naps first.
/// Busy time runs from an unpark to the next park; idle time (the nap included) from a park
/// to the unpark. Both are kept as exponentially weighted sums (weight 7/8 for the past).
struct Napper {
    nap: Duration,
    unparked_at: Option<Instant>,
    parked_at: Option<Instant>,
    busy_ns: f64,
    /// Busy plus idle plus nap time.
    wall_ns: f64,
    napping: bool,
    probe: NapProbe,
}

impl Napper {
    const fn off() -> Self {
        Napper {
            nap: Duration::ZERO,
            unparked_at: None,
            parked_at: None,
            busy_ns: 0.0,
            wall_ns: 0.0,
            napping: false,
            probe: NapProbe::new(),
        }
    }

    /// About to park at `now`: how long to nap first (`None`: park at once).
    fn before_park(&mut self, now: Instant) -> Option<Duration> {
        if self.nap.is_zero() {
            return None;
        }
        let mut short_round = false;
        if let Some(u) = self.unparked_at.take() {
            let round = now.saturating_duration_since(u);
            short_round = round < NAP_ROUND_NAPS * self.nap;
            let busy = round.as_nanos() as f64;
            self.busy_ns = self.busy_ns * 7.0 / 8.0 + busy;
            self.wall_ns = self.wall_ns * 7.0 / 8.0 + busy;
        }
        self.parked_at = Some(now);
        let busy = if self.wall_ns > 0.0 {
            self.busy_ns / self.wall_ns
        } else {
            0.0
        };
        // Naps make the rounds bigger and so cheaper, which lowers the busy share they are
        // decided on: once napping, the shard goes on until it is under NAP_BUSY_BELOW.
        self.napping = busy
            > if self.napping {
                NAP_BUSY_BELOW
            } else {
                NAP_BUSY_ABOVE
            };
        let allowed = self
            .probe
            .allows(now, IO_BYTES.with(|b| b.get()), self.napping);
        // A long round carried many requests already (saturation, where a client waits for
        // the answers before it sends more): a nap after it would only idle.
        (allowed && short_round).then_some(self.nap)
    }

    /// Unparked at `now`. The nap, if any, counts as idle time with the wait in `epoll_wait`:
    /// a shard whose naps leave it mostly idle stops napping.
    fn after_unpark(&mut self, now: Instant) {
        if self.nap.is_zero() {
            return;
        }
        if let Some(p) = self.parked_at.take() {
            self.wall_ns += now.saturating_duration_since(p).as_nanos() as f64;
        }
        self.unparked_at = Some(now);
    }
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
    #[error("not sent to shard {shard}: {reason}")]
    Barrier { shard: ShardId, reason: String },
}

/// The check a message to another shard passes first ([`set_send_barrier`]).
pub type SendBarrier = fn() -> Result<(), String>;

thread_local! {
    static SEND_BARRIER: std::cell::Cell<Option<SendBarrier>> =
        const { std::cell::Cell::new(None) };
}

/// Registers `f` as the check each [`Shards::submit_to`] from this thread runs before it
/// sends: the storage layer's write-out of commitlog entries whose acknowledgement it
/// deferred, so nothing that depends on them reaches another shard before they reach
/// the OS. An error is the submit's error, and nothing is sent.
pub fn set_send_barrier(f: SendBarrier) {
    SEND_BARRIER.with(|b| b.set(Some(f)));
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
        let barrier = SEND_BARRIER.with(|b| b.get()).map_or(Ok(()), |f| f());
        let sent = match (barrier, self.inboxes.get(shard as usize)) {
            (Err(reason), _) => Err(RtError::Barrier { shard, reason }),
            (Ok(()), Some(inbox)) => inbox
                .send(Msg::Run(task))
                .map_err(|_| RtError::ShardStopped { shard }),
            (Ok(()), None) => Err(RtError::NoSuchShard { shard, nr_shards }),
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
///
/// The shards poll for I/O for [`idle_poll`] after their last input (see
/// [`start_with_idle_poll`]); the environment variable `AMPHORA_IDLE_POLL_US`, when set to a
/// number, replaces that window (0 turns polling off).
pub fn start<I, Fut>(cfg: RtConfig, init: I) -> Result<Runtime, RtError>
where
    I: Fn(ShardId) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let window = env_micros("AMPHORA_IDLE_POLL_US").unwrap_or_else(idle_poll);
    start_with_idle_poll(cfg, window, init)
}

/// Makes the calling thread's sleeps end when asked: the kernel may otherwise defer a
/// timer by the thread's timer slack (50 µs by default) to wake it together with others,
/// which made a 30 µs nap last ~95 µs on the 2-vCPU VM (45 µs with a 1 µs slack;
/// docs/benchmarks.md, "Precise naps"). A failure only leaves the naps longer.
fn precise_sleeps() {
    if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1_000)) {
        tracing::warn!(error = %e, "cannot set the shard's timer slack: naps stay longer");
    }
}

/// The environment variable `name` as a number of microseconds, if it is one.
fn env_micros(name: &str) -> Option<Duration> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_micros)
}

/// [`start`] with an explicit idle-poll window (`Duration::ZERO`: the shards sleep in
/// `epoll_wait` as soon as they have nothing to run).
pub fn start_with_idle_poll<I, Fut>(
    cfg: RtConfig,
    idle_window: Duration,
    init: I,
) -> Result<Runtime, RtError>
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
    let nap = env_micros("AMPHORA_IDLE_NAP_US").unwrap_or(Duration::ZERO);
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
                NAPPER.with(|n| n.borrow_mut().nap = nap);
                if !nap.is_zero() {
                    precise_sleeps();
                }
                let mut builder = tokio::runtime::Builder::new_current_thread();
                builder.enable_all();
                if nap.is_zero() {
                    builder
                        .on_thread_park(|| run_park_hook(false))
                        .on_thread_unpark(|| run_park_hook(true));
                } else {
                    builder
                        .on_thread_park(|| {
                            run_park_hook(false);
                            let nap = NAPPER.with(|n| n.borrow_mut().before_park(Instant::now()));
                            if let Some(d) = nap {
                                std::thread::sleep(d);
                            }
                        })
                        .on_thread_unpark(|| {
                            NAPPER.with(|n| n.borrow_mut().after_unpark(Instant::now()));
                            run_park_hook(true);
                        });
                }
                let rt = match builder.build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(shard, error = %e, "cannot build shard event loop");
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    if !idle_window.is_zero() {
                        tokio::task::spawn_local(idle_poller(idle_window));
                    }
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

/// Waits for the next [`note_io`] (returns at once if one happened since the last call).
fn next_io() -> impl Future<Output = ()> {
    std::future::poll_fn(|cx| {
        if IO_SEEN.with(|f| f.replace(false)) {
            Poll::Ready(())
        } else {
            POLLER.with(|p| *p.borrow_mut() = Some(cx.waker().clone()));
            Poll::Pending
        }
    })
}

/// Keeps the shard's event loop polling for I/O while inputs arrive closer together than
/// `window`, instead of sleeping in `epoll_wait` between them.
///
/// While this task yields, the current-thread scheduler polls the I/O driver with a zero
/// timeout on every turn (a yielded task is a deferred wake-up, so the loop does not park).
/// It stops yielding `window` after the last input, or at once when inputs have been further
/// apart than `window` on average (at low rates polling would only burn CPU), and then
/// sleeps until the next input.
async fn idle_poller(window: Duration) {
    // Exponentially weighted mean of the gaps between inputs (1/8 weight for the newest).
    let mut mean_gap = window * 8;
    let mut last_io = Instant::now();
    loop {
        next_io().await;
        let now = Instant::now();
        mean_gap = (mean_gap * 7 + now.saturating_duration_since(last_io)) / 8;
        last_io = now;
        if mean_gap > window {
            continue;
        }
        loop {
            tokio::task::yield_now().await;
            POLL_TURNS.with(|c| c.set(c.get() + 1));
            let now = Instant::now();
            if IO_SEEN.with(|f| f.replace(false)) {
                mean_gap = (mean_gap * 7 + now.saturating_duration_since(last_io)) / 8;
                last_io = now;
            } else if now.saturating_duration_since(last_io) >= window {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failing send barrier on the sending thread fails the submit with its reason and
    /// sends nothing; a passing one lets the message through.
    #[test]
    fn a_failing_send_barrier_sends_nothing() {
        let rt = start(
            RtConfig {
                nr_shards: 2,
                pin: false,
            },
            |_| async {},
        )
        .expect("start");
        let shards = rt.shards().clone();
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (s, r) = (shards.clone(), ran.clone());
        drop(shards.submit_to(0, move || async move {
            set_send_barrier(|| Err("the commitlog could not be written".into()));
            let refused = s
                .submit_to(1, move || async move {
                    r.store(true, std::sync::atomic::Ordering::SeqCst);
                })
                .await;
            set_send_barrier(|| Ok(()));
            let passed = s.submit_to(1, || async { current_shard() }).await;
            let _ = tx.send((refused.map_err(|e| e.to_string()), passed.ok()));
        }));
        let (refused, passed) = rx.recv().expect("result");
        assert_eq!(
            refused,
            Err("not sent to shard 1: the commitlog could not be written".to_string())
        );
        assert_eq!(passed, Some(Some(1)));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        shards.close();
        rt.join();
    }

    /// A park hook hears the event loop park while a task waits on a timer, and unpark
    /// when it wakes.
    #[test]
    fn the_park_hook_hears_parks_and_unparks() {
        let rt = start(
            RtConfig {
                nr_shards: 1,
                pin: false,
            },
            |_| async {},
        )
        .expect("start");
        let shards = rt.shards().clone();
        let (tx, rx) = std::sync::mpsc::channel();
        drop(shards.submit_to(0, move || async move {
            let seen = std::rc::Rc::new(RefCell::new(Vec::new()));
            let s = seen.clone();
            set_park_hook(Some(std::rc::Rc::new(move |running| {
                s.borrow_mut().push(running)
            })));
            tokio::time::sleep(Duration::from_millis(5)).await;
            set_park_hook(None);
            let _ = tx.send(seen.borrow().clone());
        }));
        let seen = rx.recv().expect("result");
        assert!(
            seen.windows(2).any(|w| w == [false, true]),
            "a park then an unpark around the sleep: {seen:?}"
        );
        shards.close();
        rt.join();
    }

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

    /// Runs `f` on shard 0 of a one-shard runtime with the given idle-poll window.
    fn on_shard<T: Send + 'static, Fut: Future<Output = T> + 'static>(
        window: Duration,
        f: impl FnOnce() -> Fut + Send + 'static,
    ) -> T {
        let rt = start_with_idle_poll(
            RtConfig {
                nr_shards: 1,
                pin: false,
            },
            window,
            |_| async {},
        )
        .expect("start");
        let shards = rt.shards().clone();
        let out = futures_lite_block(shards.submit_to(0, f)).expect("submit");
        shards.close();
        rt.join();
        out
    }

    /// Inputs `gap` apart, `n` times; then `quiet` without input. Returns the poll turns
    /// counted during the inputs and during the quiet time.
    async fn inputs(n: u32, gap: Duration, quiet: Duration) -> (u64, u64) {
        let t0 = idle_poll_turns();
        for _ in 0..n {
            note_io(1);
            let until = Instant::now() + gap;
            // Busy-wait on the loop (yielding), as requests would keep it busy.
            while Instant::now() < until {
                tokio::task::yield_now().await;
            }
        }
        let t1 = idle_poll_turns();
        tokio::time::sleep(quiet).await;
        (t1 - t0, idle_poll_turns() - t1)
    }

    #[test]
    fn idle_poller_polls_between_close_inputs_then_sleeps() {
        let window = Duration::from_millis(2);
        let (busy, quiet) = on_shard(window, || {
            inputs(50, Duration::from_micros(100), Duration::from_millis(50))
        });
        assert!(busy > 0, "no polling between inputs 100 µs apart");
        // After the last input the poller may run for one window, then must sleep: in a
        // 50 ms quiet time a poller that never stops would turn many thousand times. One
        // turn takes at least ~1 µs, so the window allows at most ~2,000.
        let spin_limit = 2 * window.as_micros() as u64;
        assert!(
            quiet <= spin_limit,
            "poller kept spinning after the inputs stopped: {quiet} turns"
        );
    }

    #[test]
    fn idle_poller_off_or_inputs_far_apart_never_polls() {
        let (busy, quiet) = on_shard(Duration::ZERO, || {
            inputs(20, Duration::from_micros(100), Duration::from_millis(5))
        });
        assert_eq!((busy, quiet), (0, 0), "polling is off");
        // Inputs 3 ms apart with a 200 µs window: the mean gap stays above the window.
        let (busy, quiet) = on_shard(Duration::from_micros(200), || {
            inputs(10, Duration::from_millis(3), Duration::from_millis(5))
        });
        assert_eq!(
            (busy, quiet),
            (0, 0),
            "polled although inputs are far apart"
        );
    }

    /// Runs `rounds` turns of a shard whose requests arrive every `gap` µs (at most
    /// `SIM_INFLIGHT` at a time) and cost `per` µs each plus `fixed` µs per round; returns
    /// how many turns napped and the mean requests per round.
    fn simulate(n: &mut Napper, gap: f64, per: f64, fixed: f64, rounds: u32) -> (u32, f64) {
        let start = Instant::now();
        let at = |us: f64| start + Duration::from_nanos((us * 1000.0) as u64);
        let (mut t, mut picked, mut naps, mut requests) = (0.0f64, 0.0f64, 0, 0.0);
        for _ in 0..rounds {
            // Unparked by the first request that arrived since the last pickup.
            let next = ((picked / gap).floor() + 1.0) * gap;
            t = t.max(next);
            n.after_unpark(at(t));
            let got = ((t / gap).floor() - (picked / gap).floor()).clamp(1.0, SIM_INFLIGHT);
            picked = t;
            requests += got;
            IO_BYTES.with(|b| b.set(b.get() + got as u64 * 100));
            t += fixed + per * got;
            if let Some(d) = n.before_park(at(t)) {
                naps += 1;
                t += d.as_secs_f64() * 1e6;
            }
        }
        (naps, requests / f64::from(rounds))
    }

    /// The load generator's requests in flight (make bench's 128).
    const SIM_INFLIGHT: f64 = 128.0;

    /// Runs `secs` of a shard serving a closed-loop client with `inflight` requests: each
    /// answer (sent at the end of its round) comes back as a new request `client` µs later;
    /// requests cost `per` µs each plus `fixed` µs per round. Returns the naps and the
    /// requests served.
    fn simulate_closed(
        n: &mut Napper,
        inflight: usize,
        per: f64,
        fixed: f64,
        client: f64,
        secs: f64,
    ) -> (u32, u64) {
        let start = Instant::now();
        let at = |us: f64| start + Duration::from_nanos((us * 1000.0) as u64);
        let mut queue: Vec<f64> = vec![0.0; inflight];
        let (mut t, mut naps, mut served) = (0.0f64, 0u32, 0u64);
        while t < secs * 1e6 {
            let next = queue.iter().copied().fold(f64::INFINITY, f64::min);
            t = t.max(next);
            n.after_unpark(at(t));
            let got = queue.iter().filter(|&&a| a <= t).count();
            queue.retain(|&a| a > t);
            served += got as u64;
            IO_BYTES.with(|b| b.set(b.get() + got as u64 * 100));
            t += fixed + per * got as f64;
            queue.extend(std::iter::repeat_n(t + client, got));
            if let Some(d) = n.before_park(at(t)) {
                naps += 1;
                t += d.as_secs_f64() * 1e6;
            }
        }
        (naps, served)
    }

    /// A napping shard's sleeps are not deferred by the default 50 µs timer slack.
    #[test]
    fn naps_get_a_one_microsecond_timer_slack() {
        let slack = std::thread::spawn(|| {
            precise_sleeps();
            rustix::thread::current_timer_slack().expect("slack")
        })
        .join()
        .expect("thread");
        assert_eq!(slack, 1_000, "ns");
    }

    #[test]
    fn naps_stop_when_they_slow_a_closed_loop_down() {
        // 32 requests in flight, answered 20 µs before they come back: ~80% busy, rounds of
        // ~80 µs, so a 30 µs nap after each one would cost about a tenth of the rate.
        let mut off = Napper::off();
        let (_, without) = simulate_closed(&mut off, 32, 2.3, 6.0, 20.0, 4.0);
        let mut n = Napper::off();
        n.nap = Duration::from_micros(30);
        let (naps, with) = simulate_closed(&mut n, 32, 2.3, 6.0, 20.0, 4.0);
        // Only the probes' trial windows napped (two in 4 s, at 1.1 and 3.3 s).
        assert!(naps > 0, "never tried a nap");
        assert!(
            with as f64 >= without as f64 * 0.97,
            "served {with} with naps against {without} without"
        );
        assert!(!n.probe.allowed, "naps still allowed");
        // Answers that take the client 40 µs to turn around: a 30 µs nap ends before the
        // next requests come, so it costs nothing and stays allowed.
        let mut off = Napper::off();
        let (_, without) = simulate_closed(&mut off, 32, 2.3, 6.0, 40.0, 4.0);
        let mut n = Napper::off();
        n.nap = Duration::from_micros(30);
        let (naps, with) = simulate_closed(&mut n, 32, 2.3, 6.0, 40.0, 4.0);
        assert!(n.probe.allowed, "naps that cost nothing were stopped");
        assert!(naps > 10_000, "napped only {naps} times");
        assert!(
            with as f64 >= without as f64 * 0.99,
            "served {with} against {without}"
        );
    }

    #[test]
    fn a_busy_shard_naps_and_a_light_one_does_not() {
        // Off: never naps.
        let mut off = Napper::off();
        assert_eq!(simulate(&mut off, 3.2, 2.3, 6.0, 200).0, 0);
        let mut n = Napper::off();
        n.nap = Duration::from_micros(30);
        // 312,000 requests/s at 2.3 µs each plus 6 µs a round: ~95% busy without naps.
        // Its first probe (after a second) finds the same rate with naps as without ...
        simulate(&mut n, 3.2, 2.3, 6.0, 100_000);
        assert!(n.probe.allowed, "a fixed rate's probe did not allow naps");
        // ... and from then on it naps, and its rounds carry many times the requests.
        let (naps, per_round) = simulate(&mut n, 3.2, 2.3, 6.0, 200);
        // The rounds grow until one is over three naps long; the next (shorter) one naps again.
        assert!(
            naps > 150,
            "a nearly saturated shard napped {naps} of 200 turns"
        );
        assert!(per_round > 20.0, "{per_round} requests a round");
        // 13,000 requests/s (the 50% steps): after a few turns it stops and stays stopped.
        simulate(&mut n, 77.0, 5.0, 6.0, 20);
        let (naps, per_round) = simulate(&mut n, 77.0, 5.0, 6.0, 200);
        assert_eq!(naps, 0, "a lightly loaded shard kept napping");
        assert!(per_round < 1.1, "{per_round}");
        // Saturation: 128 requests a round, answered before the next ones come (2 µs
        // later). Busy all the time, but the rounds are long: no nap.
        let mut sat = Napper::off();
        sat.nap = Duration::from_micros(30);
        let (naps, per_round) = simulate(&mut sat, 0.015, 2.3, 6.0, 200);
        assert!(per_round > 120.0, "{per_round}");
        // The first round holds one request (the load starts): at most that one naps.
        assert!(naps <= 1, "napped {naps} times after rounds of ~300 µs");
    }

    fn futures_lite_block<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt")
            .block_on(f)
    }
}
