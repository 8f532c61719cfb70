//! Reads that do not make the shard wait for the disk.
//!
//! A shard serves every request of its core from one thread, so a synchronous `pread` that
//! misses the page cache stops all of them for the disk's latency (100 µs to milliseconds),
//! even those the row cache or the memtables would answer at once. Inside
//! [`without_waiting`], the SSTable reader's reads ask the kernel for cached pages only
//! (`preadv2` with `RWF_NOWAIT`): a read the page cache can serve costs what it did, and one
//! that would wait returns [`StorageError::WouldBlock`] with a [`DiskWait`] naming the
//! bytes. The caller then hands the wait to a helper thread ([`DiskWait::fault_in`], which
//! reads those bytes and so brings them into the page cache), serves other requests
//! meanwhile, and runs the read again. A read left half done has changed nothing (the row
//! and block caches are filled only from complete reads), so starting it over is safe.
//!
//! Outside [`without_waiting`] (compaction, flush, startup, tools) reads block as before.

use std::cell::Cell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, StorageError};

thread_local! {
    static NOWAIT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's SSTable reads limited to the page cache: a read that would
/// wait for the disk fails with [`StorageError::WouldBlock`] instead.
pub fn without_waiting<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            NOWAIT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(NOWAIT.with(|c| c.replace(true)));
    f()
}

/// Bytes a read needs that are not in the page cache: what a helper thread reads so that
/// the read, run again, finds them there. A read of a partition held by several SSTables
/// gathers the misses of all of them into one wait ([`Self::join`]): the failed no-wait
/// reads have already started the disk reads of each (the kernel's readahead), so the
/// helper waits about as long as for the slowest, where waiting for them one by one, the
/// read run again after each, took the sum (4-5 waits in a row of 5-80 ms each while a
/// compaction wrote, docs/benchmarks.md, "Reads that wait for several SSTables at once").
#[derive(Debug)]
pub struct DiskWait {
    file: File,
    path: PathBuf,
    offset: u64,
    len: usize,
    /// The other SSTables' misses of the same read, waited for after this one.
    also: Vec<DiskWait>,
}

impl DiskWait {
    /// The file the read waits for (the first, when it waits for several).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many byte ranges (each in one file) the wait reads.
    pub fn parts(&self) -> usize {
        1 + self.also.len()
    }

    /// Adds `other`'s bytes (and any it gathered) to this wait.
    pub fn join(&mut self, mut other: DiskWait) {
        self.also.append(&mut other.also);
        self.also.push(other);
    }

    /// Makes the wait read at least `bytes` from its offset (up to the end of the file): a
    /// scan, which reads on from there, then finds a whole window cached, not one chunk.
    pub fn widen(&mut self, bytes: usize) {
        self.len = self.len.max(bytes);
    }

    /// Reads the bytes on this thread, blocking until the disk has delivered them (they are
    /// then in the page cache). For a helper thread: [`Self::fault_in`].
    pub fn wait(&self) -> Result<()> {
        self.wait_one()?;
        self.also.iter().try_for_each(DiskWait::wait_one)
    }

    fn wait_one(&self) -> Result<()> {
        let mut buf = vec![0u8; self.len];
        let mut done = 0;
        while done < buf.len() {
            match self
                .file
                .read_at(&mut buf[done..], self.offset + done as u64)
            {
                // The end of the file (a widened wait).
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::io(&self.path, e)),
            }
        }
        Ok(())
    }

    /// [`Self::wait`] on the runtime's blocking pool: the calling task waits, its thread
    /// goes on running others.
    pub async fn fault_in(self) -> Result<()> {
        let path = self.path.clone();
        let len = self.len + self.also.iter().map(|w| w.len).sum::<usize>();
        let parts = self.parts();
        let queued = std::time::Instant::now();
        let (r, started, read) = tokio::task::spawn_blocking(move || {
            let started = queued.elapsed();
            let t = std::time::Instant::now();
            let r = self.wait();
            (r, started, t.elapsed())
        })
        .await
        .map_err(|e| StorageError::io(&path, std::io::Error::other(e.to_string())))?;
        // Where a traced read's wait went: to the helper thread's start, or to the read.
        amphora_trace::event(|| {
            format!(
                "Disk wait done: {len} bytes in {parts} part(s); helper started after {} µs, read {} µs, back after {} µs",
                started.as_micros(),
                read.as_micros(),
                queued.elapsed().as_micros()
            )
        });
        r
    }
}

/// `read_exact_at` for the SSTable reader: blocking, or from the page cache only inside
/// [`without_waiting`].
pub(crate) fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    if !NOWAIT.with(|c| c.get()) {
        return file
            .read_exact_at(buf, offset)
            .map_err(|e| StorageError::io(path, e));
    }
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let at = offset + done as u64;
        // SAFETY: `iov` points at `rest`, writable for its length, for the whole call; the
        // descriptor is `file`'s, open while it is borrowed.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::preadv2(
                file.as_raw_fd(),
                &iov,
                1,
                at as libc::off_t,
                libc::RWF_NOWAIT,
            )
        };
        if n > 0 {
            done += n as usize;
            continue;
        }
        if n == 0 {
            return Err(StorageError::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "file ends before the read",
                ),
            ));
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => {
                let file = file.try_clone().map_err(|e| StorageError::io(path, e))?;
                return Err(StorageError::WouldBlock(Box::new(DiskWait {
                    file,
                    path: path.to_path_buf(),
                    offset: at,
                    len: buf.len() - done,
                    also: Vec::new(),
                })));
            }
            // A file system without non-blocking buffered reads (EOPNOTSUPP), or a kernel
            // without `RWF_NOWAIT` (EINVAL): read as before, which reports its own error
            // if the arguments were at fault.
            Some(libc::EOPNOTSUPP | libc::EINVAL) => {
                return file
                    .read_exact_at(&mut buf[done..], at)
                    .map_err(|e| StorageError::io(path, e));
            }
            _ => return Err(StorageError::io(path, err)),
        }
    }
    Ok(())
}

