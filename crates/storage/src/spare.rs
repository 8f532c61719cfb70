//! Spare data files: the Data.db files of SSTables a compaction replaced, kept (renamed
//! into `<shard data dir>/spare-data/`) for the next flushes to write over, as the commitlog
//! reuses the files of discarded segments.
//!
//! Used only by buffered flushes ([`crate::StorageConfig::flush_direct`] off); a direct
//! flush's output (that one, or a flush that found no spare free while compaction was
//! behind, [`crate::StorageConfig::flush_direct_behind`]) is not in the page cache, so it
//! is never retired here.
//!
//! Why: a buffered flush writes its Data.db through the page cache, and on a VM whose
//! freed memory goes back to the host, every fresh page cache page costs a host fault
//! inside `pwrite`: over half of the flush thread's CPU at saturation writes went to that
//! copy (docs/benchmarks.md). The pages of a file written
//! by an earlier flush are still cached, and writing over them is a plain copy (and
//! needs no new extents on the file system).
//!
//! Safety: a spare is handed out only once the reader that served its SSTable is gone
//! (its last `Arc` dropped), so no read can see the new content through an old handle;
//! a Data.db with another link (a snapshot's) is never kept.
//! Crash safety does not depend on the spares: the SSTable's TOC is deleted before its
//! Data.db is moved here, a flush renames a spare to its own temporary name before
//! writing (a crash leaves a `tmp-` file, which a restart removes), and a restart
//! deletes whatever is left here.

use std::collections::VecDeque;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::sstable::SSTableReader;

/// The directory, inside the shard's data directory (a keyspace's name cannot have a
/// `-`, so no keyspace directory can be this one).
pub const SPARE_DIR: &str = "spare-data";

/// A spare no flush took for this long is deleted (at the pool's next use), so a node
/// whose writes stopped does not keep the disk space for long.
pub const SPARE_MAX_AGE: Duration = Duration::from_secs(600);

struct Spare {
    path: PathBuf,
    len: u64,
    /// The reader of the SSTable it belonged to: the file is not written over while any
    /// reference to that reader (an in-flight read, a scan) lives.
    reader: Weak<SSTableReader>,
    since: Instant,
}

#[derive(Default)]
struct State {
    spares: VecDeque<Spare>,
    bytes: u64,
    next: u64,
    /// Spares handed out so far (a metric, and what the tests check).
    taken: u64,
}

/// A shard's spare data files, shared by its janitor (which adds them) and its flush
/// thread (which takes them). Cheap to clone.
#[derive(Clone)]
pub struct SparePool {
    dir: PathBuf,
    cap_bytes: u64,
    state: Arc<Mutex<State>>,
}

impl SparePool {
    /// A pool in `data_dir/spare-data` holding at most `cap_bytes` (0: none are kept). Files
    /// left there by an earlier run are deleted.
    pub fn open(data_dir: &Path, cap_bytes: u64) -> Self {
        let dir = data_dir.join(SPARE_DIR);
        let _ = fs::remove_dir_all(&dir);
        if cap_bytes > 0
            && let Err(e) = fs::create_dir_all(&dir)
        {
            tracing::warn!("cannot create {}: {e}; no spare data files", dir.display());
        }
        SparePool {
            cap_bytes: if dir.is_dir() { cap_bytes } else { 0 },
            dir,
            state: Arc::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Deletes the SSTable of `reader` (replaced by a compaction), keeping its Data.db
    /// as a spare if it was written through the page cache (a flush's) and fits. Blocking
    /// file work: the janitor's.
    pub fn retire(&self, reader: &Arc<SSTableReader>) {
        let len = reader.data_size();
        if self.cap_bytes == 0 || !reader.data_cached || len == 0 || len > self.cap_bytes {
            SSTableReader::delete_files_after_reads(reader);
            return;
        }
        let n = {
            let mut s = self.state();
            s.next += 1;
            s.next
        };
        let path = self.dir.join(format!("spare-{n}.db"));
        // The TOC goes first: from then on the SSTable is not live for a restart.
        let _ = fs::remove_file(crate::sstable::component_path(
            &reader.dir,
            reader.generation,
            "TOC.txt",
        ));
        let kept = fs::rename(reader.data_path(), &path).is_ok();
        SSTableReader::delete_files_after_reads(reader);
        if !kept {
            return;
        }
        // A snapshot's hard link shares the file: it must never be written over.
        if !fs::metadata(&path).is_ok_and(|m| m.nlink() == 1) {
            let _ = fs::remove_file(&path);
            return;
        }
        let evicted = {
            let mut s = self.state();
            s.bytes += len;
            s.spares.push_back(Spare {
                path,
                len,
                reader: Arc::downgrade(reader),
                since: Instant::now(),
            });
            let mut out = Vec::new();
            while s.bytes > self.cap_bytes {
                match s.spares.pop_front() {
                    Some(old) => {
                        s.bytes -= old.len;
                        out.push((old.path, old.reader));
                    }
                    None => break,
                }
            }
            out.extend(self.expired(&mut s));
            out
        };
        for (p, holder) in evicted {
            remove_spare(&p, holder);
        }
    }

    /// Removes the spares older than [`SPARE_MAX_AGE`] from `s`; their paths and readers,
    /// to delete.
    fn expired(&self, s: &mut State) -> Vec<(PathBuf, Weak<SSTableReader>)> {
        let mut out = Vec::new();
        while s
            .spares
            .front()
            .is_some_and(|f| f.since.elapsed() > SPARE_MAX_AGE)
        {
            if let Some(old) = s.spares.pop_front() {
                s.bytes -= old.len;
                out.push((old.path, old.reader));
            }
        }
        out
    }

    /// A spare no reader holds any more, the most recently retired first (its pages are
    /// the likeliest to be cached), moved to `to`; `None` if there is none (or the move
    /// failed: the caller creates a new file).
    pub fn take(&self, to: &Path) -> Option<u64> {
        let (found, old) = {
            let mut s = self.state();
            let old = self.expired(&mut s);
            let found = s
                .spares
                .iter()
                .rposition(|f| f.reader.strong_count() == 0)
                .and_then(|i| s.spares.remove(i));
            if let Some(f) = &found {
                s.bytes -= f.len;
                s.taken += 1;
            }
            (found, old)
        };
        for (p, holder) in old {
            remove_spare(&p, holder);
        }
        let f = found?;
        match fs::rename(&f.path, to) {
            Ok(()) => Some(f.len),
            Err(e) => {
                tracing::warn!("cannot reuse {}: {e}", f.path.display());
                remove_spare(&f.path, Weak::new());
                None
            }
        }
    }

    /// Bytes of spare files held, and spares taken so far.
    pub fn usage(&self) -> (u64, u64) {
        let s = self.state();
        (s.bytes, s.taken)
    }
}

/// Deletes a spare file, its blocks freed once the reader of its SSTable is gone.
fn remove_spare(path: &Path, reader: Weak<SSTableReader>) {
    crate::deleter::remove(path, Some(reader));
}
