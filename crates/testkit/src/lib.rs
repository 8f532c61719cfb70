//! amphora-testkit: starts real `amphora` nodes for integration tests (a fresh data dir,
//! free ports, waits until CQL answers, stops on drop) — no mocks.
//!
//! Must never depend on: server internals (tests talk to the node over the network only).
//!
//! Key types: [`TestNode`].

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A running `amphora server` child process.
pub struct TestNode {
    child: Option<Child>,
    pub data_dir: PathBuf,
    pub native: SocketAddr,
    pub shard_aware: SocketAddr,
    pub metrics: SocketAddr,
    /// The REST admin API (nodetool's `-p`).
    pub api: SocketAddr,
    pub smp: u32,
    owns_dir: bool,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// What the server's log says when a port it was given is already bound.
const ADDR_IN_USE: &str = "Address already in use";

/// What the server's log says when its REST API could not bind its port (not fatal).
const API_NOT_STARTED: &str = "REST API not started";

/// Whether an HTTP server answers on `addr` (any status: only the protocol is checked).
fn answers_http(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
    if c.write_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 5];
    c.read_exact(&mut head).is_ok() && &head == b"HTTP/"
}

/// The last `n` lines of a server log (or why it could not be read), for error messages:
/// CI keeps only the test's output, not the temporary directory.
///
/// A failed start ends the log with the error and then, when `RUST_BACKTRACE` is set (CI
/// sets it), its stack backtrace: the lines from `Stack backtrace:` on are left out, so the
/// tail holds the error itself (and the retry on [`ADDR_IN_USE`] can see it).
fn log_tail(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let lines: Vec<&str> = s
                .lines()
                .take_while(|l| l.trim_end() != "Stack backtrace:")
                .collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(unreadable: {e})"),
    }
}

/// The binary under test: `AMPHORA_BIN`, else target/{release,debug}/amphora.
pub fn amphora_bin() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("AMPHORA_BIN") {
        return Ok(PathBuf::from(p));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for profile in ["debug", "release"] {
        let p = root.join("target").join(profile).join("amphora");
        if p.exists() {
            return Ok(p);
        }
    }
    bail!("no amphora binary: run `cargo build -p amphora` or set AMPHORA_BIN")
}

/// A new, empty directory for one node's data. Its name is unique within this test
/// process (a counter, not a port: `free_port` can hand out the port of a node whose
/// directory a test still holds), and `create_dir` refuses one left by an earlier
/// process with the same pid.
fn fresh_dir() -> anyhow::Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("amphora-testkit-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
}

impl TestNode {
    /// Starts a node with `smp` shards and a fresh temporary data directory.
    pub fn start(smp: u32) -> anyhow::Result<TestNode> {
        let dir = fresh_dir()?;
        let mut n = Self::start_in(&dir, smp, &[])?;
        n.owns_dir = true;
        Ok(n)
    }

    /// Starts a node on an existing data directory (e.g. to test restarts).
    pub fn start_in(dir: &Path, smp: u32, extra: &[&str]) -> anyhow::Result<TestNode> {
        Self::start_in_env(dir, smp, extra, &[])
    }

