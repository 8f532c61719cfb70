//! amphora-trace: request tracing (`TRACING ON`, the protocol's tracing flag, and
//! probabilistic tracing set by `nodetool settraceprobability`) and the slow-query log.
//!
//! Owns: the trace context of one request ([`Session`]), carried by the request's task in a
//! tokio task-local so any layer (coordinator, replica, storage) can record an event with
//! [`event`] without threading a parameter through every call; and the node's store of
//! finished sessions ([`store`]) that `system_traces.sessions` / `system_traces.events` read.
//!
//! Must never depend on: any other amphora crate (every layer may record events).
//!
//! Cost when a request is not traced: one task-local lookup per [`event`] call, no
//! allocation, no lock (the activity text is built by a closure only when traced). The store
//! takes a lock only for traced requests.
//!
//! Cross-shard hops: a task-local does not follow a message to another shard, so the code
//! that sends work to another shard captures [`current`] and runs the remote future in
//! [`scope`] there; events are appended under the session's own lock, tagged with the shard.
//!
//! Client warnings (the protocol's WARNING flag, e.g. a batch over
//! `batch_size_warn_threshold`): the transport runs each request in [`with_warnings`], and
//! any layer adds a warning with [`warn`], like Cassandra's `ClientWarn`. Outside such a
//! scope (or on another shard) a warning is dropped; it costs one task-local lookup.

use std::collections::VecDeque;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a finished session is kept (Cassandra's traces expire after one day).
pub const TRACE_TTL: Duration = Duration::from_secs(24 * 3600);
/// Most finished sessions kept; the oldest are dropped first.
pub const MAX_SESSIONS: usize = 10_000;
/// Most events recorded for one session (a huge scan could otherwise trace without bound).
pub const MAX_EVENTS_PER_SESSION: usize = 1_000;

/// One recorded step of a traced request.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Time-based (v1) uuid: the event's time, unique and ordered within the session.
    pub event_id: [u8; 16],
    pub activity: String,
    /// Microseconds since the session started.
    pub source_elapsed_us: i32,
    /// Where it ran, e.g. `shard 1`.
    pub thread: String,
}

/// What describes a session besides its events.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    pub session_id: [u8; 16],
    pub client: IpAddr,
    pub coordinator: IpAddr,
    pub coordinator_port: i32,
    /// e.g. `QUERY`, `EXECUTE`, `BATCH`.
    pub command: String,
    /// e.g. `Execute CQL3 query`.
    pub request: String,
    pub parameters: Vec<(String, String)>,
    /// Milliseconds since the epoch.
    pub started_at_ms: i64,
}

/// A finished session as `system_traces` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedSession {
    pub info: SessionInfo,
    /// Microseconds the whole request took.
    pub duration_us: i32,
    pub events: Vec<Event>,
    finished: Instant,
}

/// The trace of one request in flight.
#[derive(Debug)]
pub struct Session {
    info: Mutex<SessionInfo>,
    started: Instant,
    /// Node bytes of the event uuids.
    node: [u8; 6],
    events: Mutex<Vec<Event>>,
}

impl Session {
    pub fn new(info: SessionInfo) -> Arc<Session> {
        let id = info.session_id;
        Arc::new(Session {
            info: Mutex::new(info),
            started: Instant::now(),
            node: [id[10], id[11], id[12], id[13], id[14], id[15]],
            events: Mutex::new(Vec::new()),
        })
    }

    pub fn session_id(&self) -> [u8; 16] {
        lock(&self.info).session_id
    }