/// Pages of `file` in the page cache (`mincore` over a mapping of the file).
pub(crate) fn resident_pages(file: &File) -> std::io::Result<usize> {
    let len = usize::try_from(file.metadata()?.len())
        .map_err(|_| std::io::Error::other("file too large to map"))?;
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: a fresh read-only shared mapping of an open descriptor, only ever passed to
    // `mincore` (never read through, so a concurrent truncation cannot fault) and unmapped
    // before returning; `vec` has one byte per page of the mapping.
    #[allow(unsafe_code)]
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mut vec = vec![0u8; len.div_ceil(page_size())];
        let rc = libc::mincore(p, len, vec.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(p, len);
        if rc != 0 {
            return Err(err);
        }
        Ok(vec.iter().filter(|b| **b & 1 != 0).count())
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    #[allow(unsafe_code)]
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096).max(1)
}

/// Drops `file`'s pages from the page cache, for tests of reads that wait for the disk:
/// fsync (dirty pages and pages under write-back stay resident), `POSIX_FADV_DONTNEED`,
/// and again after a pause while `mincore` still finds pages (the kernel skips pages it
/// holds for a moment, as during reclaim or migration). Returns the pages still resident
/// after about two seconds of trying (0 when the file is out of the page cache).
#[doc(hidden)]
pub fn drop_from_page_cache(file: &File) -> std::io::Result<usize> {
    file.sync_all()?;
    let mut left = 0;
    for attempt in 0..200 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // SAFETY: advice on an open descriptor; no memory is involved.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        left = resident_pages(file)?;
        if left == 0 {
            break;
        }
    }
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn evict(f: &File) {
        assert_eq!(
            drop_from_page_cache(f).expect("evict"),
            0,
            "pages left resident"
        );
    }

    /// Rounds of evicting the file and reading it without waiting, until a read had to
    /// wait. One round proves nothing: a `RWF_NOWAIT` read of an evicted page starts the
    /// readahead, and when the disk answers before the kernel looks at the page again the
    /// read is served (measured: 190 of 5,000 16 KiB reads on this VM; all 20 rounds of
    /// one `make test` while the host stole the vCPUs, its disk answering from the host's
    /// cache). The evicted read is 4 MiB: its readahead is one I/O of megabytes, still in
    /// flight when the kernel looks again. Each served read must return the data.
    const ROUNDS: usize = 20;

    #[test]
    fn cached_bytes_read_without_waiting_and_evicted_ones_wait() {
        const LEN: usize = 16 << 20;
        const BIG: usize = 4 << 20;
        const AT: u64 = (8 << 20) + 100_000;
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..LEN as u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut f = File::create(&path).expect("create");
        f.write_all(&data).expect("write");
        f.sync_all().expect("sync");
        let f = File::open(&path).expect("open");
        let mut buf = vec![0u8; 16 * 1024];
        // Cached (just written): served at once, in and outside the scope.
        without_waiting(|| read_exact_at(&f, &path, &mut buf, 4096)).expect("cached read");
        assert_eq!(buf, data[4096..4096 + 16 * 1024]);
        // Evicted (written back by the fsync, so clean): the read names what it waits for,
        // from the first byte it could not read to the end of the read.
        let mut big = vec![0u8; BIG];
        let want = &data[AT as usize..AT as usize + BIG];
        let mut waited = None;
        for _ in 0..ROUNDS {
            evict(&f);
            match without_waiting(|| read_exact_at(&f, &path, &mut big, AT)) {
                Ok(()) => assert!(big == want, "served read"),
                Err(StorageError::WouldBlock(w)) => {
                    waited = Some(w);
                    break;
                }
                Err(e) => panic!("expected WouldBlock, got {e}"),
            }
        }
        let w = waited.expect("no read of an evicted page waited in any round");
        let end = AT + BIG as u64;
        assert!((AT..end).contains(&w.offset), "offset {}", w.offset);
        assert_eq!((w.offset + w.len as u64, w.path()), (end, path.as_path()));
        // Waiting brings the bytes in; the read then succeeds without waiting.
        w.wait().expect("wait");
        big.fill(0);
        without_waiting(|| read_exact_at(&f, &path, &mut big, AT)).expect("after the wait");
        assert!(big == want);
        // Outside the scope, reads block as before, and the scope does not leak.
        evict(&f);
        read_exact_at(&f, &path, &mut buf, 200_000).expect("blocking read");
        assert_eq!(buf, data[200_000..200_000 + 16 * 1024]);
        // Past the end of the file: an error, not a wait.
        let e = without_waiting(|| read_exact_at(&f, &path, &mut buf, LEN as u64 - 4096))
            .expect_err("eof");
        assert!(matches!(
            e,
            StorageError::Io { .. } | StorageError::WouldBlock(_)
        ));
    }
}
