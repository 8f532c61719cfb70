//! Deleting large files a step at a time.
//!
//! Why: on this kind of host (ext4 mounted with `discard`, in a VM whose CPU quota the
//! host charges for its disk work) unlinking a 120–160 MB file under load stopped the
//! whole VM for 15–26 ms, every request with it, while truncating a file by 8 MB every
//! 200 ms gave gaps of 5 ms at most (docs/benchmarks.md, "What stops the whole VM").
//! RocksDB paces its deletions for the same reason.
//!
//! How: [`Deleter::remove`] opens the file, unlinks its name at once (the directory shows
//! the deletion as before, and a crash leaves nothing behind: the kernel frees an
//! unlinked inode when its last descriptor closes, ext4's orphan list at the next mount)
//! and hands the descriptor to the deleter's thread. That thread waits until the file's
//! holder (the reader that may still read it) is gone, then shortens the file from its
//! end by [`STEP_BYTES`] at [`RATE_BYTES_PER_SEC`], and closes it. A file with another
//! link (a snapshot's) or of at most one step is only unlinked: shortening it would
//! destroy the other name's content, or gain nothing.
//!
//! A limit: when more than [`BACKLOG_FAST_BYTES`] wait, the thread steps without pausing,
//! so a burst of deletions cannot hold disk space for long.

use std::any::Any;
use std::collections::VecDeque;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// Bytes one truncation step frees.
pub const STEP_BYTES: u64 = 8 << 20;
/// The pace of the steps while the backlog is small.
pub const RATE_BYTES_PER_SEC: u64 = 64 << 20;
/// Bytes waiting beyond which the steps go without pauses.
pub const BACKLOG_FAST_BYTES: u64 = 2 << 30;
/// How often a file whose holder still lives is looked at again.
const HOLDER_POLL: Duration = Duration::from_millis(50);

/// What may still read a file handed to [`Deleter::remove`]: it is shortened only once
/// no strong reference is left.
pub type Holder = Weak<dyn Any + Send + Sync>;

/// A file unlinked and waiting to be shortened and closed.
struct Pending {
    file: File,
    len: u64,
    holder: Option<Holder>,
}

#[derive(Default)]
struct Counters {
    /// Bytes of unlinked files not freed yet.
    backlog_bytes: AtomicU64,
    /// Files handed to the thread and not closed yet.
    pending_files: AtomicU64,
}

/// A handle to a deleter thread (cheap to clone; the thread ends when every handle is gone
/// and its files are freed).
#[derive(Clone)]
pub struct Deleter {
    tx: Sender<Pending>,
    counters: Arc<Counters>,
}

impl Deleter {
    /// Starts a deleter thread pacing its steps at `rate_bytes_per_sec`.
    pub fn start(rate_bytes_per_sec: u64) -> io::Result<Deleter> {
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        std::thread::Builder::new()
            .name("deleter".into())
            .spawn(move || run(rx, &c, rate_bytes_per_sec.max(1)))?;
        Ok(Deleter { tx, counters })
    }

    /// Unlinks `path` now and frees its blocks a step at a time once `holder` (if any) is
    /// gone. A file that cannot be opened is unlinked directly; errors other than "not
    /// found" come back.
    pub fn remove(&self, path: &Path, holder: Option<Holder>) -> io::Result<()> {
        // (Writable: `ftruncate` needs it.)
        let file = match fs::OpenOptions::new().write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(_) => return fs::remove_file(path),
        };
        let meta = file.metadata();
        fs::remove_file(path)?;
        let len = match meta {
            // Another name shares the blocks: unlinking frees nothing, shortening would
            // destroy the other name's content.
            Ok(m) if m.nlink() > 1 => return Ok(()),
            Ok(m) if m.len() <= STEP_BYTES => return Ok(()),
            Ok(m) => m.len(),
            Err(_) => return Ok(()),
        };
        self.counters
            .backlog_bytes
            .fetch_add(len, Ordering::Relaxed);
        self.counters.pending_files.fetch_add(1, Ordering::Relaxed);
        if let Err(mpsc::SendError(p)) = self.tx.send(Pending { file, len, holder }) {
            // The thread is gone (it never ends while a handle lives): close here.
            self.counters.settle(p.len);
        }
        Ok(())
    }

    /// Bytes of unlinked files not freed yet.
    pub fn backlog_bytes(&self) -> u64 {
        self.counters.backlog_bytes.load(Ordering::Relaxed)
    }

    /// Files unlinked and not closed yet.
    pub fn pending_files(&self) -> u64 {
        self.counters.pending_files.load(Ordering::Relaxed)
    }
}

impl Counters {
    fn settle(&self, remaining: u64) {
        self.backlog_bytes.fetch_sub(remaining, Ordering::Relaxed);
        self.pending_files.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The process's deleter, started on first use at [`RATE_BYTES_PER_SEC`], or at
/// `AMPHORA_DELETE_RATE_MB` MiB/s when that is set (for experiments; `0`: no deleter).
/// `None` when there is none or its thread cannot start: files are then unlinked directly.
pub fn global() -> Option<&'static Deleter> {
    static GLOBAL: OnceLock<Option<Deleter>> = OnceLock::new();
    GLOBAL
        .get_or_init(|| {
            let rate = match std::env::var("AMPHORA_DELETE_RATE_MB") {
                Ok(v) => match v.trim().parse::<u64>() {
                    Ok(0) => return None,
                    Ok(mb) => mb.saturating_mul(1 << 20),
                    Err(_) => {
                        tracing::warn!("AMPHORA_DELETE_RATE_MB={v} is not a number; ignored");
                        RATE_BYTES_PER_SEC
                    }
                },
                Err(_) => RATE_BYTES_PER_SEC,
            };
            start_global(rate)
        })
        .as_ref()
}

fn start_global(rate: u64) -> Option<Deleter> {
    match Deleter::start(rate) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!("cannot start the deleter thread: {e}; deleting files directly");
            None
        }
    }
}

