//! cassandra-stress's command line: `COMMAND [params] [-OPTION params]...`.
//!
//! The first word is the command (`write`, `read`, `mixed`, `counter_write`, `counter_read`,
//! `user`, `help`); its parameters follow up to the first word that starts with `-`; then each
//! `-option` takes the words after it; a quoted word holding spaces is split. Words are case-insensitive where cassandra-stress's are.
//! Backslashes are dropped (`ops\(insert=1\)` pasted with its shell escaping still parses) and a
//! lone `-` followed by a word is joined (`- rate`, a line wrapped in a PDF).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::distribution::{Distribution, parse_long, parse_range};
use crate::error::StressError;

/// Most concurrent in-flight operations `-rate threads=` accepts (cassandra-stress's `auto` stops at 1000).
pub const THREADS_MAX: usize = 10_000;

/// The default partition key size of standard1/counter1, as cassandra-stress (`-key` is not exposed).
pub const KEY_SIZE_BYTES: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    Write,
    Read,
    CounterWrite,
    CounterRead,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Write => "WRITE",
            OpKind::Read => "READ",
            OpKind::CounterWrite => "COUNTER_WRITE",
            OpKind::CounterRead => "COUNTER_READ",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "write" | "insert" => Some(OpKind::Write),
            "read" => Some(OpKind::Read),
            "counter_write" | "counterwrite" | "counter_add" => Some(OpKind::CounterWrite),
            "counter_read" | "counterread" => Some(OpKind::CounterRead),
            _ => None,
        }
    }

    pub fn is_write(self) -> bool {
        matches!(self, OpKind::Write | OpKind::CounterWrite)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// One predefined operation on standard1 / counter1.
    Single(OpKind),
    /// `mixed ratio(write=1,read=1)`: predefined operations in proportion.
    Mixed(Vec<(OpKind, f64)>),
    /// `user profile=FILE ops(insert=1,query=1)`: a YAML profile; `insert` or named queries.
    User {
        profile: PathBuf,
        ops: Vec<(String, f64)>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    Any,
    One,
    Two,
    Three,
    Quorum,
    All,
    LocalQuorum,
    EachQuorum,
    LocalOne,
}

impl std::fmt::Display for Consistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Any => "ANY",
            Self::One => "ONE",
            Self::Two => "TWO",
            Self::Three => "THREE",
            Self::Quorum => "QUORUM",
            Self::All => "ALL",
            Self::LocalQuorum => "LOCAL_QUORUM",
            Self::EachQuorum => "EACH_QUORUM",
            Self::LocalOne => "LOCAL_ONE",
        })
    }
}

