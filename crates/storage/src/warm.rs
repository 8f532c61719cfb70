//! Reading a compaction's outputs into the page cache once they are installed.
//!
//! Compactions write their outputs with O_DIRECT (no copy into the page cache, half of a
//! major compaction's CPU otherwise), so the outputs start cold while the inputs they
//! replace were in the page cache. Every read that moves to an output then misses: it
//! waits for the disk, and the shard thread's no-wait read starts the readahead itself,
//! allocating the fresh pages (on this project's VMs the host backs each anew, ~2.5 ms per
//! MB). Off by default ([`crate::StorageConfig::warm_compaction_outputs`]): in the one
//! scenario measured it cut the disk waits 12x but not the reads' tail
//! (docs/benchmarks.md, "Compaction outputs read into the page cache, tried").
//! [`warm`] runs on the shard's `warm` thread (at the compaction thread's nice) after the
//! outputs are handed to the shard, so the next compaction does not wait for it: the
//! kernel's `readahead` in 8 MiB steps (no copy to user space), each step waited for by a
//! one-byte read of its last page, so one step's pages are in before the next starts and
//! the disk queue never holds more than a step of it. Skipped when the files are over a
//! quarter of the memory the kernel reports available (`MemAvailable`): warming them
//! would push out more than it brings.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes brought in per `readahead` call.
const STEP: u64 = 8 << 20;

/// Reads `files` into the page cache (see the module doc); returns the bytes it brought in
/// (0 when skipped). Errors only stop the warming: a file deleted meanwhile (compacted
/// again) is not worth reading.
pub fn warm(files: &[(PathBuf, File)], stop: &AtomicBool) -> u64 {
    let total: u64 = files
        .iter()
        .filter_map(|(_, f)| f.metadata().ok())
        .map(|m| m.len())
        .sum();
    if total == 0 {
        return 0;
    }
    match crate::config::meminfo_bytes("MemAvailable") {
        Some(avail) if total <= avail / 4 => {}
        avail => {
            tracing::debug!(
                total,
                ?avail,
                "compaction outputs not read into the page cache: too large"
            );
            return 0;
        }
    }
    let started = std::time::Instant::now();
    let mut done = 0;
    for (path, f) in files {
        let Ok(len) = f.metadata().map(|m| m.len()) else {
            continue;
        };
        let mut at = 0;
        while at < len && !stop.load(Ordering::Relaxed) {
            let n = STEP.min(len - at);
            // SAFETY: `readahead` on an open descriptor; no memory is involved.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::readahead(f.as_raw_fd(), at as libc::off64_t, n as usize) };
            if rc != 0 {
                tracing::debug!(path = %path.display(), error = %std::io::Error::last_os_error(), "readahead failed");
                break;
            }
            // Waits for the step's last page (and so, nearly always, the rest of it).
            let mut b = [0u8; 1];
            if f.read_at(&mut b, at + n - 1).is_err() {
                break;
            }
            at += n;
            done += n;
        }
    }
    tracing::debug!(
        bytes = done,
        ms = started.elapsed().as_millis() as u64,
        "compaction outputs read into the page cache"
    );
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file out of the page cache is in it after `warm`, whole.
    #[test]
    fn warming_brings_a_file_into_the_page_cache() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("f");
        let mut f = File::create(&path).expect("create");
        let data: Vec<u8> = (0..(20u32 << 20)).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).expect("write");
        drop(f);
        let f = File::open(&path).expect("open");
        assert_eq!(
            crate::diskwait::drop_from_page_cache(&f).expect("evict"),
            0,
            "pages left resident"
        );
        let files = vec![(path.clone(), f.try_clone().expect("dup"))];
        assert_eq!(warm(&files, &AtomicBool::new(false)), data.len() as u64);
        assert_eq!(
            crate::diskwait::resident_pages(&f).expect("mincore"),
            data.len().div_ceil(4096),
            "pages not brought in"
        );
    }
}
