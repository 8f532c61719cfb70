//! Node configuration: a YAML file with cassandra.yaml / scylla.yaml key names, then
//! command-line overrides. Unknown keys are accepted with a warning (JVM-only knobs).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use amphora_storage::CommitFailurePolicy;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid value for {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

/// The commitlog sync mode (cassandra.yaml `commitlog_sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitlogSync {
    Periodic,
    Batch,
    Group,
}

impl std::str::FromStr for CommitlogSync {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "periodic" => Ok(CommitlogSync::Periodic),
            "batch" => Ok(CommitlogSync::Batch),
            "group" => Ok(CommitlogSync::Group),
            other => Err(format!(
                "unknown commitlog_sync mode '{other}' (periodic, batch or group)"
            )),
        }
    }
}

/// cassandra.yaml's `commit_failure_policy`, as far as it concerns commitlog replay (the
/// only commitlog failures the node leaves to a policy: a failed write or sync while
/// running fails the writes that depended on it). `die` and `stop` both refuse to start.
fn commit_failure_policy(s: &str) -> Result<CommitFailurePolicy, String> {
    match s.to_ascii_lowercase().as_str() {
        "stop" | "die" => Ok(CommitFailurePolicy::Stop),
        "ignore" => Ok(CommitFailurePolicy::Ignore),
        "stop_commit" => Err(
            "'stop_commit' is not supported: a failed commitlog write fails the writes that \
             depended on it; for replay use stop, die or ignore"
                .into(),
        ),
        other => Err(format!(
            "unknown commit_failure_policy '{other}' (stop, die or ignore)"
        )),
    }
}

/// Everything a node needs to start. `Default` is the embedded default configuration.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub cluster_name: String,
    pub data_dir: PathBuf,
    pub listen_address: IpAddr,
    pub native_port: u16,
    pub shard_aware_port: u16,
    pub prometheus_address: IpAddr,
    /// 0 = pick a free port; `None` = no metrics endpoint.
    pub prometheus_port: Option<u16>,
    pub api_address: IpAddr,
    pub api_port: u16,
    /// Shards; 0 = one per core.
    pub smp: u32,
    /// Memory for the whole node in bytes; 0 = most of RAM.
    pub memory_bytes: u64,
    pub commitlog_sync: CommitlogSync,
    pub commitlog_sync_period_ms: u64,
    pub commitlog_sync_group_window_ms: u64,
    pub commitlog_segment_size_bytes: u64,
    pub commitlog_total_space_bytes: u64,
    /// What replay does with a corrupt commitlog entry (`commit_failure_policy`).
    pub commit_failure_policy: CommitFailurePolicy,
    pub max_frame_size_bytes: usize,
    pub password_authenticator: bool,
    /// Pin shard threads to cores.
    pub pin_shards: bool,
    /// Requests slower than this are logged at WARN (`slow_query_log_timeout`; 0 = off).
    pub slow_query_log_timeout_ms: u64,
    /// A multi-partition batch over this data size warns the client
    /// (`batch_size_warn_threshold`, 5 KiB).
    pub batch_size_warn_threshold_bytes: u64,
    /// ... and over this one is refused (`batch_size_fail_threshold`, 50 KiB).
    pub batch_size_fail_threshold_bytes: u64,
    /// An unlogged batch over more partitions warns the client
    /// (`unlogged_batch_across_partitions_warn_threshold`, 10).
    pub unlogged_batch_across_partitions_warn_threshold: u64,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            cluster_name: "Test Cluster".into(),
            data_dir: PathBuf::from("./data"),
            listen_address: IpAddr::from([127, 0, 0, 1]),
            native_port: 9042,
            shard_aware_port: 19042,
            prometheus_address: IpAddr::from([127, 0, 0, 1]),
            prometheus_port: Some(9180),
            api_address: IpAddr::from([127, 0, 0, 1]),
            api_port: 10000,
            smp: 0,
            memory_bytes: 0,
            commitlog_sync: CommitlogSync::Periodic,
            commitlog_sync_period_ms: 10_000,
            commitlog_sync_group_window_ms: 15,
            commitlog_segment_size_bytes: 32 << 20,
            commitlog_total_space_bytes: 1 << 30,
            commit_failure_policy: CommitFailurePolicy::Stop,
            max_frame_size_bytes: 16 << 20,
            password_authenticator: false,
            pin_shards: true,
            slow_query_log_timeout_ms: 500,
            batch_size_warn_threshold_bytes: 5 << 10,
            batch_size_fail_threshold_bytes: 50 << 10,
            unlogged_batch_across_partitions_warn_threshold: 10,
        }
    }
}