impl Consistency {
    /// The protocol's code of the level (spec §3, `[consistency]`).
    pub fn wire_code(self) -> u16 {
        match self {
            Self::Any => 0x0000,
            Self::One => 0x0001,
            Self::Two => 0x0002,
            Self::Three => 0x0003,
            Self::Quorum => 0x0004,
            Self::All => 0x0005,
            Self::LocalQuorum => 0x0006,
            Self::EachQuorum => 0x0007,
            Self::LocalOne => 0x000A,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_uppercase().as_str() {
            "ANY" => Self::Any,
            "ONE" => Self::One,
            "TWO" => Self::Two,
            "THREE" => Self::Three,
            "QUORUM" => Self::Quorum,
            "ALL" => Self::All,
            "LOCAL_QUORUM" => Self::LocalQuorum,
            "EACH_QUORUM" => Self::EachQuorum,
            "LOCAL_ONE" => Self::LocalOne,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Population {
    /// `seq=A..B`: every seed in order, wrapping around.
    Seq { min: i64, max: i64 },
    /// `dist=DIST`: seeds drawn from a distribution.
    Dist(Distribution),
}

impl std::fmt::Display for Population {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Population::Seq { min, max } => write!(f, "seq={min}..{max}"),
            Population::Dist(d) => write!(f, "dist={d}"),
        }
    }
}

impl Population {
    pub fn size(&self) -> u64 {
        let (min, max) = match self {
            Population::Seq { min, max } => (*min, *max),
            Population::Dist(d) => (d.min, d.max),
        };
        (max - min).unsigned_abs() + 1
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateMode {
    /// As fast as `threads` in-flight operations allow.
    Unlimited,
    /// `throttle=N/s` (or the older `limit=N/s`): at most N operations a second;
    /// latency is timed from each operation's actual start.
    Throttle(f64),
    /// `fixed=N/s`: operations scheduled N a second; latency is timed from each operation's
    /// intended start, so a stall is charged to every operation it delays (no coordinated omission).
    Fixed(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    /// Concurrent in-flight operations.
    pub threads: usize,
    pub mode: RateMode,
    /// `auto` (or `threads>=`/`threads<=`): search the thread count that saturates the server.
    pub auto: Option<AutoThreads>,
}

/// cassandra-stress's automatic thread search: runs at `min` threads, then doubling below 16
/// and growing by half above, up to `max`, until throughput stops improving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoThreads {
    pub min: usize,
    pub max: usize,
}

impl Default for AutoThreads {
    fn default() -> Self {
        AutoThreads { min: 4, max: 1000 }
    }
}

impl AutoThreads {
    /// The thread count after `t`, or `None` past `max`.
    pub fn next(&self, t: usize) -> Option<usize> {
        let n = if t < 16 { t * 2 } else { t + t / 2 };
        (n <= self.max).then_some(n)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Columns {
    /// Cell size distribution (default FIXED(34)).
    pub size: Distribution,
    /// Cells per partition (default FIXED(5)); the table has `max` columns.
    pub count: Distribution,
    /// Column names, "C0".."C4" by default.
    pub names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub keyspace: String,
    pub replication_strategy: String,
    /// `replication_factor` and any other replication options, in the order given.
    pub replication_options: Vec<(String, String)>,
    /// `compaction(strategy=X, opt=v)`.
    pub compaction: Option<(String, Vec<(String, String)>)>,
    pub compression: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct InsertOverrides {
    pub visits: Option<Distribution>,
    pub partitions: Option<Distribution>,
    pub select_ratio: Option<String>,
    pub batchtype: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Log {
    pub file: Option<PathBuf>,
    pub hdrfile: Option<PathBuf>,
    /// Our extension: a JSON result file for the benchmark harness.
    pub json: Option<PathBuf>,
    pub interval: Option<Duration>,
    pub no_summary: bool,
    pub no_settings: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub file: PathBuf,
    pub title: Option<String>,
    pub revision: Option<String>,
    pub op: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub command: Command,
    /// `n=`: total operations.
    pub count: Option<u64>,
    /// `duration=`: run time.
    pub duration: Option<Duration>,
    pub consistency: Consistency,
    pub no_warmup: bool,
    /// Attempts per operation (cassandra-stress: tries=9 → 10 attempts).
    pub tries: u32,
    /// `-errors ignore` / `ignore_errors`: count failures and continue.
    pub ignore_errors: bool,
    pub population: Population,
    pub contents_sorted: bool,
    pub rate: Rate,
    pub columns: Columns,
    pub schema: Schema,
    pub nodes: Vec<String>,
    pub port: u16,
    pub insert: InsertOverrides,
    pub log: Log,
    pub graph: Option<Graph>,
    /// `add=DIST` for counter writes (default FIXED(1)).
    pub counter_add: Distribution,
    /// `-mode driver`: every request through the driver session, never the pipelined
    /// connection (crate::pipeline).
    pub driver_only: bool,
    /// `-mode coalesce=50us`: the pipelined connection's shortest time between two sends;
    /// zero (the default) sends every turn (see `crate::pipeline::Pipeline::connect`).
    pub send_interval: Duration,
    /// Everything else given (accepted, recorded in the settings dump).
    pub accepted: Vec<String>,
}

impl Settings {
    /// The command line as given, for reports.
    pub fn describe_command(&self) -> String {
        match &self.command {
            Command::Single(k) => k.name().to_string(),
            Command::Mixed(r) => format!(
                "MIXED ratio({})",
                r.iter()
                    .map(|(k, w)| format!("{}={w}", k.name().to_ascii_lowercase()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Command::User { profile, ops } => format!(
                "USER profile={} ops({})",
                profile.display(),
                ops.iter()
                    .map(|(k, w)| format!("{k}={w}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }

    /// True when the run only inserts (then the default population is sequential).
    pub fn insert_only(&self) -> bool {
        match &self.command {
            Command::Single(k) => k.is_write(),
            Command::Mixed(r) => r.iter().all(|(k, w)| k.is_write() || *w == 0.0),
            Command::User { ops, .. } => ops.iter().all(|(k, w)| k == "insert" || *w == 0.0),
        }
    }
}

pub const USAGE: &str = "\
Usage:      amphora stress <command> [options]
Help usage: amphora stress help <command|option>

---Commands---
read                 : Multiple concurrent reads - the cluster must first be populated by a write test
write                : Multiple concurrent writes against the cluster
mixed                : Interleaving of any basic commands, with configurable ratio and distribution
counter_write        : Multiple concurrent updates of counters
counter_read         : Multiple concurrent reads of counters
user                 : Interleaving of user provided queries, with configurable ratio and distribution
help                 : Print help for a command or option

Command parameters: n=N | duration=N[s|m|h] [cl=ONE|QUORUM|...] [no-warmup] [tries=N]
                    [ignore_errors] [add=DIST] ; mixed: ratio(write=1,read=1) ;
                    user: profile=FILE ops(insert=1,QUERY=1)
---Options---
-pop                 : seq=A..B | dist=DIST  [contents=SORTED|SHUFFLED] [no-wrap]
-rate                : threads=N [throttle=N/s | fixed=N/s | limit=N/s]
-col                 : [size=DIST] [n=DIST] [names=a,b,...]
-schema              : [replication(factor=N,strategy=S)] [keyspace=NAME] [compaction(strategy=X)] [compression=C]
-mode                : [driver] native cql3 [prepared] [protocolVersion=N] ... (accepted)
                       (write/read/mixed against one node use a lean pipelined connection;
                        driver: the driver session for every request)
-node                : HOST[,HOST...]
-port                : native=N | N   (jmx= and thrift= accepted)
-errors              : [ignore] [retries=N]
-insert              : [visits=DIST] [partitions=DIST] [select-ratio=DIST] [batchtype=UNLOGGED|LOGGED]
-log                 : [file=FILE] [hdrfile=FILE] [json=FILE] [interval=N] [no-summary] [no-settings]
-graph               : file=FILE.html [title=T] [revision=R] [op=O]
DIST: FIXED(v) | UNIFORM(a..b) | GAUSSIAN(a..b[,stdvrng]) | GAUSSIAN(a..b,mean,stdev) | EXP(a..b) ; ~ inverts
";

/// Parses a cassandra-stress command line (without the program name).
pub fn parse(args: &[String]) -> Result<Settings, StressError> {
    let words = normalise(args);
    let mut it = words.into_iter().peekable();
    let command_word = it
        .next()
        .ok_or_else(|| StressError::usage("No command specified"))?;
    let mut command_params = Vec::new();
    while let Some(w) = it.peek() {
        if is_option(w) {
            break;
        }
        command_params.push(it.next().unwrap_or_default());
    }
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    while let Some(opt) = it.next() {
        let (name, inline) = split_option(&opt);
        let mut params: Vec<String> = inline.into_iter().collect();
        while let Some(w) = it.peek() {
            if is_option(w) {
                break;
            }
            params.push(it.next().unwrap_or_default());
        }
        if groups.insert(name.clone(), params).is_some() {
            return Err(StressError::usage(format!(
                "{name} is defined multiple times"
            )));
        }
    }

    let mut accepted = Vec::new();
    let cmd = parse_command(&command_word, &command_params, &mut accepted)?;

    let mut ignore_errors = cmd.ignore_errors;
    let mut tries = cmd.tries;
    if let Some(p) = groups.remove("-errors") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            if lw == "ignore" {
                ignore_errors = true;
            } else if let Some(v) = lw.strip_prefix("retries=") {
                tries = v
                    .parse::<u32>()
                    .map_err(|_| bad_opt("-errors", &w))?
                    .saturating_add(1);
            } else if lw == "skip-read-validation" {
                accepted.push(w);
            } else {
                return Err(bad_opt("-errors", &w));
            }
        }
    }

    let default_limit = cmd.count.unwrap_or(1_000_000).max(1) as i64;
    let insert_only = match &cmd.command {
        Command::Single(k) => k.is_write(),
        Command::Mixed(_) => false,
        Command::User { ops, .. } => ops.iter().all(|(k, w)| k == "insert" || *w == 0.0),
    };
    let mut population = if insert_only {
        Population::Seq {
            min: 1,
            max: default_limit,
        }
    } else {
        Population::Dist(Distribution::parse(&format!(
            "gaussian(1..{default_limit})"
        ))?)
    };
    let mut contents_sorted = false;
    if let Some(p) = groups.remove("-pop") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            if let Some(v) = lw.strip_prefix("seq=") {
                let (min, max) = parse_range(v).ok_or_else(|| bad_opt("-pop", &w))?;
                if min > max {
                    return Err(bad_opt("-pop", &w));
                }
                population = Population::Seq { min, max };
            } else if lw.starts_with("dist=") {
                population = Population::Dist(Distribution::parse(&w[5..])?);
            } else if let Some(v) = lw.strip_prefix("contents=") {
                contents_sorted = match v {
                    "sorted" => true,
                    "shuffled" => false,
                    _ => return Err(bad_opt("-pop", &w)),
                };
            } else if lw == "no-wrap" || lw.starts_with("read-lookback=") {
                accepted.push(w);
            } else {
                return Err(bad_opt("-pop", &w));
            }
        }
    }

    let default_threads = match (&cmd.command, cmd.count) {
        (Command::Single(k), Some(_)) if k.is_write() => 200,
        _ => 200,
    };
    let mut rate = Rate {
        threads: default_threads,
        mode: RateMode::Unlimited,
        auto: None,
    };
    if let Some(p) = groups.remove("-rate") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            if let Some(v) = lw.strip_prefix("threads=") {
                rate.threads = v.parse().map_err(|_| bad_opt("-rate", &w))?;
                if rate.threads == 0 || rate.threads > THREADS_MAX {
                    return Err(bad_opt("-rate", &w));
                }
            } else if let Some(v) = lw
                .strip_prefix("throttle=")
                .or_else(|| lw.strip_prefix("limit="))
            {
                let r = parse_per_second(v).ok_or_else(|| bad_opt("-rate", &w))?;
                rate.mode = if r > 0.0 {
                    RateMode::Throttle(r)
                } else {
                    RateMode::Unlimited
                };
            } else if let Some(v) = lw.strip_prefix("fixed=") {
                let r = parse_per_second(v).ok_or_else(|| bad_opt("-rate", &w))?;
                if r <= 0.0 {
                    return Err(bad_opt("-rate", &w));
                }
                rate.mode = RateMode::Fixed(r);
            } else if lw == "auto" {
                rate.auto.get_or_insert_with(AutoThreads::default);
            } else if let Some(v) = lw.strip_prefix("threads>=") {
                let n: usize = v.parse().map_err(|_| bad_opt("-rate", &w))?;
                if n == 0 || n > THREADS_MAX {
                    return Err(bad_opt("-rate", &w));
                }
                rate.auto.get_or_insert_with(AutoThreads::default).min = n;
            } else if let Some(v) = lw.strip_prefix("threads<=") {
                let n: usize = v.parse().map_err(|_| bad_opt("-rate", &w))?;
                if n == 0 || n > THREADS_MAX {
                    return Err(bad_opt("-rate", &w));
                }
                rate.auto.get_or_insert_with(AutoThreads::default).max = n;
            } else {
                return Err(bad_opt("-rate", &w));
            }
        }
    }

    if let Some(a) = rate.auto
        && a.min > a.max
    {
        return Err(StressError::usage(
            "-rate: threads>= must not exceed threads<=",
        ));
    }

    let mut columns = Columns {
        size: Distribution::fixed(34),
        count: Distribution::fixed(5),
        names: Vec::new(),
    };
    if let Some(p) = groups.remove("-col") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            if lw.starts_with("size=") {
                columns.size = Distribution::parse(&w[5..])?;
            } else if lw.starts_with("n=") {
                columns.count = Distribution::parse(&w[2..])?;
            } else if lw.starts_with("names=") {
                columns.names = w[6..].split(',').map(str::to_string).collect();
            } else if lw == "slice"
                || lw.starts_with("super=")
                || lw.starts_with("comparator=")
                || lw.starts_with("timestamp=")
            {
                accepted.push(w);
            } else {
                return Err(bad_opt("-col", &w));
            }
        }
    }
    if columns.size.min < 0 || columns.count.min < 0 || columns.count.max > 1000 {
        return Err(StressError::usage(
            "-col: sizes must be >= 0 and at most 1000 columns",
        ));
    }
    if columns.names.is_empty() {
        // Like cassandra-stress: "C0".."Cn-1", sorted as bytes.
        let mut names: Vec<String> = (0..columns.count.max).map(|i| format!("C{i}")).collect();
        names.sort();
        columns.names = names;
    }

    let mut schema = Schema {
        keyspace: "keyspace1".into(),
        replication_strategy: "org.apache.cassandra.locator.SimpleStrategy".into(),
        replication_options: Vec::new(),
        compaction: None,
        compression: None,
    };
    if let Some(p) = groups.remove("-schema") {
        if matches!(cmd.command, Command::User { .. }) {
            return Err(StressError::usage(
                "-schema can only be provided with predefined operations insert, read, etc.; the 'user' command requires a schema yaml instead",
            ));
        }
        for w in p {
            let lw = w.to_ascii_lowercase();
            if let Some(v) = lw.strip_prefix("keyspace=") {
                let _ = v;
                schema.keyspace = w[9..].to_string();
            } else if lw.starts_with("compression=") {
                schema.compression = Some(w[12..].to_string());
            } else if let Some(inner) = group_args(&w, "replication") {
                for (k, v) in inner {
                    match k.to_ascii_lowercase().as_str() {
                        "strategy" | "class" => {
                            schema.replication_strategy = if v.contains('.') {
                                v
                            } else {
                                format!("org.apache.cassandra.locator.{v}")
                            }
                        }
                        "factor" => schema
                            .replication_options
                            .push(("replication_factor".into(), v)),
                        _ => schema.replication_options.push((k, v)),
                    }
                }
            } else if let Some(inner) = group_args(&w, "compaction") {
                let mut strategy = None;
                let mut opts = Vec::new();
                for (k, v) in inner {
                    if k.eq_ignore_ascii_case("strategy") || k.eq_ignore_ascii_case("class") {
                        strategy = Some(v);
                    } else {
                        opts.push((k, v));
                    }
                }
                let strategy = strategy
                    .ok_or_else(|| bad_opt("-schema", "compaction(...) needs strategy="))?;
                schema.compaction = Some((strategy, opts));
            } else {
                return Err(bad_opt("-schema", &w));
            }
        }
    }
    if schema.replication_options.is_empty()
        || (schema.replication_strategy.ends_with("SimpleStrategy")
            && !schema
                .replication_options
                .iter()
                .any(|(k, _)| k == "replication_factor"))
    {
        schema
            .replication_options
            .insert(0, ("replication_factor".into(), "1".into()));
    }

    let mut nodes = vec!["localhost".to_string()];
    if let Some(p) = groups.remove("-node") {
        let mut hosts = Vec::new();
        for w in p {
            let lw = w.to_ascii_lowercase();
            if lw == "whitelist" || lw.starts_with("datacenter=") {
                accepted.push(w);
            } else if lw.starts_with("file=") {
                let path = PathBuf::from(&w[5..]);
                let text = std::fs::read_to_string(&path).map_err(|source| StressError::Io {
                    what: "reading -node file",
                    path: path.clone(),
                    source,
                })?;
                hosts.extend(text.split_whitespace().map(str::to_string));
            } else {
                hosts.extend(
                    w.split(',')
                        .map(str::trim)
                        .filter(|h| !h.is_empty())
                        .map(str::to_string),
                );
            }
        }
        if !hosts.is_empty() {
            nodes = hosts;
        }
    }

    let mut port = 9042u16;
    if let Some(p) = groups.remove("-port") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            if let Some(v) = lw.strip_prefix("native=") {
                port = v.parse().map_err(|_| bad_opt("-port", &w))?;
            } else if lw.starts_with("thrift=") || lw.starts_with("jmx=") {
                accepted.push(w);
            } else if let Ok(v) = lw.parse::<u16>() {
                port = v;
            } else {
                return Err(bad_opt("-port", &w));
            }
        }
    }

    let mut driver_only = false;
    let mut send_interval = Duration::ZERO;
    if let Some(p) = groups.remove("-mode") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            if lw == "driver" {
                driver_only = true;
                continue;
            }
            if let Some(v) = lw.strip_prefix("coalesce=") {
                send_interval = parse_send_interval(v).ok_or_else(|| bad_opt("-mode", &w))?;
                continue;
            }
            let known = [
                "native",
                "cql3",
                "prepared",
                "unprepared",
                "simplenative",
                "thrift",
            ];
            let known_kv = [
                "protocolversion=",
                "user=",
                "password=",
                "connectionsperhost=",
                "maxpending=",
                "compression=",
                "port=",
                "auth-provider=",
                "frame-size=",
                "smart",
                "whitelist",
                "requestsperconnection=",
            ];
            if known.contains(&lw.as_str()) || known_kv.iter().any(|k| lw.starts_with(k)) {
                accepted.push(w);
            } else {
                return Err(bad_opt("-mode", &w));
            }
        }
    }

    let mut insert = InsertOverrides::default();
    if let Some(p) = groups.remove("-insert") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            let value = || {
                w.split_once('=')
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_default()
            };
            if lw.starts_with("visits=") {
                insert.visits = Some(Distribution::parse(&value())?);
            } else if lw.starts_with("partitions=") {
                insert.partitions = Some(Distribution::parse(&value())?);
            } else if lw.starts_with("select-ratio=") || lw.starts_with("select=") {
                insert.select_ratio = Some(value());
            } else if lw.starts_with("batchtype=") {
                insert.batchtype = Some(value());
            } else if lw.starts_with("revisit=") || lw.starts_with("row-population-ratio=") {
                accepted.push(w);
            } else {
                return Err(bad_opt("-insert", &w));
            }
        }
    }

    let mut log = Log::default();
    if let Some(p) = groups.remove("-log") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            let value = || {
                w.split_once('=')
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_default()
            };
            if lw.starts_with("file=") {
                log.file = Some(value().into());
            } else if lw.starts_with("hdrfile=") {
                log.hdrfile = Some(value().into());
            } else if lw.starts_with("json=") {
                log.json = Some(value().into());
            } else if lw.starts_with("interval=") {
                log.interval = Some(parse_interval(&value()).ok_or_else(|| bad_opt("-log", &w))?);
            } else if lw == "no-summary" {
                log.no_summary = true;
            } else if lw == "no-settings" {
                log.no_settings = true;
            } else if lw.starts_with("level=") {
                accepted.push(w);
            } else {
                return Err(bad_opt("-log", &w));
            }
        }
    }
    if let Some(p) = groups.remove("-reporting") {
        for w in p {
            let lw = w.to_ascii_lowercase();
            if let Some(v) = lw.strip_prefix("output-frequency=") {
                log.interval = Some(parse_interval(v).ok_or_else(|| bad_opt("-reporting", &w))?);
            } else if lw.starts_with("header-frequency=") {
                accepted.push(w);
            } else {
                return Err(bad_opt("-reporting", &w));
            }
        }
    }

