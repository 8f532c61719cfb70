//! Starting the write-back of dirty file pages early, so that a later `fdatasync` finds
//! little left to send. On this project's VMs one `fdatasync` of tens of megabytes froze
//! both vCPUs for 10–25 ms while the host took the burst (docs/benchmarks.md, "Write
//! p99.9 at a fixed rate: the commitlog's bursts"); the same bytes sent a megabyte at a
//! time did not.

use std::fs::File;

/// Starts the write-back of `from..to` of `file` to the device and returns without waiting
/// for it (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). Advisory: a failure here only means
/// the later `fdatasync` has more to write (and reports any real I/O error).
pub fn start(file: &File, from: u64, to: u64) -> bool {
    use std::os::fd::AsRawFd;
    if to <= from {
        // (A length of 0 would mean "to the end of the file".)
        return false;
    }
    let (Ok(offset), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else {
        return false;
    };
    // SAFETY: `file` is open for the whole call, so its descriptor is valid; the call
    // takes no pointers.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
    rc == 0
}

/// Bytes between two write-backs a [`WriteBackFile`] starts.
pub const CHUNK: u64 = 1 << 20;

/// A file written front to back (through a `BufWriter`) that starts the write-back of
/// every [`CHUNK`] it is given, so its final sync sends little.
#[derive(Debug)]
pub struct WriteBackFile {
    file: File,
    written: u64,
    started: u64,
}

impl WriteBackFile {
    pub fn new(file: File) -> Self {
        WriteBackFile {
            file,
            written: 0,
            started: 0,
        }
    }

    pub fn into_inner(self) -> File {
        self.file
    }
}

impl std::io::Write for WriteBackFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= CHUNK {
            start(&self.file, self.started, self.written);
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}