/// The YAML file as written by users (cassandra.yaml / scylla.yaml names).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct YamlConfig {
    cluster_name: Option<String>,
    listen_address: Option<String>,
    rpc_address: Option<String>,
    native_transport_port: Option<u16>,
    native_shard_aware_transport_port: Option<u16>,
    data_file_directories: Option<Vec<String>>,
    workdir: Option<String>,
    commitlog_sync: Option<String>,
    commitlog_sync_period_in_ms: Option<u64>,
    commitlog_sync_period: Option<String>,
    commitlog_sync_group_window_in_ms: Option<u64>,
    commitlog_sync_group_window: Option<String>,
    commitlog_segment_size_in_mb: Option<u64>,
    commitlog_total_space_in_mb: Option<u64>,
    commit_failure_policy: Option<String>,
    native_transport_max_frame_size_in_mb: Option<u64>,
    authenticator: Option<String>,
    api_address: Option<String>,
    api_port: Option<u16>,
    slow_query_log_timeout_in_ms: Option<u64>,
    slow_query_log_timeout: Option<String>,
    batch_size_warn_threshold_in_kb: Option<u64>,
    batch_size_warn_threshold: Option<String>,
    batch_size_fail_threshold_in_kb: Option<u64>,
    batch_size_fail_threshold: Option<String>,
    unlogged_batch_across_partitions_warn_threshold: Option<u64>,
    prometheus_address: Option<String>,
    prometheus_port: Option<u16>,
    smp: Option<u32>,
    memory: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, serde::de::IgnoredAny>,
}

/// Parses "2G", "512M", "1024K", "1073741824", "1GiB".
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let lower = lower.trim_end_matches("ib").trim_end_matches('b');
    let (num, mult) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1u64 << 10),
        Some('m') => (&lower[..lower.len() - 1], 1 << 20),
        Some('g') => (&lower[..lower.len() - 1], 1 << 30),
        Some('t') => (&lower[..lower.len() - 1], 1 << 40),
        _ => (lower, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a size: '{s}'"))?;
    if n < 0.0 {
        return Err(format!("negative size: '{s}'"));
    }
    Ok((n * mult as f64) as u64)
}

/// Parses "10000ms", "10s", "15ms", "1m" or a bare number of milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000)
    } else {
        (t.as_str(), 1)
    };
    num.trim()
        .parse::<u64>()
        .map(|n| n * mult)
        .map_err(|_| format!("not a duration: '{s}'"))
}

fn ip(key: &'static str, s: &str) -> Result<IpAddr, ConfigError> {
    s.parse().map_err(|_| ConfigError::Invalid {
        key,
        message: format!("'{s}' is not an IP address"),
    })
}

