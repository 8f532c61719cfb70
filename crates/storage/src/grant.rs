//! Core time a shard grants its background threads.
//!
//! The flush and compaction threads share the shard's core. In the kernel's fair class a
//! runnable one takes the core in turns of 1-4 ms whenever the scheduler deems it owed
//! time, and a request that arrives meanwhile waits that long (docs/benchmarks.md, "Writes
//! at 90%: the server's own threads hold the shard"). At `SCHED_IDLE`
//! ([`crate::config::SCHED_IDLE_NICE`]) they run only in time the shard leaves, and the
//! shard's wake-up takes the core back at once. A background thread that cannot wait for
//! idle time (a flush behind the writes' pace, or one that writes wait for) says so with
//! [`Wants::on`]; while one does, the shard makes sure it gets a share of the core: when
//! the shard was idle less than `grant_slice` in the last `grant_every` of requests, it
//! sleeps `grant_slice` ([`Granter::on_request`]). So the background work gets its share
//! in pieces no longer than a slice, and a shard with idle time of its own grants nothing.
//!
//! The shard also grants slices on its own account while compaction is owed time
//! ([`Granter::owed`]): reads pay for the compaction backlog (they read many SSTables
//! each) and the shard is too busy to leave compaction idle time. Without it a busy shard
//! starved the compaction that would have made its reads cheap (docs/benchmarks.md,
//! "Reads right after a write burst"). As an experiment (off by default) it is also owed
//! time while a number of compaction jobs are pending ([`compaction_owed`];
//! docs/benchmarks.md, "Compaction owed time for its backlog").

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Where a background thread on the shard's core waits while the shard runs requests.
///
/// Even at `SCHED_IDLE` a runnable thread is owed a sliver of the core (its weight is 3
/// against the shard's 1024) and the kernel pays it in whole turns of a few ms (measured:
/// 141 turns of 2.7 ms in 40 s of writes at 324k/s). So a background thread must not be
/// runnable at all while the shard is: between steps of a few tens of µs it calls
/// [`pass`], which blocks while the shard's event loop runs tasks. The shard opens the
/// gate when it parks (nothing to run: `ShardStorage::park_hook`, from the runtime's park
/// hook) and while it sleeps a granted slice ([`Granter`]), and closes it when it unparks.
/// A gate nobody drives (storage used off a shard runtime: tools, tests) stays open.
#[derive(Debug)]
pub struct Gate {
    /// The shard is running tasks.
    busy: AtomicBool,
    /// Time the shard was not running tasks, in ns (counted by the shard thread).
    idle_ns: AtomicU64,
    /// When it last stopped, in ns since `base`.
    stopped_at: AtomicU64,
    base: Instant,
    /// The background threads that want the shard's time: a lower thread (compaction)
    /// also waits while one does (the flush comes first).
    wants: Wants,
    /// Set at close: never wait again (the shard joins its threads).
    open_for_good: AtomicBool,
    /// Whether the shard's parks and unparks are counted ([`Gate::shard_running`]): only
    /// while something may be granted (the background gate is on, or compaction is owed
    /// time), so that an ungated shard pays no clock reads per park.
    tracking: AtomicBool,
    waiting: AtomicU32,
    lock: Mutex<()>,
    cv: Condvar,
}

/// Longest a background thread waits before it looks at the gate again (a safety net:
/// the shard's park wakes it).
const GATE_RECHECK: Duration = Duration::from_millis(20);

