//! The load engine: `threads` concurrent async workers, pacing (unlimited, throttled or fixed
//! rate), stop conditions (`n=` or `duration=`), retries, and per-interval snapshots.
//!
//! In fixed-rate mode operation `k` is *intended* to start at `start + k / rate`; its latency
//! is measured from that instant, not from when a worker got round to it. When the server
//! stalls, every operation the stall delays is charged the wait, as a real client's users
//! would be: this is the coordinated-omission correction.
//!
//! Fixed-rate pacing has two clocks. By default ([`RunConfig::precise_pacing`]) a pacer OS
//! thread sleeps with the kernel's nanosecond timer and releases permits on a semaphore as
//! intended start times pass; tokio's timer wheel ticks in whole milliseconds, so pacing on it
//! would add up to ~1 ms of client lag to every measured latency. Without precise pacing the
//! engine uses tokio's clock only, so tests run it with paused time and simulated operations.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::distribution::Rng;
use crate::metrics::{Figures, IntervalReport, OpStats, new_histogram};
use crate::settings::RateMode;

/// What a successful operation touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpDone {
    pub partitions: u64,
    pub rows: u64,
}

/// A set of operation types the engine can run; `op` indexes the run's weights.
pub trait Workload: Send + Sync + 'static {
    fn execute(
        &self,
        op: usize,
        rng: &mut Rng,
    ) -> impl Future<Output = Result<OpDone, String>> + Send;
}

#[derive(Debug, Clone)]
pub struct RunConfig {
    pub threads: usize,
    pub rate: RateMode,
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    /// Attempts per operation.
    pub tries: u32,
    pub ignore_errors: bool,
    pub interval: Duration,
    /// One weight per operation type.
    pub weights: Vec<f64>,
    pub seed: u64,
    /// Fixed rate only: pace with a dedicated OS thread on the kernel's high-resolution timer
    /// (real time; sub-100 µs lag) instead of tokio's millisecond timer (works with paused time).
    pub precise_pacing: bool,
    /// An attempt still running after this long fails with a timeout (and is retried up to
    /// `tries`). The runner's watchdog task enforces it, so the workload's requests need no
    /// timer of their own (a driver's timeout registers one per request).
    pub op_timeout: Option<Duration>,
}

/// Handed to the caller after each interval.
pub struct IntervalEvent<'a> {
    pub report: &'a IntervalReport,
    /// The interval's raw statistics, one per operation type.
    pub stats: &'a [OpStats],
    /// Operations completed so far.
    pub total_ops: u64,
    /// Operations completed so far, per operation type.
    pub op_totals: &'a [u64],
    pub start_offset: Duration,
    pub length: Duration,
    /// Op rates of all intervals so far (for `stderr`).
    pub rates: &'a [f64],
}

#[derive(Debug)]
pub struct RunResult {
    pub totals: Vec<OpStats>,
    pub elapsed: Duration,
    pub intervals: Vec<IntervalReport>,
    /// Set when an operation failed all its tries and errors are not ignored.
    pub aborted: Option<String>,
    /// Fixed rate only: how late the client itself started each operation, from its intended
    /// start to the moment it was handed to the driver (pacer and worker scheduling). This
    /// part of every latency is the load generator's own; the rest is the driver, the network
    /// and the server.
    pub start_lag: Option<Histogram<u64>>,
    /// Fixed rate with precise pacing: how many times the pacer thread woke up.
    pub pacer_wakeups: u64,
}

impl RunResult {
    pub fn total(&self) -> OpStats {
        let mut t = OpStats::default();
        for s in &self.totals {
            t.add(s);
        }
        t
    }
}

enum Pace {
    Unlimited,
    Throttle {
        interval: Duration,
        next: Mutex<Instant>,
    },
    Fixed {
        rate: f64,
        /// Permits released by the pacer thread as intended start times pass (precise pacing).
        gate: Option<Arc<Semaphore>>,
    },
}

/// One worker's attempt in flight, as the watchdog sees it.
struct Watch {
    /// When the attempt started, in µs since the run's start plus one; 0 when the worker is
    /// between attempts, [`Watch::EXPIRED`] once the watchdog timed the attempt out.
    since_us: AtomicU64,
    /// The worker's waker while its attempt waits, for the watchdog to wake it.
    waker: AtomicWaker,
}

impl Watch {
    const EXPIRED: u64 = u64::MAX;

    fn new() -> Self {
        Watch {
            since_us: AtomicU64::new(0),
            waker: AtomicWaker::new(),
        }
    }

    fn expired(&self) -> bool {
        self.since_us.load(Ordering::Acquire) == Self::EXPIRED
    }

    /// Times the attempt that started at `since` out, unless it has ended meanwhile (the
    /// worker changed `since_us`), and wakes its worker.
    fn expire(&self, since: u64) {
        if self
            .since_us
            .compare_exchange(since, Self::EXPIRED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.waker.wake();
        }
    }
}