    let mut graph = None;
    if let Some(p) = groups.remove("-graph") {
        let mut file = None;
        let mut title = None;
        let mut revision = None;
        let mut op = None;
        for w in p {
            let lw = w.to_ascii_lowercase();
            let value = || {
                w.split_once('=')
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_default()
            };
            if lw.starts_with("file=") {
                file = Some(PathBuf::from(value()));
            } else if lw.starts_with("title=") {
                title = Some(value());
            } else if lw.starts_with("revision=") {
                revision = Some(value());
            } else if lw.starts_with("op=") {
                op = Some(value());
            } else {
                return Err(bad_opt("-graph", &w));
            }
        }
        let file = file.ok_or_else(|| StressError::usage("-graph requires file="))?;
        graph = Some(Graph {
            file,
            title,
            revision,
            op,
        });
    }

    for ignored in [
        "-transport",
        "-jmx",
        "-sendto",
        "-tokenrange",
        "-credentials-file",
    ] {
        if let Some(p) = groups.remove(ignored) {
            accepted.push(ignored.to_string());
            accepted.extend(p);
        }
    }
    if let Some((name, _)) = groups.into_iter().next() {
        return Err(StressError::usage(format!("Unrecognised option: {name}")));
    }

    Ok(Settings {
        command: cmd.command,
        count: cmd.count,
        duration: cmd.duration,
        consistency: cmd.consistency,
        no_warmup: cmd.no_warmup,
        tries,
        ignore_errors,
        population,
        contents_sorted,
        rate,
        columns,
        schema,
        nodes,
        port,
        insert,
        log,
        graph,
        counter_add: cmd.add,
        driver_only,
        send_interval,
        accepted,
    })
}