/// Deletes `path` through the [`global`] deleter (directly if it cannot run); a failure
/// other than "not found" is logged.
pub fn remove(path: &Path, holder: Option<Holder>) {
    let r = match global() {
        Some(d) => d.remove(path, holder),
        None => fs::remove_file(path),
    };
    if let Err(e) = r
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!("cannot delete {}: {e}", path.display());
    }
}

fn run(rx: Receiver<Pending>, counters: &Counters, rate: u64) {
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let step_pause = Duration::from_secs_f64(STEP_BYTES as f64 / rate as f64);
    loop {
        // Takes what arrived; waits when there is nothing to do.
        let ready = queue
            .iter()
            .position(|p| p.holder.as_ref().is_none_or(|h| h.strong_count() == 0));
        let wait = match (queue.is_empty(), ready) {
            (true, _) => None,
            (false, None) => Some(HOLDER_POLL),
            (false, Some(_)) => Some(Duration::ZERO),
        };
        let got = match wait {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(d) => rx.recv_timeout(d),
        };
        match got {
            Ok(p) => {
                queue.push_back(p);
                while let Ok(p) = rx.try_recv() {
                    queue.push_back(p);
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) if queue.is_empty() => return,
            Err(RecvTimeoutError::Disconnected) if ready.is_none() => {
                std::thread::sleep(HOLDER_POLL);
                continue;
            }
            Err(_) => {}
        }
        let Some(i) = ready else {
            continue;
        };
        let Some(p) = queue.get_mut(i) else {
            continue;
        };
        let to = p.len.saturating_sub(STEP_BYTES);
        let freed = p.len - to;
        let done = p.file.set_len(to).is_err() || to == 0;
        if done {
            // Closing frees the rest (all of it if a step failed).
            let rest = p.len;
            queue.remove(i);
            counters.settle(rest);
        } else {
            p.len = to;
            counters.backlog_bytes.fetch_sub(freed, Ordering::Relaxed);
        }
        if counters.backlog_bytes.load(Ordering::Relaxed) <= BACKLOG_FAST_BYTES {
            std::thread::sleep(step_pause.mul_f64(freed as f64 / STEP_BYTES as f64));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    fn file_of(path: &Path, len: u64) {
        let mut f = File::create(path).unwrap();
        let block = vec![7u8; 1 << 20];
        for _ in 0..len >> 20 {
            f.write_all(&block).unwrap();
        }
    }

    fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
        let start = Instant::now();
        while !f() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timed out: {what}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_large_file_is_unlinked_at_once_and_shortened_once_its_holder_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("big.db");
        file_of(&path, 40 << 20);
        // Another descriptor sees the inode's length as the deleter shortens it.
        let watch = File::open(&path).unwrap();
        let d = Deleter::start(1 << 30).unwrap();
        let holder: Arc<dyn Any + Send + Sync> = Arc::new(());
        d.remove(&path, Some(Arc::downgrade(&holder))).unwrap();
        assert!(!path.exists(), "the name goes at once");
        assert_eq!(d.pending_files(), 1);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(watch.metadata().unwrap().len(), 40 << 20, "held: untouched");
        assert_eq!(d.backlog_bytes(), 40 << 20);
        drop(holder);
        wait_until("shortened to nothing", || {
            watch.metadata().unwrap().len() == 0 && d.pending_files() == 0
        });
        assert_eq!(d.backlog_bytes(), 0);
    }

    #[test]
    fn steps_are_paced() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("big.db");
        file_of(&path, 32 << 20);
        let watch = File::open(&path).unwrap();
        // 8 MB per 200 ms: the first step at once, the fourth after 0.6 s.
        let d = Deleter::start(40 << 20).unwrap();
        let start = Instant::now();
        d.remove(&path, None).unwrap();
        wait_until("first step", || watch.metadata().unwrap().len() <= 24 << 20);
        wait_until("all steps", || d.pending_files() == 0);
        assert_eq!(watch.metadata().unwrap().len(), 0);
        assert!(
            start.elapsed() >= Duration::from_millis(550),
            "4 steps of 8 MB at 40 MB/s took {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_linked_file_keeps_its_content_and_a_small_one_is_just_unlinked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("big.db");
        let link = dir.join("snapshot.db");
        file_of(&path, 16 << 20);
        fs::hard_link(&path, &link).unwrap();
        let d = Deleter::start(1 << 30).unwrap();
        d.remove(&path, None).unwrap();
        assert!(!path.exists());
        assert_eq!(d.pending_files(), 0);
        assert_eq!(fs::metadata(&link).unwrap().len(), 16 << 20);
        assert!(fs::read(&link).unwrap().iter().all(|b| *b == 7));

        let small = dir.join("small.db");
        file_of(&small, 8 << 20);
        d.remove(&small, None).unwrap();
        assert!(!small.exists());
        assert_eq!((d.pending_files(), d.backlog_bytes()), (0, 0));
        // A missing file is no error.
        d.remove(&small, None).unwrap();
    }
}