    /// [`TestNode::start_in`] with extra environment variables for the server (test
    /// failpoints such as `AMPHORA_FAILPOINT_BATCHLOG_ABORT`).
    pub fn start_in_env(
        dir: &Path,
        smp: u32,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<TestNode> {
        // A port `free_port` found free can be taken (by another test's node or a
        // client's ephemeral source port) before the server binds it: such a start is
        // retried on fresh ports; any other early exit is the test's failure.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(dir, smp, extra, env) {
                Err(e) if attempt < 5 && format!("{e:#}").contains(ADDR_IN_USE) => {
                    eprintln!("testkit: a port was taken before the server bound it; retrying");
                }
                r => return r,
            }
        }
    }

    fn start_once(
        dir: &Path,
        smp: u32,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<TestNode> {
        let native: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let shard_aware: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let log = std::fs::File::create(dir.join("server.log"))?;
        let child = Command::new(amphora_bin()?)
            .arg("server")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--native-transport-port", &native.port().to_string()])
            .args([
                "--native-shard-aware-transport-port",
                &shard_aware.port().to_string(),
            ])
            .args(["--prometheus-port", &metrics.port().to_string()])
            .args(["--api-port", &api.port().to_string()])
            .args(["--smp", &smp.to_string(), "--memory", "1G", "--no-pin"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("spawning amphora")?;
        let mut node = TestNode {
            child: Some(child),
            data_dir: dir.to_path_buf(),
            native,
            shard_aware,
            metrics,
            api,
            smp,
            owns_dir: false,
        };
        node.wait_ready(Duration::from_secs(30))?;
        Ok(node)
    }

    /// Waits until the node answers on its CQL port *and* its REST API answers HTTP.
    ///
    /// The server binds the REST API last and only logs a busy API port (it keeps
    /// serving CQL), so a port taken since `free_port` found it would leave the test
    /// talking to another process there (a nodetool test once got "invalid HTTP version"
    /// from another node's CQL port). That start fails with [`ADDR_IN_USE`] and is retried.
    fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        let log = self.data_dir.join("server.log");
        let mut native_up = false;
        while start.elapsed() < timeout {
            native_up = native_up || TcpStream::connect(self.native).is_ok();
            if native_up {
                // The log is read after the probe: an HTTP answer from another node's API
                // on our port is then caught too (our failed bind is logged by then, unless
                // the server stalled for the whole probe between its CQL and API binds).
                let answered = answers_http(self.api);
                if std::fs::read_to_string(&log).is_ok_and(|s| s.contains(API_NOT_STARTED)) {
                    bail!(
                        "the REST API did not start on {} ({ADDR_IN_USE}?); its last lines:\n{}",
                        self.api,
                        log_tail(&log, 5)
                    );
                }
                if answered {
                    return Ok(());
                }
            }
            if let Some(c) = self.child.as_mut()
                && let Some(status) = c.try_wait()?
            {
                let log = self.data_dir.join("server.log");
                bail!(
                    "amphora exited early ({status}); log: {}; its last lines:\n{}",
                    log.display(),
                    log_tail(&log, 20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "amphora did not answer on {} (CQL) and {} (REST API) within {:?}",
            self.native,
            self.api,
            timeout
        )
    }

    /// SIGTERM and wait (clean shutdown: flush, close the commitlog).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            let pid = c.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(20) {
                if c.try_wait()?.is_some() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            c.kill()?;
            bail!("amphora did not stop within 20 s of SIGTERM");
        }
        Ok(())
    }

    /// SIGKILL (a crash).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// Runs `amphora nodetool -h 127.0.0.1 -p <api port> <args>`: (exit status, stdout,
    /// stderr).
    pub fn nodetool(&self, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
        let out = Command::new(amphora_bin()?)
            .arg("nodetool")
            .args([
                "-h",
                &self.api.ip().to_string(),
                "-p",
                &self.api.port().to_string(),
            ])
            .args(args)
            .output()
            .context("running amphora nodetool")?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// The Prometheus text of the node.
    pub fn metrics_text(&self) -> anyhow::Result<String> {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect(self.metrics)?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        let _ = self.kill();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A one-connection server on a free port that reads the request and sends `reply`.
    fn serve_once(reply: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        std::thread::spawn(move || {
            if let Ok((mut c, _)) = l.accept() {
                let mut buf = [0u8; 256];
                let _ = c.read(&mut buf);
                let _ = c.write_all(reply);
            }
        });
        addr
    }

    #[test]
    fn the_readiness_probe_tells_http_from_other_protocols() {
        assert!(answers_http(serve_once(b"HTTP/1.1 404 Not Found\r\n\r\n")));
        // What a CQL port sends back to an HTTP request: a v4 ERROR frame.
        assert!(!answers_http(serve_once(
            b"\x84\x00\x00\x00\x00\x00\x00\x00\x06"
        )));
        // Nothing listening.
        let port = free_port().expect("port");
        assert!(!answers_http(SocketAddr::from(([127, 0, 0, 1], port))));
    }

    #[test]
    fn a_failed_starts_log_tail_holds_the_error_not_its_backtrace() {
        let dir = std::env::temp_dir().join(format!("amphora-testkit-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("server.log");
        let mut text = String::from(
            "INFO storage opened\nError: starting the node\n\nCaused by:\n    \
             starting the CQL transport: cannot listen on 127.0.0.1:9042: \
             Address already in use (os error 98)\n\nStack backtrace:\n",
        );
        for i in 0..40 {
            text.push_str(&format!(
                "  {i}: some::frame\n             at src/x.rs:{i}:1\n"
            ));
        }
        std::fs::write(&log, text).expect("write log");
        let tail = log_tail(&log, 20);
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert!(tail.contains(ADDR_IN_USE), "{tail}");
        assert!(tail.starts_with("INFO storage opened"), "{tail}");
        assert!(!tail.contains("some::frame"), "{tail}");
    }
}