    /// Adds a request parameter (`query`, `consistency_level`, `page_size`...).
    pub fn set_parameter(&self, key: &str, value: String) {
        let mut info = lock(&self.info);
        match info.parameters.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => info.parameters.push((key.to_string(), value)),
        }
    }

    pub fn set_request(&self, request: &str) {
        lock(&self.info).request = request.to_string();
    }

    pub fn record(&self, activity: String, thread: String) {
        let elapsed = self.started.elapsed();
        let mut events = lock(&self.events);
        if events.len() >= MAX_EVENTS_PER_SESSION {
            return;
        }
        let seq = events.len() as u16;
        let started_at_ms = lock(&self.info).started_at_ms;
        events.push(Event {
            event_id: time_uuid(started_at_ms, elapsed, seq, self.node),
            activity,
            source_elapsed_us: clamp_us(elapsed),
            thread,
        });
    }

    /// Ends the session and hands it to the node's store.
    pub fn finish(&self) {
        let duration = self.started.elapsed();
        let finished = FinishedSession {
            info: lock(&self.info).clone(),
            duration_us: clamp_us(duration),
            events: std::mem::take(&mut *lock(&self.events)),
            finished: Instant::now(),
        };
        store().insert(finished);
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

fn clamp_us(d: Duration) -> i32 {
    d.as_micros().min(i32::MAX as u128) as i32
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A v1 uuid for the instant `started_at_ms + elapsed`, with `seq` as clock sequence so the
/// events of one session are distinct and sort in recording order.
fn time_uuid(started_at_ms: i64, elapsed: Duration, seq: u16, node: [u8; 6]) -> [u8; 16] {
    // 100 ns ticks since 1582-10-15, the uuid epoch.
    const GREGORIAN_OFFSET_TICKS: u64 = 0x01B2_1DD2_1381_4000;
    let unix_ticks = (started_at_ms.max(0) as u64) * 10_000 + (elapsed.as_nanos() / 100) as u64;
    let ts =
        uuid::Timestamp::from_gregorian_time(GREGORIAN_OFFSET_TICKS + unix_ticks, seq & 0x3fff);
    *uuid::Uuid::new_v1(ts, &node).as_bytes()
}

/// A fresh time-based session id for this node (`node` = 6 bytes of the host id).
pub fn new_session_id(node: [u8; 6]) -> [u8; 16] {
    use std::sync::atomic::AtomicU16;
    static SEQ: AtomicU16 = AtomicU16::new(0);
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let ms = since_epoch.as_millis() as i64;
    let sub_ms = since_epoch - Duration::from_millis(ms as u64);
    time_uuid(ms, sub_ms, SEQ.fetch_add(1, Ordering::Relaxed), node)
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

tokio::task_local! {
    static CURRENT: (Arc<Session>, String);
}

/// Records an event on the current request's trace, if it is traced. `activity` runs only then.
pub fn event(activity: impl FnOnce() -> String) {
    let _ = CURRENT.try_with(|(s, thread)| s.record(activity(), thread.clone()));
}

/// Whether the current task's request is traced.
pub fn is_traced() -> bool {
    CURRENT.try_with(|_| ()).is_ok()
}

/// The current request's trace, to carry to another shard.
pub fn current() -> Option<Arc<Session>> {
    CURRENT.try_with(|(s, _)| s.clone()).ok()
}

/// Runs `f` with `session` as its trace (or untraced when `None`); `thread` names where it
/// runs in the events (e.g. `shard 0`).
pub async fn scope<F: Future>(session: Option<Arc<Session>>, thread: String, f: F) -> F::Output {
    match session {
        Some(s) => CURRENT.scope((s, thread), f).await,
        None => f.await,
    }
}

/// Most warnings kept for one request; later ones are dropped.
pub const MAX_WARNINGS_PER_REQUEST: usize = 32;

tokio::task_local! {
    static WARNINGS: std::cell::RefCell<Vec<String>>;
}

/// Adds a warning for the client to the current request's answer (no-op outside
/// [`with_warnings`]).
pub fn warn(message: impl Into<String>) {
    let _ = WARNINGS.try_with(|w| {
        let mut w = w.borrow_mut();
        if w.len() < MAX_WARNINGS_PER_REQUEST {
            w.push(message.into());
        }
    });
}

/// Runs `f` collecting the warnings [`warn`] adds while it runs; returns them in order.
///
/// A plain future rather than an `async fn`: it holds `f` (boxed by the caller when large)
/// and the list, which is the task-local only while `f` is polled, so starting a request
/// copies no nested state machine.
pub fn with_warnings<F: Future + Unpin>(f: F) -> WithWarnings<F> {
    WithWarnings {
        f,
        warnings: Vec::new(),
    }
}

/// [`with_warnings`] for work that does not wait: runs `f` and returns what it returned
/// with the warnings [`warn`] added meanwhile.
pub fn warnings_of<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    WARNINGS.sync_scope(std::cell::RefCell::new(Vec::new()), || {
        let r = f();
        let list = WARNINGS
            .try_with(|w| std::mem::take(&mut *w.borrow_mut()))
            .unwrap_or_default();
        (r, list)
    })
}

/// The future of [`with_warnings`].
pub struct WithWarnings<F> {
    f: F,
    warnings: Vec<String>,
}

impl<F: Future + Unpin> Future for WithWarnings<F> {
    type Output = (F::Output, Vec<String>);

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.get_mut();
        let f = &mut this.f;
        let list = std::cell::RefCell::new(std::mem::take(&mut this.warnings));
        let (r, list) = WARNINGS.sync_scope(list, || {
            let r = std::pin::Pin::new(f).poll(cx);
            let list = WARNINGS
                .try_with(|w| std::mem::take(&mut *w.borrow_mut()))
                .unwrap_or_default();
            (r, list)
        });
        match r {
            std::task::Poll::Ready(out) => std::task::Poll::Ready((out, list)),
            std::task::Poll::Pending => {
                this.warnings = list;
                std::task::Poll::Pending
            }
        }
    }
}

/// The node's finished sessions, oldest first, bounded by [`MAX_SESSIONS`] and [`TRACE_TTL`].
#[derive(Debug, Default)]
pub struct Store {
    sessions: Mutex<VecDeque<Arc<FinishedSession>>>,
}

impl Store {
    fn insert(&self, s: FinishedSession) {
        let mut q = lock(&self.sessions);
        while q.len() >= MAX_SESSIONS {
            q.pop_front();
        }
        while q.front().is_some_and(|f| f.finished.elapsed() > TRACE_TTL) {
            q.pop_front();
        }
        q.push_back(Arc::new(s));
    }

    /// Every session kept, oldest first.
    pub fn sessions(&self) -> Vec<Arc<FinishedSession>> {
        let q = lock(&self.sessions);
        q.iter()
            .filter(|f| f.finished.elapsed() <= TRACE_TTL)
            .cloned()
            .collect()
    }

    pub fn get(&self, session_id: &[u8; 16]) -> Option<Arc<FinishedSession>> {
        let q = lock(&self.sessions);
        q.iter()
            .rev()
            .find(|f| &f.info.session_id == session_id)
            .cloned()
    }

    pub fn clear(&self) {
        lock(&self.sessions).clear();
    }
}

/// The node's store of finished sessions.
pub fn store() -> &'static Store {
    static STORE: OnceLock<Store> = OnceLock::new();
    STORE.get_or_init(Store::default)
}