struct CommandSettings {
    command: Command,
    count: Option<u64>,
    duration: Option<Duration>,
    consistency: Consistency,
    no_warmup: bool,
    tries: u32,
    ignore_errors: bool,
    add: Distribution,
}

fn parse_command(
    word: &str,
    params: &[String],
    accepted: &mut Vec<String>,
) -> Result<CommandSettings, StressError> {
    let lword = word.to_ascii_lowercase();
    let mut s = CommandSettings {
        command: Command::Single(OpKind::Write),
        count: None,
        duration: None,
        consistency: Consistency::LocalOne,
        no_warmup: false,
        tries: 10,
        ignore_errors: false,
        add: Distribution::fixed(1),
    };
    let mut ratio: Option<Vec<(OpKind, f64)>> = None;
    let mut profile = None;
    let mut ops: Option<Vec<(String, f64)>> = None;
    for p in params {
        let lp = p.to_ascii_lowercase();
        if let Some(v) = lp.strip_prefix("n=") {
            let n = parse_long(v)
                .filter(|n| *n > 0)
                .ok_or_else(|| bad_cmd(word, p))?;
            s.count = Some(n as u64);
        } else if let Some(v) = lp.strip_prefix("duration=") {
            s.duration = Some(parse_duration(v).ok_or_else(|| bad_cmd(word, p))?);
        } else if let Some(v) = lp.strip_prefix("cl=") {
            s.consistency = Consistency::parse(v).ok_or_else(|| bad_cmd(word, p))?;
        } else if lp == "no-warmup" || lp == "no_warmup" {
            s.no_warmup = true;
        } else if lp == "ignore_errors" {
            s.ignore_errors = true;
        } else if let Some(v) = lp.strip_prefix("tries=") {
            s.tries = v
                .parse::<u32>()
                .map_err(|_| bad_cmd(word, p))?
                .saturating_add(1);
        } else if lp.starts_with("add=") {
            s.add = Distribution::parse(&p[4..])?;
        } else if let Some(inner) = group_args(p, "ratio") {
            let mut r = Vec::new();
            for (k, v) in inner {
                let kind = OpKind::parse(&k).ok_or_else(|| bad_cmd(word, p))?;
                let w: f64 = v.parse().map_err(|_| bad_cmd(word, p))?;
                r.push((kind, w));
            }
            ratio = Some(r);
        } else if let Some(inner) = group_args(p, "ops") {
            let mut r = Vec::new();
            for (k, v) in inner {
                let w: f64 = v.parse().map_err(|_| bad_cmd(word, p))?;
                r.push((k, w));
            }
            ops = Some(r);
        } else if lp.starts_with("profile=") {
            profile = Some(PathBuf::from(&p[8..]));
        } else if lp.starts_with("truncate=")
            || lp.starts_with("at-once=")
            || lp.starts_with("clustering=")
            || lp.starts_with("err<")
            || lp.starts_with("n>")
            || lp.starts_with("n<")
            || lp.starts_with("keysize=")
        {
            accepted.push(p.clone());
        } else {
            return Err(bad_cmd(word, p));
        }
    }
    if s.count.is_some() && s.duration.is_some() {
        return Err(StressError::usage(format!(
            "Invalid {word} options: give either n= or duration=, not both"
        )));
    }
    if lword != "mixed" && ratio.is_some() {
        return Err(StressError::usage(format!(
            "{word}: ratio(...) is for mixed"
        )));
    }
    if lword != "user" && (ops.is_some() || profile.is_some()) {
        return Err(StressError::usage(format!(
            "{word}: profile= and ops(...) are for user"
        )));
    }
    s.command = match lword.as_str() {
        "mixed" => {
            let r = ratio.unwrap_or_else(|| vec![(OpKind::Read, 1.0), (OpKind::Write, 1.0)]);
            if r.iter().map(|(_, w)| w).sum::<f64>() <= 0.0 {
                return Err(StressError::usage("mixed: ratio(...) weights sum to zero"));
            }
            Command::Mixed(r)
        }
        "user" => {
            let profile =
                profile.ok_or_else(|| StressError::usage("user: profile=FILE is required"))?;
            let ops = ops.ok_or_else(|| StressError::usage("user: ops(...) is required"))?;
            if ops.is_empty() || ops.iter().map(|(_, w)| w).sum::<f64>() <= 0.0 {
                return Err(StressError::usage("user: ops(...) weights sum to zero"));
            }
            Command::User { profile, ops }
        }
        other => match OpKind::parse(other) {
            Some(k) if other != "insert" => Command::Single(k),
            _ => {
                return Err(StressError::usage(format!("Unknown command: {word}")));
            }
        },
    };
    Ok(s)
}