/// The watchdog of [`RunConfig::op_timeout`]: every `timeout / 8` (10–250 ms) it times out
/// the attempts that have run for `timeout`. Runs until aborted.
async fn watchdog(shared: Arc<Shared>, timeout: Duration) {
    let tick = (timeout / 8).clamp(Duration::from_millis(10), Duration::from_millis(250));
    let limit = timeout.as_micros() as u64;
    loop {
        tokio::time::sleep(tick).await;
        let now = shared.start.elapsed().as_micros() as u64 + 1;
        for w in &shared.watches {
            let since = w.since_us.load(Ordering::Acquire);
            if since != 0 && since != Watch::EXPIRED && now.saturating_sub(since) >= limit {
                w.expire(since);
            }
        }
    }
}

/// Runs one attempt of `op` under `watch`: `None` if the watchdog timed it out first.
async fn watched<T>(shared: &Shared, watch: &Watch, op: impl Future<Output = T>) -> Option<T> {
    watch.since_us.store(
        shared.start.elapsed().as_micros() as u64 + 1,
        Ordering::Release,
    );
    let mut op = std::pin::pin!(op);
    let out = std::future::poll_fn(|cx| {
        if watch.expired() {
            return Poll::Ready(None);
        }
        match op.as_mut().poll(cx) {
            Poll::Ready(r) => Poll::Ready(Some(r)),
            Poll::Pending => {
                watch.waker.register(cx.waker());
                // Expired between the check above and the registration: nobody will wake us.
                if watch.expired() {
                    Poll::Ready(None)
                } else {
                    Poll::Pending
                }
            }
        }
    })
    .await;
    watch.since_us.store(0, Ordering::Release);
    out
}

struct Shared {
    current: Mutex<Vec<OpStats>>,
    /// Fixed rate: the client's start lag of every operation, in µs (see `RunResult`).
    start_lag: Mutex<Histogram<u64>>,
    pacer_wakeups: AtomicU64,
    issued: AtomicU64,
    completed: AtomicU64,
    stop: AtomicBool,
    abort: Mutex<Option<String>>,
    start: Instant,
    deadline: Option<Instant>,
    count: Option<u64>,
    pace: Pace,
    /// One per worker ([`RunConfig::op_timeout`]).
    watches: Vec<Watch>,
}

impl Shared {
    fn next_ticket(&self) -> Option<u64> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let k = self.issued.fetch_add(1, Ordering::Relaxed);
        match self.count {
            Some(n) if k >= n => None,
            _ => Some(k),
        }
    }

    fn take_interval(&self, n_ops: usize) -> Vec<OpStats> {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *cur, (0..n_ops).map(|_| OpStats::default()).collect())
    }
}

/// Shortest sleep of the pacer thread: at high rates it releases several permits per wake-up
/// rather than making a syscall per operation (each is then at most this late).
const PACER_MIN_SLEEP: Duration = Duration::from_micros(50);

/// Permits released but not taken yet above which the pacer sleeps [`PACER_BEHIND_SLEEP`]:
/// the workers are all busy (the run is behind its schedule), so waking every 50 µs to add
/// permits nobody waits for would only take the client's core from the workers. 256 permits
/// last at least 1 ms below 256k op/s, so no worker waits for the pacer meanwhile.
const PACER_BEHIND_PERMITS: usize = 256;
const PACER_BEHIND_SLEEP: Duration = Duration::from_millis(1);

/// What the pacer does next (see [`Release::step`]).
enum Step {
    /// Wait until this instant (the next operation's intended start).
    Until(std::time::Instant),
    /// Every permit of a counted run is out; wait for the workers to take their tickets.
    Drain,
    /// The run is over: close the gate.
    Over,
}

/// The pacer's bookkeeping, shared by its two forms ([`spawn_pacer`], [`spin_pacer`]).
struct Release {
    start: std::time::Instant,
    deadline: Option<std::time::Instant>,
    rate: f64,
    released: u64,
}

impl Release {
    fn new(shared: &Shared, rate: f64) -> Self {
        Release {
            start: shared.start.into_std(),
            deadline: shared.deadline.map(Instant::into_std),
            rate,
            released: 0,
        }
    }

    /// Releases a permit for every operation whose intended start has passed.
    fn step(&mut self, shared: &Shared, gate: &Semaphore) -> Step {
        let now = std::time::Instant::now();
        if shared.stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| now >= d) {
            return Step::Over;
        }
        let elapsed = now.saturating_duration_since(self.start).as_secs_f64();
        // Operation k is due at k / rate: operations 0..=floor(elapsed * rate) are due.
        let mut due = (elapsed * self.rate).floor() as u64 + 1;
        if let Some(n) = shared.count {
            due = due.min(n);
        }
        if due > self.released {
            gate.add_permits((due - self.released) as usize);
            self.released = due;
        }
        if shared.count.is_some_and(|n| self.released >= n) {
            return if shared.issued.load(Ordering::Relaxed) >= self.released {
                Step::Over
            } else {
                Step::Drain
            };
        }
        Step::Until(self.start + Duration::from_secs_f64(self.released as f64 / self.rate))
    }
}