/// Probability of tracing a request the client did not ask to trace (f64 bits; 0 = never).
static PROBABILITY: AtomicU64 = AtomicU64::new(0);
/// Requests slower than this many microseconds are logged (0 = off).
static SLOW_QUERY_US: AtomicU64 = AtomicU64::new(500_000);

/// `nodetool settraceprobability`: 0.0..=1.0.
pub fn set_probability(p: f64) -> Result<(), TraceError> {
    if !(0.0..=1.0).contains(&p) || p.is_nan() {
        return Err(TraceError::BadProbability(p));
    }
    PROBABILITY.store(p.to_bits(), Ordering::Relaxed);
    Ok(())
}

pub fn probability() -> f64 {
    f64::from_bits(PROBABILITY.load(Ordering::Relaxed))
}

/// Whether a request the client did not ask to trace is traced anyway (one relaxed load
/// when the probability is 0, the default).
pub fn sample() -> bool {
    let bits = PROBABILITY.load(Ordering::Relaxed);
    if bits == 0 {
        return false;
    }
    let p = f64::from_bits(bits);
    p >= 1.0 || next_random() < p
}

/// A thread-local xorshift: sampling needs no quality, only no shared state.
fn next_random() -> f64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x9e37_79b9_7f4a_7c15)
                | 1,
        );
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// Sets the slow-query threshold (`slow_query_log_timeout` in cassandra.yaml; 0 = off).
pub fn set_slow_query_threshold(t: Duration) {
    SLOW_QUERY_US.store(
        t.as_micros().min(u64::MAX as u128) as u64,
        Ordering::Relaxed,
    );
}

pub fn slow_query_threshold() -> Duration {
    Duration::from_micros(SLOW_QUERY_US.load(Ordering::Relaxed))
}