impl Gate {
    fn new(wants: Wants) -> Self {
        Gate {
            busy: AtomicBool::new(false),
            idle_ns: AtomicU64::new(0),
            stopped_at: AtomicU64::new(0),
            base: Instant::now(),
            wants,
            open_for_good: AtomicBool::new(false),
            tracking: AtomicBool::new(false),
            waiting: AtomicU32::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Time the shard was not running tasks so far (parked, or asleep for a grant).
    fn idle(&self) -> Duration {
        Duration::from_nanos(self.idle_ns.load(Ordering::Relaxed))
    }

    /// The shard starts (`true`) or stops (`false`) running tasks.
    #[inline]
    pub fn shard_running(&self, running: bool) {
        if self.tracking.load(Ordering::Relaxed) {
            self.set_running(running);
        }
    }

    fn set_running(&self, running: bool) {
        let was = self.busy.swap(running, Ordering::SeqCst);
        if was && !running {
            self.stopped_at.store(self.now_ns(), Ordering::Relaxed);
        } else if !was && running {
            let idle = self
                .now_ns()
                .saturating_sub(self.stopped_at.load(Ordering::Relaxed));
            self.idle_ns.fetch_add(idle, Ordering::Relaxed);
        }
        if !running && self.waiting.load(Ordering::SeqCst) > 0 {
            // Taken so a waiter between its check and its wait does not miss the wake-up.
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.cv.notify_all();
        }
    }

    /// Opens the gate for good (the storage is closing).
    pub(crate) fn open_for_good(&self) {
        self.open_for_good.store(true, Ordering::SeqCst);
        self.set_running(false);
    }

    fn pass(&self, lower: bool) {
        let wait_for_wants = |g: &Gate| lower && g.wants.wanted();
        if !self.busy.load(Ordering::Relaxed) && !wait_for_wants(self) {
            return;
        }
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while !self.open_for_good.load(Ordering::SeqCst) {
            let recheck = if self.busy.load(Ordering::SeqCst) {
                GATE_RECHECK
            } else if wait_for_wants(self) {
                // Wants end with no wake-up: look again soon.
                WANTS_RECHECK
            } else {
                break;
            };
            g = match self.cv.wait_timeout(g, recheck) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How often a lower background thread looks whether the flush still wants time.
const WANTS_RECHECK: Duration = Duration::from_millis(1);

thread_local! {
    /// The gate of the shard whose background thread this is (set by the worker).
    /// `true`: a lower thread, which also waits while another wants time.
    static GATE: std::cell::RefCell<Option<(Arc<Gate>, bool)>> = const { std::cell::RefCell::new(None) };
}

/// Makes `gate` the calling background thread's gate; a `lower` thread (compaction) also
/// waits while another (a flush) wants the shard's time.
pub(crate) fn set_thread_gate(gate: Option<Arc<Gate>>, lower: bool) {
    GATE.with(|g| *g.borrow_mut() = gate.map(|gate| (gate, lower)));
}

/// Called by background work between steps of a few tens of µs: waits while the shard
/// of the calling thread runs tasks (returns at once off a gated thread).
#[inline]
pub(crate) fn pass() {
    GATE.with(|g| {
        if let Some((g, lower)) = g.borrow().as_ref() {
            g.pass(*lower);
        }
    });
}

/// How many background threads want granted time (shared by the shard and its threads).
#[derive(Clone, Default, Debug)]
pub(crate) struct Wants(Arc<AtomicU32>);

impl Wants {
    /// Wants time until the guard drops.
    pub(crate) fn on(&self) -> WantOn {
        self.0.fetch_add(1, Ordering::Relaxed);
        WantOn(self.clone())
    }

    /// Stops wanting time until the guard drops (a paced flush ahead of its pace, napping
    /// inside a wanting job).
    pub(crate) fn off(&self) -> WantOff {
        self.0.fetch_sub(1, Ordering::Relaxed);
        WantOff(self.clone())
    }

    #[inline]
    pub(crate) fn wanted(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }
}

pub(crate) struct WantOn(Wants);

impl Drop for WantOn {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) struct WantOff(Wants);

impl Drop for WantOff {
    fn drop(&mut self) {
        (self.0).0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The shard's side: when to sleep for the background threads.
#[derive(Debug)]
pub(crate) struct Granter {
    pub(crate) wants: Wants,
    pub(crate) gate: Arc<Gate>,
    slice: Duration,
    every: Duration,
    /// When the current window of `every` ends (set when a want is first seen), and the
    /// shard's idle time when it started.
    due: Option<Instant>,
    idle_at_start: Duration,
    /// Compaction is owed time: the shard grants slices as if a thread wanted them (set by
    /// the shard from its reads' amplification, [`ReadAmplification`], with
    /// [`Granter::set_owed`]). The compaction thread does not wait at the gate for this,
    /// unlike for a flush's want.
    owed: bool,
    /// Compaction is owed a share of the core for its backlog
    /// ([`Granter::set_backlog_share`]): a slice per this window (`None`: nothing owed on
    /// that account).
    backlog_every: Option<Duration>,
    /// Whether a thread's [`Wants`] are granted (with the background gate: a flush that
    /// wants time is not otherwise starved, and an ungated one runs at its own priority).
    grant_wants: bool,
    /// Slices granted so far.
    pub(crate) granted: u64,
}

impl Granter {
    pub(crate) fn new(slice: Duration, every: Duration, grant_wants: bool) -> Self {
        let wants = Wants::default();
        let gate = Gate::new(wants.clone());
        gate.tracking.store(grant_wants, Ordering::Relaxed);
        Granter {
            gate: Arc::new(gate),
            wants,
            slice,
            every,
            due: None,
            idle_at_start: Duration::ZERO,
            owed: false,
            backlog_every: None,
            grant_wants,
            granted: 0,
        }
    }

    /// Sets whether compaction is owed time; called on the shard thread while it runs a
    /// request. Without the background gate the shard's parks are counted only while it is.
    pub(crate) fn set_owed(&mut self, owed: bool) {
        if owed == self.owed {
            return;
        }
        self.owed = owed;
        self.update_tracking();
    }

    /// Sets the share of the core (0..=1) compaction is owed for its backlog: while the
    /// shard has less idle time of its own, it sleeps a slice every `slice / share`
    /// (ScyllaDB's backlog controller, with the shard's sleeps as the compaction's
    /// shares). Zero: none. Called on the shard thread.
    pub(crate) fn set_backlog_share(&mut self, share: f64) {
        let every = (share.is_finite() && share > 0.0 && !self.slice.is_zero())
            .then(|| self.slice.div_f64(share.min(1.0)));
        if every == self.backlog_every {
            return;
        }
        self.backlog_every = every;
        self.update_tracking();
    }

    /// Without the background gate, the shard's parks are counted only while something
    /// is owed.
    fn update_tracking(&mut self) {
        if self.grant_wants {
            return;
        }
        let track = self.owed || self.backlog_every.is_some();
        if track && !self.gate.tracking.load(Ordering::Relaxed) {
            // The shard is running (a request): counted from here on.
            self.gate.set_running(true);
        }
        self.gate.tracking.store(track, Ordering::Relaxed);
    }

    pub(crate) fn owed(&self) -> bool {
        self.owed
    }

    /// Called for each request the shard runs: sleeps a slice when a background thread
    /// wants time (or compaction is [`Self::owed`] time) and the window that just ended
    /// left it less than a slice idle.
    #[inline]
    pub(crate) fn on_request(&mut self) {
        // A gate no event loop drives (busy only between its unparks) has no background
        // thread waiting at it: nothing to grant.
        if !(self.owed || self.backlog_every.is_some() || (self.grant_wants && self.wants.wanted()))
            || self.slice.is_zero()
            || !self.gate.busy.load(Ordering::Relaxed)
        {
            self.due = None;
            return;
        }
        self.grant();
    }

    #[cold]
    fn grant(&mut self) {
        let now = Instant::now();
        match self.due {
            Some(d) if now < d => return,
            Some(_) if self.gate.idle().saturating_sub(self.idle_at_start) < self.slice => {
                self.gate.shard_running(false);
                std::thread::sleep(self.slice);
                self.gate.shard_running(true);
                self.granted += 1;
            }
            _ => {}
        }
        self.idle_at_start = self.gate.idle();
        self.due = Some(Instant::now() + self.window());
    }

    /// The window of requests per granted slice: the backlog's, or the fixed one while a
    /// thread wants time or compaction is owed it for the reads' sake (the shorter).
    fn window(&self) -> Duration {
        let wanted = self.owed || (self.grant_wants && self.wants.wanted());
        match self.backlog_every {
            Some(b) if wanted => b.min(self.every),
            Some(b) => b,
            None => self.every,
        }
    }
}

/// Whether compaction is owed the shard's time: its reads read many SSTables each
/// (`amplified`, from [`ReadAmplification`]) while a compaction runs, or `pending` jobs
/// (running and queued) reached `pending_threshold` (0: never on that account).
pub(crate) fn compaction_owed(amplified: bool, pending: u64, pending_threshold: u64) -> bool {
    (amplified && pending > 0) || (pending_threshold > 0 && pending >= pending_threshold)
}

/// SSTables read per read over the last [`ReadAmplification::WINDOW`] reads: while it is
/// at least `threshold` and a compaction is running, the compaction is owed core time.
#[derive(Debug)]
pub(crate) struct ReadAmplification {
    threshold: f64,
    reads: u32,
    sstables: u32,
}

impl ReadAmplification {
    /// Reads per verdict.
    const WINDOW: u32 = 256;

    /// `threshold` 0 turns it off.
    pub(crate) fn new(threshold: f64) -> Self {
        ReadAmplification {
            threshold,
            reads: 0,
            sstables: 0,
        }
    }

    /// Counts a read of `sstables` SSTables; at the end of a window returns whether its
    /// reads averaged at least the threshold.
    #[inline]
    pub(crate) fn read(&mut self, sstables: u32) -> Option<bool> {
        self.reads += 1;
        self.sstables = self.sstables.saturating_add(sstables);
        if self.reads < Self::WINDOW {
            return None;
        }
        let high = self.threshold > 0.0
            && f64::from(self.sstables) >= self.threshold * f64::from(self.reads);
        self.reads = 0;
        self.sstables = 0;
        Some(high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wants_count_guards() {
        let w = Wants::default();
        assert!(!w.wanted());
        let on = w.on();
        assert!(w.wanted());
        {
            let _off = w.off();
            assert!(!w.wanted());
        }
        assert!(w.wanted());
        drop(on);
        assert!(!w.wanted());
    }

    #[test]
    fn granter_sleeps_only_while_wanted_due_and_short_of_idle_time() {
        let mut g = Granter::new(Duration::from_micros(50), Duration::from_millis(2), true);
        g.gate.shard_running(true);
        g.on_request();
        assert_eq!(g.granted, 0, "nothing wanted");
        let _on = g.wants.on();
        g.on_request();
        assert_eq!(g.granted, 0, "the first want only starts the window");
        std::thread::sleep(Duration::from_millis(3));
        let t = Instant::now();
        g.on_request();
        assert_eq!(g.granted, 1, "a busy window ended: a slice");
        assert!(t.elapsed() >= Duration::from_micros(50));
        g.on_request();
        assert_eq!(g.granted, 1, "the next window has not ended");
        // A window with idle time of its own grants nothing.
        g.gate.shard_running(false);
        std::thread::sleep(Duration::from_millis(1));
        g.gate.shard_running(true);
        std::thread::sleep(Duration::from_millis(2));
        g.on_request();
        assert_eq!(g.granted, 1, "the shard was idle 1 ms of the window");
        std::thread::sleep(Duration::from_millis(3));
        g.on_request();
        assert_eq!(g.granted, 2);
    }

    #[test]
    fn a_backlog_share_grants_a_slice_per_its_window() {
        let mut g = Granter::new(Duration::from_micros(50), Duration::from_millis(2), false);
        g.gate.shard_running(true);
        g.set_backlog_share(0.0);
        g.on_request();
        std::thread::sleep(Duration::from_millis(3));
        g.on_request();
        assert_eq!(g.granted, 0, "no share: nothing granted");
        // 50 µs per 10 ms: a window of 3 ms has not ended, one of 11 ms has.
        g.set_backlog_share(0.005);
        assert_eq!(g.window(), Duration::from_millis(10));
        g.on_request();
        std::thread::sleep(Duration::from_millis(3));
        g.on_request();
        assert_eq!(
            g.granted, 0,
            "the backlog's window is longer than the fixed one"
        );
        std::thread::sleep(Duration::from_millis(8));
        g.on_request();
        assert_eq!(g.granted, 1, "a busy backlog window ended: a slice");
        // Owed for the reads too: the shorter window of the two.
        g.set_owed(true);
        assert_eq!(g.window(), Duration::from_millis(2));
        g.set_owed(false);
        // A larger share than the fixed window's: its own, shorter window.
        g.set_backlog_share(0.5);
        assert_eq!(g.window(), Duration::from_micros(100));
        g.set_backlog_share(0.0);
        assert!(
            !g.gate.tracking.load(Ordering::Relaxed),
            "nothing owed: parks not counted"
        );
    }

    #[test]
    fn owed_time_is_granted_without_wants_and_without_closing_the_gate_to_compaction() {
        // Wants are not granted here (no background gate), owed time is.
        let mut g = Granter::new(Duration::from_micros(50), Duration::from_millis(2), false);
        g.gate.shard_running(true);
        let want = g.wants.on();
        g.on_request();
        std::thread::sleep(Duration::from_millis(3));
        g.on_request();
        assert_eq!(g.granted, 0, "a want is not granted without the gate");
        drop(want);
        g.set_owed(true);
        g.on_request();
        std::thread::sleep(Duration::from_millis(3));
        g.on_request();
        assert_eq!(g.granted, 1, "owed time is granted");
        // The compaction thread (lower) does not wait for owed time as for a flush's want.
        g.gate.shard_running(false);
        let gate = g.gate.clone();
        std::thread::spawn(move || {
            set_thread_gate(Some(gate), true);
            pass();
        })
        .join()
        .expect("join");
        g.gate.shard_running(true);
        g.set_owed(false);
        std::thread::sleep(Duration::from_millis(3));
        g.on_request();
        assert_eq!(g.granted, 1, "nothing owed, nothing wanted");
        // Not owed and no gate: parks are not counted.
        let idle_before_untracked = g.gate.idle();
        g.gate.shard_running(false);
        std::thread::sleep(Duration::from_millis(1));
        g.gate.shard_running(true);
        assert_eq!(
            g.gate.idle(),
            idle_before_untracked,
            "an untracked park counted"
        );
    }

    #[test]
    fn compaction_is_owed_for_amplified_reads_or_a_queue_behind_the_running_job() {
        assert!(
            !compaction_owed(true, 0, 2),
            "nothing running: nothing owed"
        );
        assert!(
            compaction_owed(true, 1, 2),
            "reads amplified while one runs"
        );
        assert!(!compaction_owed(false, 1, 2), "one running, none queued");
        assert!(
            compaction_owed(false, 2, 2),
            "one queued behind the running one"
        );
        assert!(compaction_owed(false, 9, 2));
        assert!(!compaction_owed(false, 9, 0), "threshold 0 is off");
        assert!(compaction_owed(true, 9, 0), "amplification still counts");
    }

    #[test]
    fn read_amplification_decides_per_window() {
        let mut a = ReadAmplification::new(2.0);
        for _ in 1..ReadAmplification::WINDOW {
            assert_eq!(a.read(1), None);
        }
        assert_eq!(a.read(1), Some(false), "one SSTable per read");
        for i in 1..=ReadAmplification::WINDOW {
            let v = a.read(if i % 2 == 0 { 4 } else { 0 });
            assert_eq!(v, (i == ReadAmplification::WINDOW).then_some(true));
        }
        let mut off = ReadAmplification::new(0.0);
        let v = (0..ReadAmplification::WINDOW)
            .filter_map(|_| off.read(16))
            .last();
        assert_eq!(v, Some(false), "threshold 0 is off");
    }

    #[test]
    fn an_undriven_gate_grants_nothing_and_lets_everyone_pass() {
        let mut g = Granter::new(Duration::from_micros(50), Duration::from_micros(1), true);
        let _on = g.wants.on();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_micros(10));
            g.on_request();
        }
        assert_eq!(g.granted, 0);
        set_thread_gate(Some(g.gate.clone()), false);
        pass();
        set_thread_gate(None, false);
    }

    #[test]
    fn pass_waits_while_the_shard_runs() {
        let wants = Wants::default();
        let gate = Arc::new(Gate::new(wants.clone()));
        gate.tracking.store(true, Ordering::Relaxed);
        gate.shard_running(true);
        let passed = Arc::new(AtomicBool::new(false));
        let spawn = |lower: bool| {
            let (gate, passed) = (gate.clone(), passed.clone());
            std::thread::spawn(move || {
                set_thread_gate(Some(gate), lower);
                pass();
                passed.store(true, Ordering::SeqCst);
            })
        };
        let t = spawn(false);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!passed.load(Ordering::SeqCst), "passed while the shard ran");
        gate.shard_running(false);
        t.join().expect("join");
        assert!(passed.load(Ordering::SeqCst));
        // A lower thread also waits while another wants time, with the shard parked.
        passed.store(false, Ordering::SeqCst);
        let on = wants.on();
        let t = spawn(true);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !passed.load(Ordering::SeqCst),
            "a lower thread passed a want"
        );
        drop(on);
        t.join().expect("join");
        assert!(passed.load(Ordering::SeqCst));
        // Opened for good: nobody waits, even while the shard runs.
        gate.shard_running(true);
        gate.open_for_good();
        gate.shard_running(true);
        spawn(false).join().expect("join");
    }
}