/// Releases one permit on `gate` as each operation's intended start time passes, on its own OS
/// thread (`std::thread::sleep` is nanosleep: microsecond precision, unlike tokio's 1 ms wheel).
/// Closes the gate when the run is over so waiting workers end. Used on a multi-thread
/// runtime; a current-thread one gets [`spin_pacer`].
fn spawn_pacer(shared: Arc<Shared>, gate: Arc<Semaphore>, rate: f64) {
    let (on_error, gate_on_error) = (shared.clone(), gate.clone());
    let spawned = std::thread::Builder::new()
        .name("stress-pacer".into())
        .spawn(move || {
            let mut pacer = Release::new(&shared, rate);
            loop {
                shared.pacer_wakeups.fetch_add(1, Ordering::Relaxed);
                let next = match pacer.step(&shared, &gate) {
                    Step::Over => break,
                    Step::Drain => {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    Step::Until(next) => next,
                };
                let wait = next.saturating_duration_since(std::time::Instant::now());
                let min = if gate.available_permits() >= PACER_BEHIND_PERMITS {
                    PACER_BEHIND_SLEEP
                        .min(Duration::from_secs_f64(PACER_BEHIND_PERMITS as f64 / rate))
                } else {
                    PACER_MIN_SLEEP
                };
                std::thread::sleep(wait.max(min));
            }
            gate.close();
        });
    if spawned.is_err() {
        // No thread: nobody would release permits, so end the run instead of hanging.
        on_error.stop.store(true, Ordering::Relaxed);
        gate_on_error.close();
    }
}

/// How long before an operation's intended start the pacer task stops sleeping on its timer
/// and spins (see [`spin_pacer`]): more than a timer wake-up takes on the VMs here.
const PACER_SPIN_AHEAD: Duration = Duration::from_micros(30);

/// The pacer on a current-thread runtime (`amphora stress` uses one on a single CPU, as make
/// bench pins it): a task on the runtime itself. When the next operation is due within
/// 2 x [`PACER_SPIN_AHEAD`] it releases the due permits at every turn of the event loop and
/// yields in between: the loop then polls for I/O (epoll with a zero timeout) instead of
/// parking, so at high rates the thread never sleeps, no thread is woken per batch of
/// permits and no response waits for a sleeping thread. When the next operation is further
/// away it sleeps on a timerfd the runtime's epoll watches, until [`PACER_SPIN_AHEAD`] before
/// the due time: at low rates a thread that never slept would lose its core in whole
/// scheduler slices to anything else runnable there (and, under SCHED_FIFO, to the kernel's
/// real-time throttling), which put 2–50 ms into the tails (docs/benchmarks.md, "The load
/// generator: a spinning pacer and a pipelined connection").
/// The OS-thread pacer shared the client's only CPU with the runtime thread and cost two
/// context switches per wake-up plus a futex wake of the parked runtime. Closes the gate
/// when the run is over.
///
/// Under a real-time policy (make bench's isolated step runs the load generator at
/// `chrt -f 1`) a thread that never sleeps is throttled by the kernel for 50 ms of every
/// second, so there the pacer sleeps whenever the next operation is more than
/// [`PACER_RT_MIN_SLEEP`] away, spinning at most half of the wait: at 17,463 operations/s
/// (57 µs apart, under 2 x [`PACER_SPIN_AHEAD`]) it had never slept and the step's p99 was
/// 40 ms of throttling.
async fn spin_pacer(shared: Arc<Shared>, gate: Arc<Semaphore>, rate: f64) {
    let mut pacer = Release::new(&shared, rate);
    let alarm = Alarm::new();
    // Read again every PACER_POLICY_RECHECK: a policy can be set from outside after the
    // start (bench/stall/isolated.sh runs `chrt -p` on the running load generator).
    let mut realtime = this_thread_is_realtime();
    let mut policy_read = std::time::Instant::now();
    loop {
        shared.pacer_wakeups.fetch_add(1, Ordering::Relaxed);
        match pacer.step(&shared, &gate) {
            Step::Over => break,
            Step::Until(next) => {
                let now = std::time::Instant::now();
                if now.saturating_duration_since(policy_read) >= PACER_POLICY_RECHECK {
                    realtime = this_thread_is_realtime();
                    policy_read = now;
                }
                let wait = next.saturating_duration_since(now);
                if let Some(a) = &alarm
                    && let Some(nap) = pacer_nap(wait, realtime)
                    && a.sleep(nap).await
                {
                    continue;
                }
                tokio::task::yield_now().await;
            }
            Step::Drain => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
    gate.close();
}

/// How often the spinning pacer reads its thread's scheduling policy again.
const PACER_POLICY_RECHECK: Duration = Duration::from_millis(100);

/// Under a real-time policy the pacer sleeps when the next operation is further away than this.
const PACER_RT_MIN_SLEEP: Duration = Duration::from_micros(10);

/// How long the spinning pacer sleeps before an operation due in `wait`, or `None` to spin.
fn pacer_nap(wait: Duration, realtime: bool) -> Option<Duration> {
    if realtime {
        (wait > PACER_RT_MIN_SLEEP).then(|| wait - PACER_SPIN_AHEAD.min(wait / 2))
    } else {
        (wait > 2 * PACER_SPIN_AHEAD).then(|| wait - PACER_SPIN_AHEAD)
    }
}

/// Whether the calling thread runs under SCHED_FIFO or SCHED_RR (the `policy` field of
/// `/proc/thread-self/stat`); false where that can not be read.
fn this_thread_is_realtime() -> bool {
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| stat_policy(&s))
        .is_some_and(|p| p == 1 || p == 2)
}

/// The scheduling policy (field 41) of a `/proc/.../stat` line. The command name (field 2)
/// is in parentheses and may hold spaces or parentheses, so fields are counted from the last ')'.
fn stat_policy(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(41 - 3)?.parse().ok()
}

/// A one-shot timer on a timerfd registered with the runtime's epoll: nanosecond expiry with
/// no thread of its own (tokio's timer wheel ticks in whole milliseconds).
struct Alarm {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl Alarm {
    /// `None` where a timerfd can not be had; the pacer then only spins.
    fn new() -> Option<Self> {
        use rustix::time::{TimerfdClockId, TimerfdFlags, timerfd_create};
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .ok()?;
        // `new` is deprecated because an arbitrary `AsRawFd` may close or swap its descriptor
        // while registered (tokio #8587); an `OwnedFd` moved into the `AsyncFd` can do neither,
        // which is exactly the condition the unsafe `register` asks for.
        #[allow(deprecated)]
        tokio::io::unix::AsyncFd::new(fd)
            .ok()
            .map(|fd| Alarm { fd })
    }

    /// Waits `d`; false if the timer failed (the caller then yields instead).
    async fn sleep(&self, d: Duration) -> bool {
        use rustix::time::{Itimerspec, TimerfdTimerFlags, Timespec, timerfd_settime};
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            // A zero value would disarm the timer.
            it_value: Timespec {
                tv_sec: d.as_secs() as _,
                tv_nsec: d.subsec_nanos().max(1) as _,
            },
        };
        if timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::empty(), &spec).is_err() {
            return false;
        }
        loop {
            let Ok(mut ready) = self.fd.readable().await else {
                return false;
            };
            let mut expirations = [0u8; 8];
            match ready.try_io(|fd| {
                rustix::io::read(fd.get_ref(), &mut expirations).map_err(std::io::Error::from)
            }) {
                Ok(Ok(_)) => return true,
                Ok(Err(_)) => return false,
                // Not expired yet: readiness cleared, wait again.
                Err(_) => continue,
            }
        }
    }
}

fn choose(weights: &[f64], total: f64, rng: &mut Rng) -> usize {
    if weights.len() <= 1 {
        return 0;
    }
    let mut x = rng.next_f64() * total;
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.iter().rposition(|w| *w > 0.0).unwrap_or(0)
}

/// Runs the workload to completion, calling `on_interval` after every interval.
pub async fn run<W: Workload>(
    workload: Arc<W>,
    names: &[String],
    cfg: &RunConfig,
    mut on_interval: impl FnMut(IntervalEvent<'_>),
) -> RunResult {
    let n_ops = cfg.weights.len().max(1);
    let start = Instant::now();
    let pace = match cfg.rate {
        RateMode::Unlimited => Pace::Unlimited,
        RateMode::Throttle(r) => Pace::Throttle {
            interval: Duration::from_secs_f64(1.0 / r),
            next: Mutex::new(start),
        },
        RateMode::Fixed(r) => Pace::Fixed {
            rate: r,
            gate: cfg.precise_pacing.then(|| Arc::new(Semaphore::new(0))),
        },
    };
    let shared = Arc::new(Shared {
        current: Mutex::new((0..n_ops).map(|_| OpStats::default()).collect()),
        start_lag: Mutex::new(new_histogram()),
        pacer_wakeups: AtomicU64::new(0),
        issued: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        abort: Mutex::new(None),
        start,
        deadline: cfg.duration.map(|d| start + d),
        count: cfg.count,
        pace,
        watches: (0..cfg.threads.max(1)).map(|_| Watch::new()).collect(),
    });
    let watchdog = cfg
        .op_timeout
        .map(|t| tokio::spawn(watchdog(shared.clone(), t)));
    if let Pace::Fixed {
        rate,
        gate: Some(gate),
    } = &shared.pace
    {
        let flavor = tokio::runtime::Handle::current().runtime_flavor();
        if flavor == tokio::runtime::RuntimeFlavor::CurrentThread {
            tokio::spawn(spin_pacer(shared.clone(), gate.clone(), *rate));
        } else {
            spawn_pacer(shared.clone(), gate.clone(), *rate);
        }
    }
    let weights = Arc::new(cfg.weights.clone());
    let mut set = JoinSet::new();
    for t in 0..cfg.threads.max(1) {
        let shared = shared.clone();
        let workload = workload.clone();
        let weights = weights.clone();
        let tries = cfg.tries.max(1);
        let ignore_errors = cfg.ignore_errors;
        let (op_timeout, t_index) = (cfg.op_timeout, t);
        let mut rng = Rng::new(crate::distribution::mix64(cfg.seed ^ (t as u64 + 1)));
        set.spawn(async move {
            let total_weight: f64 = weights.iter().sum();
            loop {
                if let Pace::Fixed {
                    gate: Some(gate), ..
                } = &shared.pace
                {
                    // Permit first, ticket second: ticket k is then always due (the pacer has
                    // released more than k permits), so no operation starts early.
                    match gate.acquire().await {
                        Ok(p) => p.forget(),
                        Err(_) => break,
                    }
                }
                let Some(k) = shared.next_ticket() else { break };
                let began = match &shared.pace {
                    Pace::Unlimited => Instant::now(),
                    Pace::Throttle { interval, next } => {
                        let slot = {
                            let mut next = next.lock().unwrap_or_else(|e| e.into_inner());
                            let slot = (*next).max(Instant::now());
                            *next = slot + *interval;
                            slot
                        };
                        tokio::time::sleep_until(slot).await;
                        Instant::now()
                    }
                    Pace::Fixed { rate, gate } => {
                        let intended = shared.start + Duration::from_secs_f64(k as f64 / rate);
                        if shared.deadline.is_some_and(|d| intended >= d) {
                            break;
                        }
                        if gate.is_none() {
                            tokio::time::sleep_until(intended).await;
                        }
                        intended
                    }
                };
                let op = choose(&weights, total_weight, &mut rng);
                if let Pace::Fixed { .. } = &shared.pace {
                    let lag = Instant::now().saturating_duration_since(began);
                    let us = (lag.as_micros() as u64).clamp(1, crate::metrics::LATENCY_MAX_US);
                    let mut h = shared.start_lag.lock().unwrap_or_else(|e| e.into_inner());
                    h.saturating_record(us);
                }
                let mut attempt = 0;
                let outcome = loop {
                    attempt += 1;
                    let result = match op_timeout {
                        None => workload.execute(op, &mut rng).await,
                        Some(t) => watched(
                            &shared,
                            &shared.watches[t_index],
                            workload.execute(op, &mut rng),
                        )
                        .await
                        .unwrap_or_else(|| {
                            Err(format!("operation timed out after {} ms", t.as_millis()))
                        }),
                    };
                    match result {
                        Ok(done) => break Ok(done),
                        Err(e) if attempt >= tries => break Err(e),
                        Err(_) => {}
                    }
                };
                let latency = Instant::now().saturating_duration_since(began);
                {
                    let mut cur = shared.current.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(s) = cur.get_mut(op) {
                        match &outcome {
                            Ok(d) => s.record(latency, d.partitions, d.rows),
                            Err(_) => s.errors += 1,
                        }
                    }
                }
                shared.completed.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = outcome
                    && !ignore_errors
                {
                    let mut a = shared.abort.lock().unwrap_or_else(|e| e.into_inner());
                    if a.is_none() {
                        *a = Some(e);
                    }
                    shared.stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        });
    }

    let mut totals: Vec<OpStats> = (0..n_ops).map(|_| OpStats::default()).collect();
    let mut intervals = Vec::new();
    let mut rates = Vec::new();
    let mut last = start;
    let mut next_tick = start + cfg.interval;
    let mut emit = |now: Instant,
                    last: &mut Instant,
                    totals: &mut Vec<OpStats>,
                    intervals: &mut Vec<IntervalReport>,
                    rates: &mut Vec<f64>| {
        let stats = shared.take_interval(n_ops);
        let length = now.saturating_duration_since(*last);
        let mut total = OpStats::default();
        for s in &stats {
            total.add(s);
        }
        if total.ops == 0 && total.errors == 0 {
            *last = now;
            return;
        }
        for (t, s) in totals.iter_mut().zip(&stats) {
            t.add(s);
        }
        let per_op = names
            .iter()
            .zip(&stats)
            .map(|(n, s)| (n.clone(), Figures::of(s, length)))
            .collect();
        let report = IntervalReport {
            time_s: now.saturating_duration_since(start).as_secs_f64(),
            length_s: length.as_secs_f64(),
            total: Figures::of(&total, length),
            per_op,
        };
        rates.push(report.total.op_rate);
        let total_ops = totals.iter().map(|t| t.ops).sum();
        let op_totals: Vec<u64> = totals.iter().map(|t| t.ops).collect();
        on_interval(IntervalEvent {
            report: &report,
            stats: &stats,
            total_ops,
            op_totals: &op_totals,
            start_offset: last.saturating_duration_since(start),
            length,
            rates,
        });
        intervals.push(report);
        *last = now;
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next_tick) => {
                let now = Instant::now();
                emit(now, &mut last, &mut totals, &mut intervals, &mut rates);
                next_tick += cfg.interval;
                if next_tick < now {
                    next_tick = now + cfg.interval;
                }
            }
            joined = set.join_next() => {
                if joined.is_none() {
                    break;
                }
            }
        }
    }
    let end = Instant::now();
    // Ends the pacer thread if it is still releasing permits.
    shared.stop.store(true, Ordering::Relaxed);
    if let Some(w) = watchdog {
        w.abort();
    }
    emit(end, &mut last, &mut totals, &mut intervals, &mut rates);
    let aborted = shared
        .abort
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let start_lag = match &shared.pace {
        Pace::Fixed { .. } => Some(
            shared
                .start_lag
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        ),
        _ => None,
    };
    RunResult {
        totals,
        elapsed: end.saturating_duration_since(start),
        intervals,
        aborted,
        start_lag,
        pacer_wakeups: shared.pacer_wakeups.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_past_a_command_name_with_parentheses() {
        // A SCHED_FIFO thread's stat line (fields 3..52 after the name; policy is field 41).
        let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        fields[41 - 3] = "1".into();
        let line = format!("4242 (a) b (c)) {}\n", fields.join(" "));
        assert_eq!(stat_policy(&line), Some(1));
        assert_eq!(stat_policy("4242 (short) S 1 2"), None);
        // The test thread itself runs at the default policy.
        let own = std::fs::read_to_string("/proc/thread-self/stat").expect("own stat");
        assert_eq!(stat_policy(&own), Some(0));
    }

    #[test]
    fn a_realtime_pacer_sleeps_where_a_fair_one_spins() {
        let us = Duration::from_micros;
        // 57 µs apart (17,463/s): the fair pacer spins, the real-time one sleeps half of it.
        assert_eq!(pacer_nap(us(57), false), None);
        assert_eq!(pacer_nap(us(57), true), Some(Duration::from_nanos(28_500)));
        // Far away: both sleep until PACER_SPIN_AHEAD before.
        assert_eq!(pacer_nap(us(1_000), false), Some(us(970)));
        assert_eq!(pacer_nap(us(1_000), true), Some(us(970)));
        // Nearly due: both spin.
        assert_eq!(pacer_nap(us(8), true), None);
        assert_eq!(pacer_nap(us(8), false), None);
    }

    /// Sleeps `slow` for operation number `slow_at` and `fast` for all others.
    struct Simulated {
        calls: AtomicU64,
        slow_at: u64,
        slow: Duration,
        fast: Duration,
    }

    impl Workload for Simulated {
        async fn execute(&self, _op: usize, _rng: &mut Rng) -> Result<OpDone, String> {
            let k = self.calls.fetch_add(1, Ordering::Relaxed);
            let d = if k == self.slow_at {
                self.slow
            } else {
                self.fast
            };
            tokio::time::sleep(d).await;
            Ok(OpDone {
                partitions: 1,
                rows: 1,
            })
        }
    }

    fn cfg(rate: RateMode, count: u64) -> RunConfig {
        RunConfig {
            threads: 1,
            rate,
            count: Some(count),
            duration: None,
            tries: 1,
            ignore_errors: false,
            interval: Duration::from_secs(1),
            weights: vec![1.0],
            seed: 1,
            precise_pacing: false,
            op_timeout: None,
        }
    }

    async fn simulate(rate: RateMode) -> RunResult {
        // 100 ops/s for 2 s on one connection; operation 0 stalls for 1 s.
        let w = Arc::new(Simulated {
            calls: AtomicU64::new(0),
            slow_at: 0,
            slow: Duration::from_secs(1),
            fast: Duration::from_millis(1),
        });
        run(w, &["WRITE".to_string()], &cfg(rate, 200), |_| {}).await
    }

    #[tokio::test(start_paused = true)]
    async fn fixed_rate_counts_latency_from_intended_start() {
        let r = simulate(RateMode::Fixed(100.0)).await;
        let t = r.total();
        assert_eq!(t.ops, 200);
        // The stall delayed the ~100 operations scheduled during it; each is charged the
        // time it waited for its slot: from ~1000 ms down to ~10 ms.
        // Op k >= 1 ends at 1 s + k ms and was intended at 10k ms: 1 s - 9k ms late.
        let over_500ms = t.hist.count_between(500_000, u64::MAX);
        assert!(
            (54..=58).contains(&over_500ms),
            "{over_500ms} ops over 500 ms"
        );
        let l = t.latency();
        assert!(l.p50 > 5.0, "median {} ms should include queueing", l.p50);
        assert!(l.p99 > 900.0, "p99 {} ms", l.p99);
        assert!(l.max >= 1000.0, "max {} ms", l.max);
        // With one worker, the operations due during the stall started late by the client
        // itself: the start lag shows that part (up to the 1 s stall), per operation.
        let lag = r
            .start_lag
            .as_ref()
            .expect("fixed rate records the start lag");
        assert_eq!(lag.len(), 200);
        assert!(
            lag.count_between(500_000, u64::MAX) >= 50,
            "start lag over 500 ms: {}",
            lag.count_between(500_000, u64::MAX)
        );
        assert!(lag.max() >= 980_000, "start lag max {} µs", lag.max());
    }

    #[tokio::test(start_paused = true)]
    async fn throttle_times_from_actual_start_and_hides_the_stall() {
        let r = simulate(RateMode::Throttle(100.0)).await;
        let t = r.total();
        assert_eq!(t.ops, 200);
        // Only the stalled operation itself is slow: the omission fixed mode corrects.
        assert_eq!(t.hist.count_between(500_000, u64::MAX), 1);
        assert!(r.start_lag.is_none(), "start lag is a fixed-rate figure");
        let l = t.latency();
        assert!(l.p99 < 2.0, "p99 {} ms", l.p99);
    }

    #[tokio::test(start_paused = true)]
    async fn fixed_rate_holds_the_schedule() {
        let w = Arc::new(Simulated {
            calls: AtomicU64::new(0),
            slow_at: u64::MAX,
            slow: Duration::ZERO,
            fast: Duration::from_millis(1),
        });
        let mut c = cfg(RateMode::Fixed(1000.0), u64::MAX);
        c.count = None;
        c.duration = Some(Duration::from_secs(3));
        c.threads = 4;
        let r = run(w, &["READ".to_string()], &c, |_| {}).await;
        let ops = r.total().ops;
        assert!((2990..=3001).contains(&ops), "{ops}");
        assert!(r.intervals.len() >= 3);
        // Enough workers for the rate: every operation started on time.
        let lag = r.start_lag.expect("fixed rate records the start lag");
        assert_eq!(lag.len(), ops);
        assert!(lag.max() < 1_000, "start lag max {} µs", lag.max());
    }

    #[tokio::test(start_paused = true)]
    async fn counts_operations_and_ratios() {
        struct Two;
        impl Workload for Two {
            async fn execute(&self, op: usize, _rng: &mut Rng) -> Result<OpDone, String> {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(OpDone {
                    partitions: 1,
                    rows: op as u64 + 1,
                })
            }
        }
        let mut c = cfg(RateMode::Unlimited, 10_000);
        c.threads = 8;
        c.weights = vec![9.0, 1.0];
        let r = run(
            Arc::new(Two),
            &["insert".into(), "query".into()],
            &c,
            |_| {},
        )
        .await;
        let (a, b) = (r.totals[0].ops, r.totals[1].ops);
        assert_eq!(a + b, 10_000);
        assert!((8_700..9_300).contains(&a), "{a} / {b}");
    }

    #[tokio::test(start_paused = true)]
    async fn errors_abort_unless_ignored() {
        struct Failing;
        impl Workload for Failing {
            async fn execute(&self, _op: usize, _rng: &mut Rng) -> Result<OpDone, String> {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Err("boom".into())
            }
        }
        let mut c = cfg(RateMode::Unlimited, 100);
        c.tries = 3;
        let r = run(Arc::new(Failing), &["WRITE".into()], &c, |_| {}).await;
        assert_eq!(r.aborted.as_deref(), Some("boom"));
        assert_eq!(r.total().errors, 1);
        c.ignore_errors = true;
        let r = run(Arc::new(Failing), &["WRITE".into()], &c, |_| {}).await;
        assert_eq!(r.aborted, None);
        assert_eq!(r.total().errors, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn hung_attempts_time_out_and_are_retried() {
        // The first attempt never answers; every other takes 1 ms.
        struct HangFirst(AtomicU64);
        impl Workload for HangFirst {
            async fn execute(&self, _op: usize, _rng: &mut Rng) -> Result<OpDone, String> {
                if self.0.fetch_add(1, Ordering::Relaxed) == 0 {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                Ok(OpDone {
                    partitions: 1,
                    rows: 1,
                })
            }
        }
        let mut c = cfg(RateMode::Unlimited, 10);
        c.tries = 2;
        c.op_timeout = Some(Duration::from_secs(1));
        let w = Arc::new(HangFirst(AtomicU64::new(0)));
        let r = run(w.clone(), &["READ".into()], &c, |_| {}).await;
        assert_eq!(r.aborted, None);
        let t = r.total();
        assert_eq!((t.ops, t.errors), (10, 0));
        assert_eq!(w.0.load(Ordering::Relaxed), 11, "one retry");
        // The retried operation waited for its first attempt's timeout (1 s, checked every
        // 125 ms); the others took 1 ms.
        let l = t.latency();
        assert!((1000.0..1200.0).contains(&l.max), "max {} ms", l.max);
        assert_eq!(t.hist.count_between(2_000, u64::MAX), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_operation_that_never_answers_fails_the_run_after_its_tries() {
        struct Hang;
        impl Workload for Hang {
            async fn execute(&self, _op: usize, _rng: &mut Rng) -> Result<OpDone, String> {
                std::future::pending().await
            }
        }
        let mut c = cfg(RateMode::Unlimited, 10);
        c.tries = 2;
        c.op_timeout = Some(Duration::from_millis(800));
        let r = run(Arc::new(Hang), &["WRITE".into()], &c, |_| {}).await;
        assert_eq!(
            r.aborted.as_deref(),
            Some("operation timed out after 800 ms")
        );
        assert_eq!((r.total().ops, r.total().errors), (0, 1));
        assert!(
            (1600..2000).contains(&r.elapsed.as_millis()),
            "two attempts of 0.8 s took {:?}",
            r.elapsed
        );
    }

    /// Records when each operation actually started (real time).
    struct Stamps(Mutex<Vec<std::time::Instant>>);

    impl Workload for Stamps {
        async fn execute(&self, _op: usize, _rng: &mut Rng) -> Result<OpDone, String> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(std::time::Instant::now());
            Ok(OpDone {
                partitions: 1,
                rows: 1,
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn precise_pacing_never_starts_early_and_runs_every_operation() {
        let r = never_starts_early_and_runs_every_operation().await;
        assert!(
            r.pacer_wakeups < 2_000,
            "{} pacer wake-ups",
            r.pacer_wakeups
        );
    }

    /// A current-thread runtime paces with [`spin_pacer`] instead of the OS thread.
    #[tokio::test(flavor = "current_thread")]
    async fn spin_pacing_never_starts_early_and_runs_every_operation() {
        let r = never_starts_early_and_runs_every_operation().await;
        // Operations 500 µs apart: the task sleeps on its timerfd between them (~400 turns
        // in these 0.2 s) instead of spinning (hundreds of thousands).
        assert!(r.pacer_wakeups < 4_000, "{} pacer turns", r.pacer_wakeups);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn spin_pacing_stops_at_the_deadline_and_on_errors() {
        stops_at_the_deadline_and_on_errors().await;
    }

    async fn never_starts_early_and_runs_every_operation() -> RunResult {
        let w = Arc::new(Stamps(Mutex::new(Vec::new())));
        let mut c = cfg(RateMode::Fixed(2000.0), 400);
        c.threads = 8;
        c.precise_pacing = true;
        let before = std::time::Instant::now();
        let r = run(w.clone(), &["READ".to_string()], &c, |_| {}).await;
        assert_eq!(r.total().ops, 400);
        let mut stamps = w.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        stamps.sort();
        assert_eq!(stamps.len(), 400);
        // The i-th start can not precede the i-th intended start, i / 2000 s after the start.
        for (i, t) in stamps.iter().enumerate() {
            let intended = before + Duration::from_secs_f64(i as f64 / 2000.0);
            assert!(
                *t + Duration::from_micros(1) >= intended,
                "op {i} started early"
            );
        }
        r
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn precise_pacing_behind_schedule_keeps_workers_busy_and_pacer_quiet() {
        // 4 workers, 2 ms operations: at most ~2,000 op/s against 100,000/s intended, so
        // the run is behind from the start and every worker should always have a permit.
        struct Slow;
        impl Workload for Slow {
            async fn execute(&self, _op: usize, _rng: &mut Rng) -> Result<OpDone, String> {
                std::thread::sleep(Duration::from_millis(2));
                Ok(OpDone {
                    partitions: 1,
                    rows: 1,
                })
            }
        }
        let mut c = cfg(RateMode::Fixed(100_000.0), u64::MAX);
        c.count = None;
        c.duration = Some(Duration::from_millis(500));
        c.threads = 4;
        c.precise_pacing = true;
        let r = run(Arc::new(Slow), &["READ".to_string()], &c, |_| {}).await;
        let ops = r.total().ops;
        // Two runtime threads each sleeping 2 ms per operation: ~500 in 0.5 s.
        assert!(ops >= 300, "workers starved of permits: {ops} ops");
        // Waking every 50 µs would be ~10,000 wake-ups in 0.5 s; behind, it is every 1 ms.
        assert!(
            r.pacer_wakeups < 2_000,
            "pacer woke {} times while behind",
            r.pacer_wakeups
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn precise_pacing_stops_at_the_deadline_and_on_errors() {
        stops_at_the_deadline_and_on_errors().await;
    }

    async fn stops_at_the_deadline_and_on_errors() {
        let w = Arc::new(Stamps(Mutex::new(Vec::new())));
        let mut c = cfg(RateMode::Fixed(500.0), u64::MAX);
        c.count = None;
        c.duration = Some(Duration::from_millis(400));
        c.threads = 4;
        c.precise_pacing = true;
        let r = run(w, &["READ".to_string()], &c, |_| {}).await;
        let ops = r.total().ops;
        assert!((150..=201).contains(&ops), "{ops} ops in 0.4 s at 500/s");

        struct Failing;
        impl Workload for Failing {
            async fn execute(&self, _op: usize, _rng: &mut Rng) -> Result<OpDone, String> {
                Err("boom".into())
            }
        }
        let mut c = cfg(RateMode::Fixed(1000.0), 1_000_000);
        c.threads = 4;
        c.precise_pacing = true;
        let r = run(Arc::new(Failing), &["WRITE".into()], &c, |_| {}).await;
        assert_eq!(r.aborted.as_deref(), Some("boom"));
    }
}
