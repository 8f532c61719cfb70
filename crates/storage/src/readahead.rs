//! Sequential reads of a file ahead of its reader, with O_DIRECT, on a thread of their
//! own: a compaction's inputs.
//!
//! A compaction reads each input front to back once. Through the page cache, an input
//! that is not cached (compaction outputs and flushed SSTables are written with
//! O_DIRECT) costs the compaction thread the page cache's allocation and copy of every
//! page on top of the disk read: on this project's VMs a major compaction of 3M
//! partitions took 2.3 s of CPU instead of 0.6 s (docs/benchmarks.md, "Flushes straight
//! to the disk"). Here a thread reads [`WINDOW`]-byte windows with O_DIRECT into a few
//! reused aligned buffers while the compaction merges the windows before; the merge only
//! copies each chunk's bytes out of a window.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Bytes of one direct read (and of each buffer).
pub const WINDOW: usize = 1 << 20;

/// Alignment of O_DIRECT reads' memory, offsets and lengths.
const ALIGN: usize = 4096;

/// Windows read ahead of the one in use. A major compaction of 3M partitions (4 inputs)
/// waited 0–6 ms in all for its windows with 1 MiB and 4; 4 MiB and 3, or 2 MiB and 6, made
/// it slower (the reads then contend with the output's writes).
const DEPTH: usize = 4;

/// A [`WINDOW`]-byte buffer aligned to [`ALIGN`].
struct Buf {
    mem: Vec<u8>,
    start: usize,
    size: usize,
}

impl Buf {
    fn new(size: usize) -> io::Result<Self> {
        let mem = vec![0u8; size + ALIGN];
        let start = mem.as_ptr().align_offset(ALIGN);
        if start >= ALIGN {
            return Err(io::Error::other("cannot align a read-ahead buffer"));
        }
        Ok(Buf { mem, start, size })
    }

    fn slice_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.size]
    }

    fn slice(&self, len: usize) -> &[u8] {
        &self.mem[self.start..self.start + len]
    }
}

/// One window as read: file bytes `offset..offset + len` (shorter than [`WINDOW`] only
/// at the end of the file).
struct Window {
    buf: Buf,
    offset: u64,
    len: usize,
}