/// `name(k=v,k=v)` → pairs; None if the word is not that group.
fn group_args(word: &str, name: &str) -> Option<Vec<(String, String)>> {
    let lw = word.to_ascii_lowercase();
    let rest = lw.strip_prefix(name)?;
    if !rest.starts_with('(') || !word.ends_with(')') {
        return None;
    }
    let inner = &word[name.len() + 1..word.len() - 1];
    let mut out = Vec::new();
    for kv in inner.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=')?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    Some(out)
}

fn is_option(w: &str) -> bool {
    w.len() > 1
        && w.starts_with('-')
        && w[1..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
}

/// `-node,,` → ("-node", Some(",,")): the part after the option name, if any.
fn split_option(w: &str) -> (String, Option<String>) {
    let name_len = 1 + w[1..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .unwrap_or(w.len() - 1);
    let name = w[..name_len].to_ascii_lowercase();
    let rest = &w[name_len..];
    (name, (!rest.is_empty()).then(|| rest.to_string()))
}

fn normalise(args: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut join_next = false;
    // A quoted word such as 'size=FIXED(1024) n=FIXED(1)' holds several parameters.
    for a in args.iter().flat_map(|a| a.split_whitespace()) {
        let a = a.replace('\\', "");
        let a = a.as_str();
        if a.is_empty() {
            continue;
        }
        if join_next {
            join_next = false;
            out.push(format!("-{a}"));
            continue;
        }
        if a == "-" {
            join_next = true;
            continue;
        }
        out.push(a.to_string());
    }
    out
}

fn bad_opt(opt: &str, word: &str) -> StressError {
    StressError::usage(format!(
        "Invalid {opt} options provided, see output for valid options: '{word}'"
    ))
}

fn bad_cmd(cmd: &str, word: &str) -> StressError {
    StressError::usage(format!(
        "Invalid {cmd} options provided, see output for valid options: '{word}'"
    ))
}

/// `10s`, `5m`, `15min`, `1h`, `1hr`, `2d`; a bare number is seconds.
pub fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim().to_ascii_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..split].parse().ok()?;
    let secs = match &v[split..] {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => n,
        "m" | "min" | "mins" | "minute" | "minutes" => n * 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => n * 3600,
        "d" | "day" | "days" => n * 86_400,
        _ => return None,
    };
    (secs > 0).then(|| Duration::from_secs(secs))
}

fn parse_interval(v: &str) -> Option<Duration> {
    let v = v.trim().to_ascii_lowercase();
    if let Some(ms) = v.strip_suffix("ms") {
        return ms
            .parse::<u64>()
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
    }
    parse_duration(&v)
}

/// `-mode coalesce=`: `0`, `N` or `Nus` (microseconds), `Nms`.
fn parse_send_interval(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Some(ms) = v.strip_suffix("ms") {
        return ms.parse::<u64>().ok().map(Duration::from_millis);
    }
    let us = v.strip_suffix("us").unwrap_or(v);
    us.parse::<u64>().ok().map(Duration::from_micros)
}

/// `1000/s` or `1000`.
fn parse_per_second(v: &str) -> Option<f64> {
    let n = v.trim().strip_suffix("/s").unwrap_or(v.trim());
    parse_long(n).map(|n| n as f64)
}