impl NodeConfig {
    /// Applies a YAML config file on top of `self`.
    pub fn load_file(mut self, path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        let y: YamlConfig = serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string(),
        })?;
        for k in y.other.keys() {
            tracing::warn!(key = %k, "config key not used by Amphora (ignored)");
        }
        if let Some(v) = y.cluster_name {
            self.cluster_name = v;
        }
        if let Some(v) = y.rpc_address.or(y.listen_address) {
            self.listen_address = ip("listen_address", &v)?;
        }
        if let Some(v) = y.native_transport_port {
            self.native_port = v;
        }
        if let Some(v) = y.native_shard_aware_transport_port {
            self.shard_aware_port = v;
        }
        if let Some(d) = y
            .data_file_directories
            .and_then(|d| d.into_iter().next())
            .or(y.workdir)
        {
            self.data_dir = PathBuf::from(d);
        }
        if let Some(v) = y.commitlog_sync {
            self.commitlog_sync = v.parse().map_err(|message| ConfigError::Invalid {
                key: "commitlog_sync",
                message,
            })?;
        }
        if let Some(v) = y.commitlog_sync_period_in_ms {
            self.commitlog_sync_period_ms = v;
        }
        if let Some(v) = y.commitlog_sync_period {
            self.commitlog_sync_period_ms =
                parse_duration_ms(&v).map_err(|message| ConfigError::Invalid {
                    key: "commitlog_sync_period",
                    message,
                })?;
        }
        if let Some(v) = y.commitlog_sync_group_window_in_ms {
            self.commitlog_sync_group_window_ms = v;
        }
        if let Some(v) = y.commitlog_sync_group_window {
            self.commitlog_sync_group_window_ms =
                parse_duration_ms(&v).map_err(|message| ConfigError::Invalid {
                    key: "commitlog_sync_group_window",
                    message,
                })?;
        }
        if let Some(v) = y.commitlog_segment_size_in_mb {
            self.commitlog_segment_size_bytes = v << 20;
        }
        if let Some(v) = y.commitlog_total_space_in_mb {
            self.commitlog_total_space_bytes = v << 20;
        }
        if let Some(v) = y.commit_failure_policy {
            self.commit_failure_policy =
                commit_failure_policy(&v).map_err(|message| ConfigError::Invalid {
                    key: "commit_failure_policy",
                    message,
                })?;
        }
        if let Some(v) = y.native_transport_max_frame_size_in_mb {
            self.max_frame_size_bytes = (v << 20) as usize;
        }
        if let Some(v) = y.authenticator {
            self.password_authenticator = v.ends_with("PasswordAuthenticator");
        }
        if let Some(v) = y.api_address {
            self.api_address = ip("api_address", &v)?;
        }
        if let Some(v) = y.api_port {
            self.api_port = v;
        }
        if let Some(v) = y.slow_query_log_timeout_in_ms {
            self.slow_query_log_timeout_ms = v;
        }
        if let Some(v) = y.slow_query_log_timeout {
            self.slow_query_log_timeout_ms =
                parse_duration_ms(&v).map_err(|message| ConfigError::Invalid {
                    key: "slow_query_log_timeout",
                    message,
                })?;
        }
        if let Some(v) = y.batch_size_warn_threshold_in_kb {
            self.batch_size_warn_threshold_bytes = v << 10;
        }
        if let Some(v) = y.batch_size_warn_threshold {
            self.batch_size_warn_threshold_bytes =
                parse_size(&v).map_err(|message| ConfigError::Invalid {
                    key: "batch_size_warn_threshold",
                    message,
                })?;
        }
        if let Some(v) = y.batch_size_fail_threshold_in_kb {
            self.batch_size_fail_threshold_bytes = v << 10;
        }
        if let Some(v) = y.batch_size_fail_threshold {
            self.batch_size_fail_threshold_bytes =
                parse_size(&v).map_err(|message| ConfigError::Invalid {
                    key: "batch_size_fail_threshold",
                    message,
                })?;
        }
        if let Some(v) = y.unlogged_batch_across_partitions_warn_threshold {
            self.unlogged_batch_across_partitions_warn_threshold = v;
        }
        if let Some(v) = y.prometheus_address {
            self.prometheus_address = ip("prometheus_address", &v)?;
        }
        if let Some(v) = y.prometheus_port {
            self.prometheus_port = Some(v);
        }
        if let Some(v) = y.smp {
            self.smp = v;
        }
        if let Some(v) = y.memory {
            self.memory_bytes = parse_size(&v).map_err(|message| ConfigError::Invalid {
                key: "memory",
                message,
            })?;
        }
        Ok(self)
    }

    /// Shards to run: `smp`, or one per available core.
    pub fn shards(&self) -> u32 {
        if self.smp > 0 {
            self.smp
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1)
        }
    }

    /// Memory for the node: `memory`, or 3/4 of physical RAM.
    pub fn memory(&self) -> u64 {
        if self.memory_bytes > 0 {
            return self.memory_bytes;
        }
        let total = amphora_storage::config::meminfo_bytes("MemTotal").unwrap_or(4 << 30);
        total / 4 * 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("lots").is_err());
        assert_eq!(parse_duration_ms("10000ms"), Ok(10_000));
        assert_eq!(parse_duration_ms("10s"), Ok(10_000));
        assert_eq!(parse_duration_ms("15"), Ok(15));
    }

    #[test]
    fn cassandra_yaml_keys_apply() {
        let dir = std::env::temp_dir().join(format!("amphora-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("c.yaml");
        std::fs::write(
            &path,
            "cluster_name: 'Prod'\nnative_transport_port: 9142\ncommitlog_sync: batch\ncommitlog_sync_period: 5000ms\ndata_file_directories:\n  - /tmp/x\nconcurrent_reads: 32\nslow_query_log_timeout: 2s\nbatch_size_warn_threshold: 6KiB\nbatch_size_fail_threshold_in_kb: 100\nunlogged_batch_across_partitions_warn_threshold: 3\n",
        )
        .expect("write");
        let c = NodeConfig::default().load_file(&path).expect("load");
        assert_eq!(c.cluster_name, "Prod");
        assert_eq!(c.native_port, 9142);
        assert_eq!(c.commitlog_sync, CommitlogSync::Batch);
        assert_eq!(c.commitlog_sync_period_ms, 5000);
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.slow_query_log_timeout_ms, 2000);
        assert_eq!(c.batch_size_warn_threshold_bytes, 6 << 10);
        assert_eq!(c.batch_size_fail_threshold_bytes, 100 << 10);
        assert_eq!(c.unlogged_batch_across_partitions_warn_threshold, 3);
        std::fs::write(&path, "commitlog_sync: sometimes\n").expect("write");
        assert!(matches!(
            NodeConfig::default().load_file(&path),
            Err(ConfigError::Invalid {
                key: "commitlog_sync",
                ..
            })
        ));
        assert_eq!(c.commit_failure_policy, CommitFailurePolicy::Stop);
        for (v, want) in [
            ("ignore", Some(CommitFailurePolicy::Ignore)),
            ("die", Some(CommitFailurePolicy::Stop)),
            ("stop", Some(CommitFailurePolicy::Stop)),
            ("stop_commit", None),
            ("sometimes", None),
        ] {
            std::fs::write(&path, format!("commit_failure_policy: {v}\n")).expect("write");
            match (NodeConfig::default().load_file(&path), want) {
                (Ok(c), Some(w)) => assert_eq!(c.commit_failure_policy, w, "{v}"),
                (
                    Err(ConfigError::Invalid {
                        key: "commit_failure_policy",
                        ..
                    }),
                    None,
                ) => {}
                (r, _) => panic!("{v}: {r:?}"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