/// Reads `file` (opened with O_DIRECT) window by window from `from` (aligned) to `end`.
pub struct ReadAhead {
    full: Receiver<io::Result<Window>>,
    free: SyncSender<Buf>,
    cur: Option<Window>,
    /// Set when the thread sent an error or ran past the end: nothing more comes.
    done: bool,
    /// Time spent waiting for windows, and windows taken (logged at debug when dropped).
    waited: std::time::Duration,
    windows: u64,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReadAhead {
    /// Starts reading `file` at `from` (rounded down to the alignment) up to `end` (the
    /// file's length, or less). `file` must be open with O_DIRECT and not shared with
    /// readers that need buffered reads (its flags belong to its open file description).
    pub fn start(file: File, from: u64, end: u64) -> io::Result<ReadAhead> {
        let (size, depth) = (WINDOW, DEPTH);
        let (to_reader, full) = sync_channel::<io::Result<Window>>(depth);
        let (free, free_rx) = sync_channel::<Buf>(depth + 1);
        for _ in 0..depth {
            free.try_send(Buf::new(size)?)
                .map_err(|_| io::Error::other("read-ahead buffer queue full"))?;
        }
        let mut offset = from / ALIGN as u64 * ALIGN as u64;
        let thread = std::thread::Builder::new()
            .name("sstable-read".into())
            .spawn(move || {
                while offset < end {
                    let Ok(mut buf) = free_rx.recv() else {
                        return;
                    };
                    let r = read_window(&file, buf.slice_mut(), offset).map(|len| Window {
                        buf,
                        offset,
                        len,
                    });
                    let stop = match &r {
                        Ok(w) => w.len < size,
                        Err(_) => true,
                    };
                    if let Ok(w) = &r {
                        offset += w.len as u64;
                    }
                    if to_reader.send(r).is_err() || stop {
                        return;
                    }
                }
            })?;
        Ok(ReadAhead {
            full,
            free,
            cur: None,
            done: false,
            waited: std::time::Duration::ZERO,
            windows: 0,
            thread: Some(thread),
        })
    }

    /// Appends file bytes `s..e` to `out`. Ranges must come in order (each `s` at or after
    /// the one before): Ok(false) when this one starts before the window in use or past
    /// what can be read, and the caller reads it itself.
    pub fn copy(&mut self, s: u64, e: u64, out: &mut Vec<u8>) -> io::Result<bool> {
        let mut at = s;
        while at < e {
            let w = match &self.cur {
                Some(w) if at >= w.offset && at < w.offset + w.len as u64 => w,
                Some(w) if at < w.offset => return Ok(false),
                _ => {
                    if !self.advance()? {
                        return Ok(false);
                    }
                    continue;
                }
            };
            let from = (at - w.offset) as usize;
            let to = ((e - w.offset) as usize).min(w.len);
            out.extend_from_slice(&w.buf.slice(w.len)[from..to]);
            at = w.offset + to as u64;
        }
        Ok(true)
    }

    /// Gives the window in use back to the thread and takes the next one; false when no
    /// more come.
    fn advance(&mut self) -> io::Result<bool> {
        if let Some(w) = self.cur.take() {
            // The thread may be gone (it stops at the end): the buffer is then dropped.
            let _ = self.free.try_send(w.buf);
        }
        if self.done {
            return Ok(false);
        }
        let t = std::time::Instant::now();
        let got = self.full.recv();
        self.waited += t.elapsed();
        self.windows += 1;
        match got {
            Ok(Ok(w)) => {
                self.done = w.len < w.buf.size;
                self.cur = Some(w);
                Ok(true)
            }
            Ok(Err(e)) => {
                self.done = true;
                Err(e)
            }
            Err(_) => {
                self.done = true;
                Ok(false)
            }
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        tracing::debug!(
            windows = self.windows,
            waited_ms = self.waited.as_millis() as u64,
            "read-ahead done"
        );
        // Closing both channels stops the thread at its next send or receive; it has at
        // most one read in progress.
        let (_, full) = sync_channel(0);
        drop(std::mem::replace(&mut self.full, full));
        let (free, _) = sync_channel(0);
        drop(std::mem::replace(&mut self.free, free));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Fills `buf` from `offset` with direct reads; returns how many bytes it got (fewer than
/// `buf.len()` only at the end of the file).
fn read_window(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let n = match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        got += n;
        // A direct read ends short only at the end of the file (its last bytes need not
        // be a whole block); a short read of whole blocks is retried from where it ended.
        if n == 0 || !n.is_multiple_of(ALIGN) {
            break;
        }
    }
    Ok(got)
}

/// Opens the file behind `file` again, read-only with O_DIRECT: a description of its own,
/// so the flag does not reach `file`'s other readers. None where the file system refuses
/// O_DIRECT (tmpfs) or `/proc` is not there.
pub fn reopen_direct(file: &File) -> Option<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes in the build's target directory (a disk file system: the
    /// temporary directory could be a tmpfs, which takes no O_DIRECT).
    fn file_with(len: usize) -> (tempfile::TempDir, File, Vec<u8>) {
        let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
        std::fs::create_dir_all(&target).expect("target dir");
        let dir = tempfile::tempdir_in(&target).expect("tempdir");
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        let f = File::open(&path).expect("open");
        (dir, f, bytes)
    }

    #[test]
    fn ranges_in_order_come_back_as_the_file_holds_them() {
        // Three and a half windows: ranges inside a window, across windows, and up to an
        // end that is not block-aligned.
        let len = 3 * WINDOW + WINDOW / 2 + 123;
        let (_d, f, bytes) = file_with(len);
        let direct = reopen_direct(&f).expect("O_DIRECT on the target directory's disk");
        let mut ra = ReadAhead::start(direct, 0, len as u64).expect("start");
        let mut at = 0usize;
        let mut step = 1000usize;
        while at < len {
            let e = (at + step).min(len);
            let mut out = Vec::new();
            assert!(ra.copy(at as u64, e as u64, &mut out).expect("copy"));
            assert_eq!(out, bytes[at..e], "range {at}..{e}");
            at = e + step / 3;
            step = step * 7 % 300_000 + 1000;
        }
        // Past the end, and back before the window in use: the caller's turn.
        assert!(
            !ra.copy(len as u64, len as u64 + 10, &mut Vec::new())
                .expect("past")
        );
        assert!(!ra.copy(0, 10, &mut Vec::new()).expect("before"));
    }

    #[test]
    fn a_reader_dropped_early_stops_the_thread() {
        let len = 8 * WINDOW;
        let (_d, f, bytes) = file_with(len);
        let direct = reopen_direct(&f).expect("O_DIRECT on the target directory's disk");
        let mut ra = ReadAhead::start(direct, WINDOW as u64 + 5, len as u64).expect("start");
        let mut out = Vec::new();
        assert!(
            ra.copy(WINDOW as u64 + 5, WINDOW as u64 + 50, &mut out)
                .expect("copy")
        );
        assert_eq!(out, bytes[WINDOW + 5..WINDOW + 50]);
        // Drop joins the thread: this returns only if it stopped.
        drop(ra);
    }
}