/// Splits a command line the way a POSIX shell would for the seeds' examples:
/// whitespace, single and double quotes, and backslash escapes.
pub fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut chars = line.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => cur.push(c),
            (Some(_), '\\') => {
                if let Some(n) = chars.next() {
                    if n != '"' && n != '\\' && n != '$' {
                        cur.push('\\');
                    }
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                has = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next()
                    && n != '\n'
                {
                    cur.push(n);
                    has = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if has || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            (None, c) => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has || !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Result<Settings, StressError> {
        parse(&shell_words(line))
    }

    fn ok(line: &str) -> Settings {
        match p(line) {
            Ok(s) => s,
            Err(e) => panic!("{line}: {e}"),
        }
    }

    #[test]
    fn mode_coalesce_sets_the_pipelined_send_interval() {
        assert_eq!(ok("write n=10").send_interval, Duration::ZERO);
        assert_eq!(
            ok("write n=10 -rate threads=8 fixed=1000/s").send_interval,
            Duration::ZERO
        );
        assert_eq!(
            ok("write n=10 -rate threads=8 fixed=1000/s -mode coalesce=0").send_interval,
            Duration::ZERO
        );
        assert_eq!(
            ok("write n=10 -mode native coalesce=20us").send_interval,
            Duration::from_micros(20)
        );
        assert_eq!(
            ok("write n=10 -mode coalesce=2ms").send_interval,
            Duration::from_millis(2)
        );
        assert!(p("write n=10 -mode coalesce=soon").is_err());
    }

    #[test]
    fn shell_splitting() {
        assert_eq!(
            shell_words(r#"a 'b c' "d e" f\(g\) -x"#),
            vec!["a", "b c", "d e", "f(g)", "-x"]
        );
    }

    #[test]
    fn defaults_like_cassandra_stress() {
        let s = ok("write n=2000");
        assert_eq!(s.command, Command::Single(OpKind::Write));
        assert_eq!(s.count, Some(2000));
        assert_eq!(s.consistency, Consistency::LocalOne);
        assert_eq!(s.population, Population::Seq { min: 1, max: 2000 });
        assert_eq!(s.rate.threads, 200);
        assert_eq!(s.rate.mode, RateMode::Unlimited);
        assert_eq!(s.columns.size, Distribution::fixed(34));
        assert_eq!(s.columns.names, vec!["C0", "C1", "C2", "C3", "C4"]);
        assert_eq!(s.schema.keyspace, "keyspace1");
        assert_eq!(
            s.schema.replication_options,
            vec![("replication_factor".to_string(), "1".to_string())]
        );
        assert_eq!(s.nodes, vec!["localhost"]);
        assert_eq!(s.port, 9042);
        assert_eq!(s.tries, 10);
        // Reads default to a gaussian over 1..n.
        let s = ok("read n=1000");
        assert!(matches!(s.population, Population::Dist(ref d) if d.min == 1 && d.max == 1000));
    }

    #[test]
    fn every_command() {
        assert_eq!(
            ok("read duration=10s").command,
            Command::Single(OpKind::Read)
        );
        assert_eq!(
            ok("counter_write n=10").command,
            Command::Single(OpKind::CounterWrite)
        );
        assert_eq!(
            ok("counter_read n=10").command,
            Command::Single(OpKind::CounterRead)
        );
        assert_eq!(
            ok("mixed ratio(write=1,read=1) n=10").command,
            Command::Mixed(vec![(OpKind::Write, 1.0), (OpKind::Read, 1.0)])
        );
        assert_eq!(
            ok("mixed n=10").command,
            Command::Mixed(vec![(OpKind::Read, 1.0), (OpKind::Write, 1.0)])
        );
        let s = ok("user profile=stress.yaml ops(insert=9,query_by_machine_id=1) duration=1m");
        assert_eq!(
            s.command,
            Command::User {
                profile: "stress.yaml".into(),
                ops: vec![("insert".into(), 9.0), ("query_by_machine_id".into(), 1.0)]
            }
        );
        assert!(matches!(p("frobnicate n=1"), Err(StressError::Usage(_))));
        assert!(matches!(p(""), Err(StressError::Usage(_))));
        assert!(matches!(
            p("user ops(insert=1)"),
            Err(StressError::Usage(_))
        ));
        assert!(matches!(
            p("write n=1 ratio(write=1)"),
            Err(StressError::Usage(_))
        ));
    }

    #[test]
    fn command_params() {
        let s = ok("write n=1400m cl=QUORUM no-warmup tries=3 ignore_errors");
        assert_eq!(s.count, Some(1_400_000_000));
        assert_eq!(s.consistency, Consistency::Quorum);
        assert!(s.no_warmup && s.ignore_errors);
        assert_eq!(s.tries, 4);
        assert_eq!(
            ok("write duration=30s").duration,
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            ok("write duration=5m").duration,
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            ok("write duration=2h").duration,
            Some(Duration::from_secs(7200))
        );
        assert_eq!(
            ok("write duration=15min").duration,
            Some(Duration::from_secs(900))
        );
        assert_eq!(
            ok("write duration=1hr").duration,
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            ok("read cl=local_one n=1").consistency,
            Consistency::LocalOne
        );
        assert!(p("write duration=5x").is_err());
        assert!(p("write n=abc").is_err());
        assert!(p("write cl=TWELVE").is_err());
        assert!(p("write n=5 duration=5s").is_err());
        assert!(p("write bogus=1").is_err());
        assert_eq!(
            ok("counter_write n=5 add=fixed(2)").counter_add,
            Distribution::fixed(2)
        );
    }

    #[test]
    fn pop_option() {
        assert_eq!(
            ok("write n=1 -pop seq=1..1000000").population,
            Population::Seq {
                min: 1,
                max: 1_000_000
            }
        );
        let s = ok("read n=1 -pop dist=UNIFORM(1..5000)");
        assert_eq!(
            s.population,
            Population::Dist(Distribution::uniform(1, 5000))
        );
        let s = ok("read n=1 -pop dist=GAUSSIAN(1..1000,500,100)");
        assert!(matches!(s.population, Population::Dist(ref d) if d.max == 1000));
        let s = ok("read n=1 -pop dist=gauss(1..750000000,500000000,250000000)");
        assert!(matches!(s.population, Population::Dist(ref d) if d.max == 750_000_000));
        let s = ok("write n=1 -pop seq=1..100k contents=SORTED");
        assert!(s.contents_sorted);
        assert_eq!(
            s.population,
            Population::Seq {
                min: 1,
                max: 100_000
            }
        );
        assert!(p("write n=1 -pop seq=5").is_err());
        assert!(p("write n=1 -pop dist=zipf(1..5)").is_err());
        assert!(p("write n=1 -pop nonsense").is_err());
    }

    #[test]
    fn rate_option() {
        let s = ok("write n=1 -rate threads=350");
        assert_eq!(
            s.rate,
            Rate {
                threads: 350,
                mode: RateMode::Unlimited,
                auto: None,
            }
        );
        let s = ok("write n=1 -rate threads=700 throttle=25000/s");
        assert_eq!(s.rate.mode, RateMode::Throttle(25000.0));
        let s = ok("write n=1 -rate threads=500 fixed=1000/s");
        assert_eq!(s.rate.mode, RateMode::Fixed(1000.0));
        let s = ok("write n=1 -rate threads=150 limit=20000/s");
        assert_eq!(s.rate.mode, RateMode::Throttle(20000.0));
        assert!(p("write n=1 -rate threads=0").is_err());
        assert_eq!(
            ok("write n=1 -rate threads=10000").rate.threads,
            THREADS_MAX
        );
        assert!(p("write n=1 -rate threads=10001").is_err());
        assert!(p("write n=1 -rate threads=x").is_err());
        assert!(p("write n=1 -rate fixed=0/s").is_err());
        assert!(p("write n=1 -rate speed=9").is_err());
    }

    #[test]
    fn rate_auto() {
        let a = ok("write n=1 -rate auto").rate.auto;
        assert_eq!(a, Some(AutoThreads { min: 4, max: 1000 }));
        let a = ok("write n=1 -rate threads>=8 threads<=100").rate.auto;
        assert_eq!(a, Some(AutoThreads { min: 8, max: 100 }));
        assert!(p("write n=1 -rate threads>=50 threads<=10").is_err());
        assert!(p("write n=1 -rate threads>=0").is_err());
        let a = AutoThreads { min: 4, max: 40 };
        let mut steps = vec![a.min];
        while let Some(n) = a.next(*steps.last().unwrap_or(&a.max)) {
            steps.push(n);
        }
        assert_eq!(steps, vec![4, 8, 16, 24, 36]);
    }

    #[test]
    fn col_option() {
        let s = ok("write n=1 -col size=FIXED(1024) n=FIXED(1)");
        assert_eq!(s.columns.size, Distribution::fixed(1024));
        assert_eq!(s.columns.names, vec!["C0"]);
        let s = ok("write n=1 -col n=FIXED(12)");
        assert_eq!(s.columns.names[..4], ["C0", "C1", "C10", "C11"]);
        assert!(p("write n=1 -col width=3").is_err());
    }

    #[test]
    fn schema_option() {
        let s = ok(
            "write n=1 -schema replication(factor=3) keyspace=ks2 compaction(strategy=LeveledCompactionStrategy)",
        );
        assert_eq!(s.schema.keyspace, "ks2");
        assert_eq!(
            s.schema.replication_options,
            vec![("replication_factor".to_string(), "3".to_string())]
        );
        assert_eq!(
            s.schema.compaction,
            Some(("LeveledCompactionStrategy".to_string(), vec![]))
        );
        let s = ok("write n=1 -schema replication(strategy=NetworkTopologyStrategy,dc1=3)");
        assert_eq!(
            s.schema.replication_strategy,
            "org.apache.cassandra.locator.NetworkTopologyStrategy"
        );
        assert_eq!(
            s.schema.replication_options,
            vec![("dc1".to_string(), "3".to_string())]
        );
        assert!(p("write n=1 -schema frob").is_err());
        assert!(p("user profile=a.yaml ops(insert=1) -schema keyspace=x").is_err());
    }

    #[test]
    fn connection_options() {
        let s = ok(
            "write n=1 -node 10.0.0.1,10.0.0.2 -port native=9043 -mode native cql3 protocolVersion=3 -errors ignore",
        );
        assert_eq!(s.nodes, vec!["10.0.0.1", "10.0.0.2"]);
        assert_eq!(s.port, 9043);
        assert!(s.ignore_errors);
        assert_eq!(ok("write n=1 -port 9999").port, 9999);
        assert_eq!(ok("write n=1 -port jmx=6868").port, 9042);
        assert_eq!(ok("write n=1 -mode cql3 native").port, 9042);
        assert_eq!(ok("write n=1 -node,,").nodes, vec!["localhost"]);
        assert!(p("write n=1 -node a -nodes b").is_err());
    }

    #[test]
    fn log_graph_insert_options() {
        let s = ok(
            "write n=1 -log file=a.log hdrfile=a.hdr json=a.json interval=2 -graph file=a.html title=T revision=r1",
        );
        assert_eq!(s.log.file, Some("a.log".into()));
        assert_eq!(s.log.hdrfile, Some("a.hdr".into()));
        assert_eq!(s.log.json, Some("a.json".into()));
        assert_eq!(s.log.interval, Some(Duration::from_secs(2)));
        let g = s.graph.unwrap();
        assert_eq!(
            (g.file, g.title, g.revision),
            ("a.html".into(), Some("T".into()), Some("r1".into()))
        );
        let s = ok(
            "user profile=p.yaml ops(insert=1) n=1 -insert visits=fixed(100) partitions=fixed(1) batchtype=UNLOGGED",
        );
        assert_eq!(s.insert.visits, Some(Distribution::fixed(100)));
        assert_eq!(s.insert.batchtype.as_deref(), Some("UNLOGGED"));
        assert!(p("write n=1 -graph title=x").is_err());
        assert!(p("write n=1 -log colour=red").is_err());
        assert!(p("write n=1 -frobnicate").is_err());
        assert!(p("write n=1 -rate threads=1 -rate threads=2").is_err());
    }

    /// Every command line in ../shared/seeds, verbatim (placeholders filled in).
    #[test]
    fn seed_command_lines() {
        let seeds = [
            // DSE 6 vs Cassandra IoT benchmark.
            r"user profile=stress.yaml ops\(\insert=1\) n=1400m cl=QUORUM no-warmup -mode native cql3 protocolVersion=3 -errors ignore -rate threads=350 -pop seq=1..14000000 contents=SORTED -insert visits=fixed\(\100\) -node host1,host2,host3 -log file=seq1.log hdrfile=seq1.hdr -graph file=seq1.html title=seq1",
            r"user profile=stress.yaml ops\(query_by_machine_id=1\) duration=10m cl=ONE no-warmup -mode native cql3 protocolVersion=3 -errors ignore -rate threads=350 -pop seq=1..14000000 contents=SORTED -insert visits=fixed\(100\) -node host1,host2,host3 -log file=Thread_Test_10Mpop_seq1.log hdrfile=Thread_Test_10Mpop_seq1.hdr -graph file=Thread_Test_10Mpop_seq1.html title=Thread_Test_10Mpop_seq1",
            r"user profile=stress.yaml ops\(insert=9,query_by_machine_id=1\) duration=1hr cl=ONE no-warmup -mode native cql3 protocolVersion=3 -errors ignore - rate threads=350 -pop seq=1..14000000 contents=SORTED -insert visits=fixed\(100\) - node host1,host2,host3 -log file=90Write_10Read_10Mpop_seq1.log hdrfile=90Write_10Read_10Mpop_seq1.hdr -graph file=90Write_10Read_10Mpop_seq1.html title=90Write_10Read_10Mpop_seq1",
            r"user profile=stress.yaml ops\(\insert=5,query_by_machine_id=5\) duration=1hr cl=ONE no-warmup -mode native cql3 protocolVersion=3 -errors ignore - rate threads=350 -pop seq=1..1400000 contents=SORTED -insert visits=fixed\(\100\) - node host1,host2,host3 -log file=50Write_50Read_10Mpop_seq1.log hdrfile=50Write_50Read_10Mpop_seq1.hdr -graph file=50Write_50Read_10Mpop_seq1.html title=50Write_50Read_10Mpop_seq1",
            r"user profile=stress.yaml ops\(\insert=1,query_by_machine_id=9\) duration=1hr cl=ONE no-warmup -mode native cql3 protocolVersion=3 -errors ignore - rate threads=350 -pop seq=1..14000000 contents=SORTED -insert visits=fixed\(\100\) - node host1,host2,host3 -log file=10Write_90Read_10Mpop_seq1.log hdrfile=10Write_90Read_10Mpop_seq1.hdr -graph file=10Write_90Read_10Mpop_seq1.html title=10Write_90Read_10Mpop_seq1",
            r"user profile=stress.yaml ops\(\insert=1\) n=10m cl=ONE no-warmup -rate threads=50 -insert visits=fixed\(\100\) -pop seq=1..100k contents=SORTED",
            // ScyllaDB 2.2 performance.
            "write no-warmup cl=QUORUM n=1000000000 -schema 'replication(factor=3)' -port jmx=6868 -mode cql3 native -rate threads=200 -col 'size=FIXED(1024) n=FIXED(1)' -pop seq=1..1000000000",
            "read no-warmup cl=QUORUM duration=100m -schema keyspace=keyspace2 'replication(factor=3)' -port jmx=6868 -mode cql3 native -rate 'threads=150 limit=20000/s' -errors ignore -col 'size=FIXED(1024) n=FIXED(1)' -pop 'dist=gauss(1..750000000,500000000,250000000)'",
            "write no-warmup cl=QUORUM duration=120m -schema keyspace=keyspace2 'replication(factor=3)' -port jmx=6868 -mode cql3 native -rate 'threads=1000' -errors ignore -pop 'seq=1..500000000'",
            // ScyllaDB 4.4 vs Cassandra 4.0.
            r#"write cl=QUORUM n=1000 -schema "replication(strategy=SimpleStrategy,replication_factor=3)" "compaction(strategy=SizeTieredCompactionStrategy)" -mode native cql3"#,
            r#"mixed ratio(write=1,read=1) duration=5m cl=QUORUM -pop dist=UNIFORM(1..1000000) -mode native cql3 -rate "threads=700 throttle=8333/s""#,
            r#"mixed ratio(write=1,read=1) duration=5m cl=QUORUM -pop dist=UNIFORM(1..1000000) -mode native cql3 -rate "threads=700 fixed=333/s""#,
            r#"mixed ratio(write=0,read=1) duration=180m cl=QUORUM -pop dist=GAUSSIAN(1..1000000,500000,100000) -mode native cql3 -rate "threads=500 throttle=35000/s" -node 10.0.0.1"#,
            r#"read duration=30m cl=QUORUM -pop dist=GAUSSIAN(1..1000000,500000,100000) -mode native cql3 -rate "threads=500 fixed=10000/s""#,
            r#"read duration=30m cl=QUORUM -pop dist=UNIFORM(1..1000000) -mode native cql3 -rate "threads=500 fixed=10000/s""#,
            // ScyllaDB vs Cassandra on low-end hardware.
            r#"write n=270258064 cl=QUORUM -schema "replication(factor=3)" -mode native cql3 -pop seq=540516129..810774192 -node,, -rate threads=800 -log file=Scyllareplica3mar22017.data"#,
            r#"write duration=30m cl=QUORUM -schema "replication(factor=3)" -mode native cql3 -pop seq=1..810774192 -node,, -rate threads=800 limit=5000/s -log file=testlim5k_ScyllaC32xlMar22017.data"#,
            r"read duration=20m cl=QUORUM -mode native cql3 -pop dist=gaussian\(1..810774192,405387096,10000\) -node,, -rate threads=400 -log file=testreadsmall_Scylla_C32xlMar22017.data",
            r"read duration=60m cl=QUORUM -mode native cql3 -pop dist=uniform\(1..810774192\) -node,, -rate threads=400 -log file=testreadlarge_Scylla_C32xlMar22017.data",
            r"read duration=60m no-warmup cl=QUORUM -mode native cql3 -pop dist=uniform\(1..810774192\) -node,, -rate threads=10 -log file=testmixed_read.data",
            r#"write duration=4h cl=QUORUM -schema "replication(factor=3)" -mode native cql3 -pop seq=1..10000000 -node,, -rate threads=800 limit=30000/s -log file=testmixed_write30k.data"#,
            // ScyllaDB vs Cassandra, single server.
            "write duration=15min -mode native cql3 -rate threads=700 -node 10.0.0.5",
            "mixed 'ratio(read=1)' duration=15min -pop 'dist=gauss(1..10000000,5000000,500000)' -mode native cql3 -rate threads=700 -node 10.0.0.5",
            "mixed 'ratio(read=1,write=1)' duration=15min -pop 'dist=gauss(1..10000000,5000000,500000)' -mode native cql3 -rate threads=700 -node 10.0.0.5",
            r#"write n=1000 -pop "seq=1..1000" -mode native cql3 -rate threads=700 -node 10.0.0.5"#,
        ];
        for line in seeds {
            ok(line);
        }
        let s = ok(seeds[0]);
        assert_eq!(s.count, Some(1_400_000_000));
        assert_eq!(s.rate.threads, 350);
        assert_eq!(s.insert.visits, Some(Distribution::fixed(100)));
        assert_eq!(s.nodes, vec!["host1", "host2", "host3"]);
        assert_eq!(
            s.graph.as_ref().and_then(|g| g.title.clone()),
            Some("seq1".into())
        );
        let s = ok(seeds[2]);
        assert_eq!(s.rate.threads, 350);
        assert_eq!(s.nodes.len(), 3);
        assert_eq!(s.duration, Some(Duration::from_secs(3600)));
        let s = ok(seeds[7]);
        assert_eq!(s.rate.mode, RateMode::Throttle(20000.0));
        assert_eq!(s.schema.keyspace, "keyspace2");
        assert_eq!(s.columns.size, Distribution::fixed(1024));
    }
}