/// The monotonic clock at the kernel's tick resolution (`CLOCK_MONOTONIC_COARSE`, a few
/// ms): a fraction of the precise clock's cost, and enough to time every request against
/// the slow-query threshold (hundreds of ms).
///
/// Read through glibc (its vDSO call), not rustix: rustix parses the vDSO itself, and under
/// valgrind (callgrind instruction counts of the server) that parse reads an unmapped
/// address and kills the process (rustix issue 1559).
pub fn coarse_now() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call; the clock id
    // is a constant the kernel has had since 2.6.32. On failure (never, for this clock) `t`
    // stays zero and callers see a zero duration.
    #[allow(unsafe_code)]
    let _ = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// A start time for [`check_slow_since`] when slow queries are logged, else `None`.
pub fn slow_timer() -> Option<Duration> {
    (SLOW_QUERY_US.load(Ordering::Relaxed) != 0).then(coarse_now)
}

/// [`check_slow`] for work started at `started` (from [`slow_timer`]).
pub fn check_slow_since(started: Option<Duration>, describe: impl FnOnce() -> String) -> bool {
    started.is_some_and(|s| check_slow(coarse_now().saturating_sub(s), describe))
}

/// Logs `describe()` at WARN when `elapsed` is above the slow-query threshold.
pub fn check_slow(elapsed: Duration, describe: impl FnOnce() -> String) -> bool {
    let t = SLOW_QUERY_US.load(Ordering::Relaxed);
    if t == 0 || (elapsed.as_micros() as u64) < t {
        return false;
    }
    tracing::warn!(
        target: "amphora::slow_query",
        elapsed_ms = elapsed.as_secs_f64() * 1000.0,
        "slow query ({:.1} ms > {} ms): {}",
        elapsed.as_secs_f64() * 1000.0,
        t / 1000,
        describe()
    );
    true
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceError {
    #[error("trace probability must be between 0 and 1, got {0}")]
    BadProbability(f64),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u8) -> SessionInfo {
        SessionInfo {
            session_id: [id; 16],
            client: IpAddr::from([127, 0, 0, 1]),
            coordinator: IpAddr::from([127, 0, 0, 1]),
            coordinator_port: 9042,
            command: "QUERY".into(),
            request: "Execute CQL3 query".into(),
            parameters: vec![("query".into(), "SELECT 1".into())],
            started_at_ms: now_ms(),
        }
    }

    #[tokio::test]
    async fn events_follow_the_task_and_land_in_the_store() {
        let s = Session::new(info(1));
        assert!(!is_traced());
        scope(Some(s.clone()), "shard 0".into(), async {
            assert!(is_traced());
            event(|| "Parsing SELECT 1".into());
            // A hop to another shard: the receiver re-enters the scope with the captured session.
            let carried = current();
            scope(carried, "shard 1".into(), async {
                event(|| "Reading memtable".into());
            })
            .await;
        })
        .await;
        // Outside the scope nothing is recorded, and the closure does not even run.
        event(|| unreachable!("not traced"));
        s.set_parameter("consistency_level", "ONE".into());
        s.finish();
        let f = store().get(&[1; 16]).expect("finished session is stored");
        assert_eq!(f.events.len(), 2);
        assert_eq!(f.events[0].activity, "Parsing SELECT 1");
        assert_eq!(f.events[0].thread, "shard 0");
        assert_eq!(f.events[1].thread, "shard 1");
        assert!(f.events[0].event_id != f.events[1].event_id);
        // Event ids are v1 uuids in recording order.
        let t0 = uuid::Uuid::from_bytes(f.events[0].event_id);
        let t1 = uuid::Uuid::from_bytes(f.events[1].event_id);
        assert_eq!(t0.get_version_num(), 1);
        let (a, b) = (
            t0.get_timestamp().map(|t| t.to_gregorian()),
            t1.get_timestamp().map(|t| t.to_gregorian()),
        );
        assert!(a <= b, "{a:?} <= {b:?}");
        assert!(f.duration_us >= f.events[1].source_elapsed_us);
        let a = new_session_id([1, 2, 3, 4, 5, 6]);
        let b = new_session_id([1, 2, 3, 4, 5, 6]);
        assert_ne!(a, b);
        assert_eq!(uuid::Uuid::from_bytes(a).get_version_num(), 1);
        assert!(
            f.info
                .parameters
                .contains(&("consistency_level".into(), "ONE".into()))
        );
    }

    #[test]
    fn warnings_of_collects_what_the_work_warned_and_nothing_after() {
        let (n, w) = warnings_of(|| {
            warn("one");
            warn(String::from("two"));
            7
        });
        assert_eq!((n, w), (7, vec!["one".to_string(), "two".to_string()]));
        warn("outside any request");
        let ((), w) = warnings_of(|| ());
        assert!(w.is_empty(), "a warning outside the scope leaked in: {w:?}");
    }

    #[tokio::test]
    async fn warnings_are_collected_per_request_and_bounded() {
        // Outside a scope a warning goes nowhere.
        warn("dropped");
        let ((), w) = with_warnings(Box::pin(async {
            warn("first");
            tokio::task::yield_now().await;
            warn(String::from("second"));
        }))
        .await;
        assert_eq!(w, vec!["first".to_string(), "second".to_string()]);
        // Nested requests (a request inside a request's scope) keep their own lists, also
        // across a suspension of the inner one.
        let (inner, outer) = with_warnings(Box::pin(async {
            warn("outer");
            let inner = with_warnings(Box::pin(async {
                warn("inner");
                tokio::task::yield_now().await;
                warn("inner again");
            }))
            .await
            .1;
            warn("outer again");
            inner
        }))
        .await;
        assert_eq!(inner, vec!["inner".to_string(), "inner again".to_string()]);
        assert_eq!(outer, vec!["outer".to_string(), "outer again".to_string()]);
        let ((), many) = with_warnings(Box::pin(async {
            for i in 0..MAX_WARNINGS_PER_REQUEST + 5 {
                warn(format!("w{i}"));
            }
        }))
        .await;
        assert_eq!(many.len(), MAX_WARNINGS_PER_REQUEST);
        assert_eq!(many[0], "w0");
    }

    /// Requests are timed with the coarse clock: work well past the threshold is reported
    /// slow, work well under it is not, and with the log off nothing is timed.
    /// The slow-query threshold is process-wide: the tests that set it take turns.
    static THRESHOLD: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn slow_queries_are_timed_with_the_coarse_clock() {
        let _turn = THRESHOLD.lock().unwrap_or_else(|p| p.into_inner());
        set_slow_query_threshold(Duration::from_millis(20));
        let started = slow_timer();
        assert!(started.is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(check_slow_since(started, || "slow".into()));
        assert!(!check_slow_since(slow_timer(), || "fast".into()));
        let a = coarse_now();
        std::thread::sleep(Duration::from_millis(30));
        let elapsed = coarse_now() - a;
        assert!(
            elapsed >= Duration::from_millis(20) && elapsed < Duration::from_secs(5),
            "{elapsed:?}"
        );
        set_slow_query_threshold(Duration::ZERO);
        assert_eq!(slow_timer(), None);
        assert!(!check_slow_since(None, || "off".into()));
        set_slow_query_threshold(Duration::from_millis(500));
    }

    #[test]
    fn events_per_session_are_bounded() {
        let s = Session::new(info(2));
        for i in 0..MAX_EVENTS_PER_SESSION + 10 {
            s.record(format!("e{i}"), "shard 0".into());
        }
        s.finish();
        let f = store().get(&[2; 16]).expect("stored");
        assert_eq!(f.events.len(), MAX_EVENTS_PER_SESSION);
    }

    #[test]
    fn probability_is_validated_and_sampled() {
        assert!(set_probability(1.5).is_err());
        assert!(set_probability(-0.1).is_err());
        assert!(set_probability(f64::NAN).is_err());
        set_probability(0.0).expect("valid");
        assert!((0..1000).all(|_| !sample()));
        set_probability(1.0).expect("valid");
        assert!((0..1000).all(|_| sample()));
        set_probability(0.5).expect("valid");
        let hits = (0..10_000).filter(|_| sample()).count();
        assert!((4_000..6_000).contains(&hits), "{hits}");
        set_probability(0.0).expect("valid");
    }

    #[test]
    fn slow_queries_are_logged_above_the_threshold_only() {
        let _turn = THRESHOLD.lock().unwrap_or_else(|p| p.into_inner());
        set_slow_query_threshold(Duration::from_millis(100));
        assert!(!check_slow(Duration::from_millis(99), || "fast".into()));
        assert!(check_slow(Duration::from_millis(150), || "slow".into()));
        set_slow_query_threshold(Duration::ZERO);
        assert!(!check_slow(Duration::from_secs(10), || "off".into()));
        set_slow_query_threshold(Duration::from_millis(500));
    }
}
