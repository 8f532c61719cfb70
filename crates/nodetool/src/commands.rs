//! One function per nodetool command: REST calls, then Cassandra's output layout.

use std::io::Write;
use std::time::Duration;

use serde_json::Value;

use crate::NodetoolError;
use crate::client::{Client, encode};
use crate::format::{TableBuilder, bytes, file_size, timestamp_ms};

type R = Result<(), NodetoolError>;

/// Commands Cassandra's nodetool has that the server cannot do yet.
const NOT_YET: &[&str] = &[
    "assassinate",
    "bootstrap",
    "decommission",
    "disableautocompaction",
    "enableautocompaction",
    "getcompactionthroughput",
    "gossipinfo",
    "import",
    "invalidatekeycache",
    "invalidaterowcache",
    "move",
    "netstats",
    "proxyhistograms",
    "rebuild",
    "removenode",
    "repair",
    "resetlocalschema",
    "setcompactionthroughput",
    "tpstats",
    "upgradesstables",
    "verify",
];

const COMMANDS: &[(&str, &str)] = &[
    (
        "cleanup",
        "Triggers the immediate cleanup of keys no longer belonging to a node (here: to a shard)",
    ),
    (
        "clearsnapshot",
        "Remove the snapshot with the given name (-t) or all of them (--all)",
    ),
    (
        "compact",
        "Force a (major) compaction on one or more tables",
    ),
    ("compactionhistory", "Print history of compaction"),
    ("compactionstats", "Print statistics on compactions"),
    (
        "describecluster",
        "Print the name, snitch, partitioner and schema version of a cluster",
    ),
    (
        "describering",
        "Shows the token ranges info of a given keyspace",
    ),
    (
        "disablebinary",
        "Disable native transport (binary protocol)",
    ),
    (
        "drain",
        "Drain the node (stop accepting writes and flush all tables)",
    ),
    (
        "enablebinary",
        "Reenable native transport (binary protocol)",
    ),
    ("flush", "Flush one or more tables"),
    (
        "garbagecollect",
        "Remove deleted data from one or more tables",
    ),
    ("getendpoints", "Print the end points that owns the key"),
    ("getlogginglevels", "Get the runtime logging levels"),
    ("gettimeout", "Print the timeout of the given type in ms"),
    (
        "gettraceprobability",
        "Print the current trace probability value",
    ),
    ("info", "Print node information (uptime, load, ...)"),
    (
        "listsnapshots",
        "Lists all the snapshots along with the size on disk and true size",
    ),
    (
        "refresh",
        "Load newly placed SSTables (in the table's upload/ directory) to the system without restart",
    ),
    ("ring", "Print information about the token ring"),
    ("scrub", "Scrub (rebuild sstables for) one or more tables"),
    (
        "setlogginglevel",
        "Set the log level of a component (ROOT for all); no arguments reset the levels",
    ),
    (
        "settimeout",
        "Set the specified timeout in ms, or 0 to disable timeout",
    ),
    (
        "settraceprobability",
        "Sets the probability for tracing any given request to value. 0 disables, 1 enables for all requests, 0 is the default",
    ),
    (
        "snapshot",
        "Take a snapshot of specified keyspaces or a snapshot of the specified table",
    ),
    (
        "status",
        "Print cluster information (state, load, IDs, ...)",
    ),
    (
        "statusbinary",
        "Status of native transport (binary protocol)",
    ),
    ("stopdaemon", "Stop cassandra daemon"),
    (
        "tablehistograms",
        "Print statistic histograms for a given table (alias: cfhistograms)",
    ),
    ("tablestats", "Print statistics on tables (alias: cfstats)"),
    (
        "toppartitions",
        "Sample and print the most active partitions",
    ),
    ("version", "Print cassandra version"),
];

/// Synopsis and options of commands (`nodetool help <command>`), Cassandra's wording.
const USAGE: &[(&str, &str)] = &[
    (
        "garbagecollect",
        "nodetool garbagecollect [(-g <granularity> | --granularity <granularity>)] [(-j <jobs> | --jobs <jobs>)] [--background] [--] [<keyspace> <tables>...]\n\n\
         -g, --granularity  ROW (default) removes deleted partitions and rows, CELL also deleted cells\n\
         -j, --jobs         accepted and ignored (each shard rewrites one SSTable at a time)\n\
         --background       print the task id and return (follow it with compactionstats)",
    ),
    (
        "cleanup",
        "nodetool cleanup [(-j <jobs> | --jobs <jobs>)] [--background] [--] [<keyspace> <tables>...]\n\n\
         Drops the partitions a shard does not own (on one node: only files placed in the wrong shard).",
    ),
    (
        "scrub",
        "nodetool scrub [(-s | --skip-corrupted)] [(-ns | --no-snapshot)] [(-n | --no-validate)] [(-j <jobs> | --jobs <jobs>)] [--background] [--] [<keyspace> <tables>...]\n\n\
         -s, --skip-corrupted  also skip corrupt partitions of tables with counters (others are always skipped)\n\
         -ns, --no-snapshot    do not snapshot the tables first (default: snapshot pre-scrub-<ms>)\n\
         Out-of-service (corrupt) SSTables are rewritten with their readable partitions and put back in service.",
    ),
    (
        "refresh",
        "nodetool refresh [--] <keyspace> <table>\n\n\
         Loads the SSTables placed in <data_dir>/shard-<N>/<keyspace>/<table>-<id>/upload/ (any shard)\n\
         into the shards owning their partitions, then deletes them from upload/.",
    ),
    (
        "toppartitions",
        "nodetool toppartitions [-a <samplers>] [-k <topCount>] [-s <capacity>] [--] <keyspace> <cfname> <duration>\n\n\
         <duration>  sampling time in milliseconds (at most 300000)\n\
         -a          comma-separated samplers: READS, WRITES (default both; Cassandra's others are not supported)\n\
         -k          number of top partitions to list (default 10, less than -s)\n\
         -s          keys tracked per shard and sampler (default 256, at most 1024)\n\n\
         Output as Cassandra 5.0's: 'Frequency of reads by partition:' then Table, Partition, Count, +/-\n\
         (the cardinality of each sampler is in the REST answer).",
    ),
];

/// `nodetool help <command>`.
pub fn help_command(cmd: &str, out: &mut dyn Write) -> R {
    if let Some((_, u)) = USAGE.iter().find(|(c, _)| *c == cmd) {
        writeln!(out, "usage: {u}")?;
        return Ok(());
    }
    match COMMANDS.iter().find(|(c, _)| *c == cmd) {
        Some((c, d)) => {
            writeln!(out, "nodetool {c}: {d}")?;
            Ok(())
        }
        None => Err(NodetoolError::Usage(format!("Unknown command {cmd}"))),
    }
}

pub fn help(out: &mut dyn Write) -> R {
    writeln!(
        out,
        "usage: amphora nodetool [(-h <host> | --host <host>)] [(-p <port> | --port <port>)] <command> [<args>]"
    )?;
    writeln!(out)?;
    writeln!(out, "The port is the node's REST API port (default 10000).")?;
    writeln!(out)?;
    writeln!(out, "The most commonly used nodetool commands are:")?;
    for (c, d) in COMMANDS {
        writeln!(out, "    {c:<22}{d}")?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "See 'nodetool help <command>' for more information on a specific command."
    )?;
    Ok(())
}

pub fn dispatch(c: &Client, cmd: &str, args: &[String], out: &mut dyn Write) -> R {
    match cmd {
        "help" | "--help" => match args.first() {
            Some(cmd) => help_command(cmd, out),
            None => help(out),
        },
        "status" => status(c, args, out),
        "info" => info(c, args, out),
        "ring" => ring(c, args, out),
        "describecluster" => describecluster(c, out),
        "describering" => describering(c, args, out),
        "tablestats" | "cfstats" => tablestats(c, args, out),
        "tablehistograms" | "cfhistograms" => tablehistograms(c, args, out),
        "compactionstats" => compactionstats(c, args, out),
        "compactionhistory" => compactionhistory(c, out),
        "flush" => flush(c, args),
        "compact" => compact(c, args, out),
        "garbagecollect" => garbagecollect(c, args, out),
        "cleanup" => cleanup(c, args, out),
        "scrub" => scrub(c, args, out),
        "refresh" => refresh(c, args),
        "toppartitions" => toppartitions(c, args, out),
        "snapshot" => snapshot(c, args, out),
        "listsnapshots" => listsnapshots(c, out),
        "clearsnapshot" => clearsnapshot(c, args, out),
        "getendpoints" => getendpoints(c, args, out),
        "gettimeout" => gettimeout(c, args),
        "settimeout" => settimeout(c, args),
        "drain" => c.post("/storage_service/drain").map(drop),
        "stopdaemon" => c.post("/storage_service/stop_daemon").map(drop),
        "enablebinary" => c.post("/storage_service/native_transport").map(drop),
        "disablebinary" => c.delete("/storage_service/native_transport").map(drop),
        "statusbinary" => {
            let running = c.get("/storage_service/native_transport")?;
            let s = if running.as_bool() == Some(true) {
                "running"
            } else {
                "not running"
            };
            writeln!(out, "{s}")?;
            Ok(())
        }
        "version" => version(c, args, out),
        "getlogginglevels" => getlogginglevels(c, out),
        "setlogginglevel" => setlogginglevel(c, args),
        "settraceprobability" => settraceprobability(c, args),
        "gettraceprobability" => {
            let p = c.get("/storage_service/trace_probability")?;
            writeln!(
                out,
                "Current trace probability: {}",
                p.as_f64().unwrap_or(0.0)
            )?;
            Ok(())
        }
        other if NOT_YET.contains(&other) => {
            Err(NodetoolError::Unsupported(format!("'nodetool {other}'")))
        }
        other => Err(NodetoolError::Usage(format!(
            "Found unexpected parameters: [{other}]"
        ))),
    }
}

// ---- small helpers ----

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// Splits flags (`-x`, `--xx`) from positional arguments.
fn split_flags(args: &[String]) -> (Vec<&str>, Vec<&str>) {
    let (flags, pos): (Vec<&String>, Vec<&String>) =
        args.iter().partition(|a| a.starts_with('-') && a.len() > 1);
    (
        flags.into_iter().map(String::as_str).collect(),
        pos.into_iter().map(String::as_str).collect(),
    )
}

fn reject_flags(cmd: &str, flags: &[&str], allowed: &[&str]) -> R {
    match flags.iter().find(|f| !allowed.contains(f)) {
        Some(f) => Err(NodetoolError::Usage(format!("{cmd}: unknown option {f}"))),
        None => Ok(()),
    }
}

// ---- node and ring ----

fn status(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (flags, pos) = split_flags(args);
    reject_flags("status", &flags, &["-r", "--resolve-ip"])?;
    let owns_header = match pos.first() {
        Some(ks) => {
            // Validates the keyspace.
            c.get(&format!("/storage_service/describe_ring/{}", encode(ks)))?;
            "Owns (effective)"
        }
        None => "Owns",
    };
    let n = c.get("/storage_service/node_info")?;
    let dc = format!("Datacenter: {}", s(&n, "datacenter"));
    writeln!(out, "{dc}")?;
    writeln!(out, "{}", "=".repeat(dc.len()))?;
    writeln!(out, "Status=Up/Down")?;
    writeln!(out, "|/ State=Normal/Leaving/Joining/Moving")?;
    let mut t = TableBuilder::with_delimiter("  ");
    t.add([
        "--",
        "Address",
        "Load",
        "Tokens",
        owns_header,
        "Host ID",
        "Rack",
    ]);
    t.add([
        "UN".to_string(),
        s(&n, "address").to_string(),
        file_size(u(&n, "load_bytes") as f64),
        u(&n, "tokens").to_string(),
        "100.0%".to_string(),
        s(&n, "host_id").to_string(),
        s(&n, "rack").to_string(),
    ]);
    write!(out, "{}", t.render())?;
    writeln!(out)?;
    Ok(())
}

fn info(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (flags, _) = split_flags(args);
    reject_flags("info", &flags, &["-T", "--tokens"])?;
    let n = c.get("/storage_service/node_info")?;
    let line = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "{k:<23}: {v}");
    line(out, "ID", s(&n, "host_id").into())?;
    line(out, "Gossip active", "false".into())?;
    line(
        out,
        "Native Transport active",
        n.get("native_transport")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .to_string(),
    )?;
    line(out, "Load", file_size(u(&n, "load_bytes") as f64))?;
    line(out, "Generation No", u(&n, "generation").to_string())?;
    line(out, "Uptime (seconds)", u(&n, "uptime_seconds").to_string())?;
    line(out, "Data Center", s(&n, "datacenter").into())?;
    line(out, "Rack", s(&n, "rack").into())?;
    line(out, "Shards", u(&n, "shards").to_string())?;
    line(
        out,
        "Memtable data size",
        file_size(u(&n, "memtable_bytes") as f64),
    )?;
    line(
        out,
        "Commitlog size",
        file_size(u(&n, "commitlog_bytes") as f64),
    )?;
    line(out, "SSTable count", u(&n, "sstable_count").to_string())?;
    line(out, "Mode", s(&n, "operation_mode").into())?;
    if flags.iter().any(|f| *f == "-T" || *f == "--tokens") {
        for t in arr(&c.get("/storage_service/tokens")?) {
            line(out, "Token", t.as_str().unwrap_or("").into())?;
        }
    } else {
        line(
            out,
            "Token",
            format!(
                "(invoke with -T/--tokens to see all {} tokens)",
                u(&n, "tokens")
            ),
        )?;
    }
    Ok(())
}

fn ring(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (flags, pos) = split_flags(args);
    reject_flags("ring", &flags, &["-r", "--resolve-ip"])?;
    if let Some(ks) = pos.first() {
        c.get(&format!("/storage_service/describe_ring/{}", encode(ks)))?;
    }
    let n = c.get("/storage_service/node_info")?;
    let tokens = c.get("/storage_service/tokens")?;
    let tokens: Vec<&str> = arr(&tokens).iter().filter_map(Value::as_str).collect();
    let addr = s(&n, "address");
    let w = addr.len().max(7) + 2;
    let row = |out: &mut dyn Write, cols: [&str; 7]| {
        writeln!(
            out,
            "{:<w$}{:<12}{:<7}{:<8}{:<16}{:<20}{:<44}",
            cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6]
        )
    };
    writeln!(out)?;
    writeln!(out, "Datacenter: {}", s(&n, "datacenter"))?;
    writeln!(out, "==========")?;
    row(
        out,
        [
            "Address", "Rack", "Status", "State", "Load", "Owns", "Token",
        ],
    )?;
    row(
        out,
        ["", "", "", "", "", "", tokens.last().copied().unwrap_or("")],
    )?;
    let load = file_size(u(&n, "load_bytes") as f64);
    for t in &tokens {
        row(
            out,
            [addr, s(&n, "rack"), "Up", "Normal", &load, "100.00%", t],
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "  Warning: \"nodetool ring\" is used to output all the tokens of a node."
    )?;
    writeln!(
        out,
        "  To view status related info of a node use \"nodetool status\" instead."
    )?;
    writeln!(out)?;
    Ok(())
}

fn short_class(class: &str) -> &str {
    class.rsplit('.').next().unwrap_or(class)
}

fn describecluster(c: &Client, out: &mut dyn Write) -> R {
    let n = c.get("/storage_service/node_info")?;
    let addr = s(&n, "address");
    writeln!(out, "Cluster Information:")?;
    writeln!(out, "\tName: {}", s(&n, "cluster_name"))?;
    writeln!(
        out,
        "\tPartitioner: org.apache.cassandra.dht.Murmur3Partitioner"
    )?;
    writeln!(out, "\tSchema versions:")?;
    writeln!(out, "\t\t{}: [{addr}]", s(&n, "schema_version"))?;
    writeln!(out)?;
    writeln!(out, "Stats for all nodes:")?;
    writeln!(out, "\tLive: 1")?;
    writeln!(out, "\tJoining: 0")?;
    writeln!(out, "\tMoving: 0")?;
    writeln!(out, "\tLeaving: 0")?;
    writeln!(out, "\tUnreachable: 0")?;
    writeln!(out)?;
    writeln!(out, "Data Centers: ")?;
    writeln!(out, "\t{} #Nodes: 1 #Down: 0", s(&n, "datacenter"))?;
    writeln!(out)?;
    writeln!(out, "Database versions:")?;
    writeln!(out, "\t{}: [{addr}]", s(&n, "release_version"))?;
    writeln!(out)?;
    writeln!(out, "Keyspaces:")?;
    for k in arr(&c.get("/storage_service/keyspaces_replication")?) {
        let repl = k.get("replication").cloned().unwrap_or(Value::Null);
        let class = repl.get("class").and_then(Value::as_str).unwrap_or("");
        let opts: Vec<String> = repl
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| k.as_str() != "class")
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect()
            })
            .unwrap_or_default();
        writeln!(
            out,
            "\t{} -> Replication class: {} {{{}}}",
            s(k, "keyspace"),
            short_class(class),
            opts.join(", ")
        )?;
    }
    Ok(())
}

fn describering(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (_, pos) = split_flags(args);
    let [ks] = pos.as_slice() else {
        return Err(NodetoolError::Usage(
            "describering requires a keyspace".into(),
        ));
    };
    let ring = c.get(&format!("/storage_service/describe_ring/{}", encode(ks)))?;
    let n = c.get("/storage_service/node_info")?;
    writeln!(out, "Schema Version:{}", s(&n, "schema_version"))?;
    writeln!(out, "TokenRange: ")?;
    for r in arr(&ring) {
        let list = |k: &str| -> String {
            arr(r.get(k).unwrap_or(&Value::Null))
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let details: Vec<String> = arr(r.get("endpoint_details").unwrap_or(&Value::Null))
            .iter()
            .map(|d| {
                format!(
                    "EndpointDetails(host:{}, datacenter:{}, rack:{})",
                    s(d, "host"),
                    s(d, "datacenter"),
                    s(d, "rack")
                )
            })
            .collect();
        writeln!(
            out,
            "\tTokenRange(start_token:{}, end_token:{}, endpoints:[{}], rpc_endpoints:[{}], endpoint_details:[{}])",
            s(r, "start_token"),
            s(r, "end_token"),
            list("endpoints"),
            list("rpc_endpoints"),
            details.join(", ")
        )?;
    }
    Ok(())
}

// ---- tables ----

fn ms(total_us: f64, count: u64) -> String {
    if count == 0 {
        "NaN ms".into()
    } else {
        format!("{:.3} ms", total_us / count as f64 / 1000.0)
    }
}

fn tablestats(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (flags, pos) = split_flags(args);
    reject_flags("tablestats", &flags, &["-H", "--human-readable"])?;
    let human = !flags.is_empty();
    let all = c.get("/column_family/stats/all")?;
    let tables = arr(&all);
    // Filters: `ks` or `ks.table`; each must match something.
    let mut wanted: Vec<(String, Option<String>)> = Vec::new();
    for p in &pos {
        let (ks, t) = match p.split_once('.') {
            Some((k, t)) => (k.to_string(), Some(t.to_string())),
            None => (p.to_string(), None),
        };
        let found = tables
            .iter()
            .any(|x| s(x, "keyspace") == ks && t.as_deref().is_none_or(|t| s(x, "table") == t));
        if !found {
            return Err(NodetoolError::Failed(match &t {
                Some(t) => format!("Unknown table {t} in keyspace {ks}"),
                None => format!("Unknown keyspace: {ks}"),
            }));
        }
        wanted.push((ks, t));
    }
    let selected: Vec<&Value> = tables
        .iter()
        .filter(|x| {
            wanted.is_empty()
                || wanted.iter().any(|(k, t)| {
                    s(x, "keyspace") == k && t.as_deref().is_none_or(|t| s(x, "table") == t)
                })
        })
        .collect();
    writeln!(out, "Total number of tables: {}", tables.len())?;
    writeln!(out, "----------------")?;
    let mut keyspaces: Vec<&str> = selected.iter().map(|x| s(x, "keyspace")).collect();
    keyspaces.dedup();
    for ks in keyspaces {
        let in_ks: Vec<&&Value> = selected.iter().filter(|x| s(x, "keyspace") == ks).collect();
        let reads: u64 = in_ks.iter().map(|x| u(x, "read_count")).sum();
        let writes: u64 = in_ks.iter().map(|x| u(x, "write_count")).sum();
        let read_us: f64 = in_ks
            .iter()
            .map(|x| f(x, "read_latency_mean_us") * u(x, "read_count") as f64)
            .sum();
        let write_us: f64 = in_ks
            .iter()
            .map(|x| f(x, "write_latency_mean_us") * u(x, "write_count") as f64)
            .sum();
        writeln!(out, "Keyspace : {ks}")?;
        writeln!(out, "\tRead Count: {reads}")?;
        writeln!(out, "\tRead Latency: {}", ms(read_us, reads))?;
        writeln!(out, "\tWrite Count: {writes}")?;
        writeln!(out, "\tWrite Latency: {}", ms(write_us, writes))?;
        writeln!(
            out,
            "\tPending Flushes: {}",
            in_ks.iter().map(|x| u(x, "pending_flushes")).sum::<u64>()
        )?;
        for t in in_ks {
            writeln!(out, "\t\tTable: {}", s(t, "table"))?;
            writeln!(out, "\t\tSSTable count: {}", u(t, "sstable_count"))?;
            let levels = arr(t.get("sstables_in_each_level").unwrap_or(&Value::Null));
            if levels.iter().any(|l| u(l, "level") > 0) {
                let max = levels.iter().map(|l| u(l, "level")).max().unwrap_or(0);
                let counts: Vec<String> = (0..=max)
                    .map(|lv| {
                        levels
                            .iter()
                            .find(|l| u(l, "level") == lv)
                            .map_or(0, |l| u(l, "count"))
                            .to_string()
                    })
                    .collect();
                writeln!(out, "\t\tSSTables in each level: [{}]", counts.join(", "))?;
            }
            let live = u(t, "live_disk_space_used");
            writeln!(out, "\t\tSpace used (live): {}", bytes(live, human))?;
            writeln!(out, "\t\tSpace used (total): {}", bytes(live, human))?;
            writeln!(
                out,
                "\t\tSpace used by snapshots (total): {}",
                bytes(u(t, "snapshots_size_bytes"), human)
            )?;
            let ratio = f(t, "compression_ratio");
            writeln!(
                out,
                "\t\tSSTable Compression Ratio: {}",
                if ratio < 0.0 {
                    "-1.0".to_string()
                } else {
                    format!("{ratio:.5}")
                }
            )?;
            writeln!(
                out,
                "\t\tNumber of partitions (estimate): {}",
                u(t, "estimated_partitions")
            )?;
            writeln!(
                out,
                "\t\tMemtable data size: {}",
                bytes(u(t, "memtable_data_size"), human)
            )?;
            writeln!(
                out,
                "\t\tMemtable partition count: {}",
                u(t, "memtable_partitions")
            )?;
            let (r, w) = (u(t, "read_count"), u(t, "write_count"));
            writeln!(out, "\t\tLocal read count: {r}")?;
            writeln!(
                out,
                "\t\tLocal read latency: {}",
                ms(f(t, "read_latency_mean_us") * r as f64, r)
            )?;
            writeln!(out, "\t\tLocal write count: {w}")?;
            writeln!(
                out,
                "\t\tLocal write latency: {}",
                ms(f(t, "write_latency_mean_us") * w as f64, w)
            )?;
            writeln!(out, "\t\tPending flushes: {}", u(t, "pending_flushes"))?;
            writeln!(out)?;
        }
        writeln!(out, "----------------")?;
    }
    Ok(())
}

fn tablehistograms(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (_, pos) = split_flags(args);
    let (ks, t) = match pos.as_slice() {
        [one] => match one.split_once('.') {
            Some((k, t)) => (k.to_string(), t.to_string()),
            None => {
                return Err(NodetoolError::Usage(
                    "tablehistograms requires keyspace and table name arguments".into(),
                ));
            }
        },
        [k, t] => (k.to_string(), t.to_string()),
        _ => {
            return Err(NodetoolError::Usage(
                "tablehistograms requires keyspace and table name arguments".into(),
            ));
        }
    };
    let h = c.get(&format!(
        "/column_family/histograms/{}",
        encode(&format!("{ks}:{t}"))
    ))?;
    let null = Value::Null;
    let read = h.get("read_latency_us").unwrap_or(&null);
    let write = h.get("write_latency_us").unwrap_or(&null);
    let sst = h.get("sstables_per_read_node_wide").unwrap_or(&null);
    let size = h.get("partition_size_bytes").unwrap_or(&null);
    let cells = h.get("cell_count").unwrap_or(&null);
    // No SSTable yet: Cassandra prints NaN for these columns.
    let pow2 = |v: &Value, key: &str| {
        if v.is_null() {
            "NaN".to_string()
        } else {
            u(v, key).to_string()
        }
    };
    if size.is_null() || cells.is_null() {
        // Cassandra prints this on stderr too; stdout keeps its layout.
        let _ = writeln!(
            std::io::stderr(),
            "No SSTables exists, unable to calculate 'Partition Size' and 'Cell Count' percentiles"
        );
    }
    writeln!(out, "{ks}/{t} histograms")?;
    writeln!(
        out,
        "{:<10}{:>18}{:>18}{:>18}{:>18}{:>18}",
        "Percentile", "Read Latency", "Write Latency", "SSTables", "Partition Size", "Cell Count"
    )?;
    writeln!(
        out,
        "{:<10}{:>18}{:>18}{:>18}{:>18}{:>18}",
        "", "(micros)", "(micros)", "", "(bytes)", ""
    )?;
    for (label, key) in [
        ("50%", "p50"),
        ("75%", "p75"),
        ("95%", "p95"),
        ("98%", "p98"),
        ("99%", "p99"),
        ("Min", "min"),
        ("Max", "max"),
    ] {
        writeln!(
            out,
            "{:<10}{:>18.2}{:>18.2}{:>18.2}{:>18}{:>18}",
            label,
            f(read, key),
            f(write, key),
            f(sst, key),
            pow2(size, key),
            pow2(cells, key)
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "Note: SSTables counts reads of all tables on the node; Partition Size and Cell Count are of the SSTables (not memtables), as bucket upper bounds (powers of two)."
    )?;
    Ok(())
}

// ---- compaction ----

fn compactionstats(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (flags, _) = split_flags(args);
    reject_flags("compactionstats", &flags, &["-H", "--human-readable"])?;
    let human = !flags.is_empty();
    let p = c.get("/compaction_manager/metrics/pending_tasks")?;
    let running = c.get("/compaction_manager/compactions")?;
    writeln!(out, "pending tasks: {}", u(&p, "pending_tasks"))?;
    writeln!(out, "compactions completed: {}", u(&p, "completed_tasks"))?;
    writeln!(
        out,
        "data compacted: {}",
        bytes(u(&p, "bytes_compacted_in"), human)
    )?;
    let running = arr(&running);
    if !running.is_empty() {
        let mut t = TableBuilder::default();
        t.add([
            "id",
            "compaction type",
            "keyspace",
            "table",
            "completed",
            "total",
            "unit",
            "progress",
        ]);
        for r in running {
            let (done, total) = (u(r, "progress_completed"), u(r, "progress_total"));
            let pct = if total == 0 {
                100.0
            } else {
                done as f64 * 100.0 / total as f64
            };
            let qualified: Vec<&str> = arr(r.get("tables").unwrap_or(&Value::Null))
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let tables: Vec<&str> = qualified
                .iter()
                .map(|t| t.split_once('.').map_or(*t, |(_, n)| n))
                .collect();
            // A task over every keyspace lists the keyspaces of its tables.
            let mut keyspace = s(r, "keyspace").to_string();
            if keyspace == "*" {
                let mut ks: Vec<&str> = qualified
                    .iter()
                    .filter_map(|t| t.split_once('.').map(|(k, _)| k))
                    .collect();
                ks.sort_unstable();
                ks.dedup();
                keyspace = ks.join(",");
            }
            t.add([
                s(r, "id").to_string(),
                compaction_type(s(r, "kind")).to_string(),
                keyspace,
                tables.join(","),
                bytes(done, human),
                bytes(total, human),
                "bytes".to_string(),
                format!("{pct:.2}%"),
            ]);
        }
        write!(out, "{}", t.render())?;
        writeln!(out, "Active compaction remaining time :        n/a")?;
    }
    Ok(())
}

/// Cassandra's `OperationType` names of the task kinds.
fn compaction_type(kind: &str) -> &str {
    match kind {
        "major_compaction" => "Major compaction",
        "cleanup" => "Cleanup",
        "scrub" => "Scrub",
        "garbage_collect" => "Garbage collection",
        other => other,
    }
}

fn compactionhistory(c: &Client, out: &mut dyn Write) -> R {
    let h = c.get("/compaction_manager/compaction_history")?;
    writeln!(out, "Compaction History: ")?;
    let h = arr(&h);
    if h.is_empty() {
        writeln!(out, "There is no compaction history")?;
        return Ok(());
    }
    let mut t = TableBuilder::default();
    t.add([
        "id",
        "keyspace_name",
        "columnfamily_name",
        "compacted_at",
        "bytes_in",
        "bytes_out",
        "shard",
    ]);
    for r in h {
        t.add([
            s(r, "id").to_string(),
            s(r, "keyspace").to_string(),
            s(r, "table").to_string(),
            timestamp_ms(u(r, "compacted_at_ms")),
            u(r, "bytes_in").to_string(),
            u(r, "bytes_out").to_string(),
            u(r, "shard").to_string(),
        ]);
    }
    write!(out, "{}", t.render())?;
    Ok(())
}

/// `[ks [tables...]]` → the REST path suffix and query.
fn keyspace_path(base_all: &str, base_ks: &str, pos: &[&str], extra: &str) -> String {
    match pos.split_first() {
        None => format!(
            "{base_all}{}",
            if extra.is_empty() {
                String::new()
            } else {
                format!("?{extra}")
            }
        ),
        Some((ks, tables)) => {
            let mut q = Vec::new();
            if !tables.is_empty() {
                q.push(format!("cf={}", encode(&tables.join(","))));
            }
            if !extra.is_empty() {
                q.push(extra.to_string());
            }
            let q = if q.is_empty() {
                String::new()
            } else {
                format!("?{}", q.join("&"))
            };
            format!("{base_ks}/{}{q}", encode(ks))
        }
    }
}

fn flush(c: &Client, args: &[String]) -> R {
    let (flags, pos) = split_flags(args);
    reject_flags("flush", &flags, &[])?;
    c.post(&keyspace_path(
        "/storage_service/flush",
        "/storage_service/keyspace_flush",
        &pos,
        "",
    ))?;
    Ok(())
}

fn compact(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (flags, pos) = split_flags(args);
    for f in &flags {
        match *f {
            "-s" | "--split-output" | "--background" => {}
            "-st" | "--start-token" | "-et" | "--end-token" | "--user-defined" | "--partition" => {
                return Err(NodetoolError::Unsupported(format!(
                    "'nodetool compact {f}'"
                )));
            }
            other => {
                return Err(NodetoolError::Usage(format!(
                    "compact: unknown option {other}"
                )));
            }
        }
    }
    let split = flags.iter().any(|f| *f == "-s" || *f == "--split-output");
    let background = flags.contains(&"--background");
    let started = c.post(&keyspace_path(
        "/storage_service/compact",
        "/storage_service/keyspace_compaction",
        &pos,
        if split { "split_output=true" } else { "" },
    ))?;
    let id = s(&started, "task_id").to_string();
    if background {
        writeln!(out, "Started major compaction task {id}")?;
        writeln!(out, "Follow it with 'nodetool compactionstats'.")?;
        return Ok(());
    }
    wait_for_task(c, &id, "major compaction").map(drop)
}

/// Waits for a task to end; its final status, or an error if it failed.
fn wait_for_task(c: &Client, id: &str, what: &str) -> Result<Value, NodetoolError> {
    loop {
        let (status, t) = c.get_with_status(&format!(
            "/task_manager/wait_task/{}?timeout=60",
            encode(id)
        ))?;
        match status {
            200 => {
                if s(&t, "state") == "failed" {
                    return Err(NodetoolError::Failed(format!(
                        "{what} failed: {}",
                        s(&t, "error")
                    )));
                }
                return Ok(t);
            }
            408 => std::thread::sleep(Duration::from_millis(10)),
            other => {
                return Err(NodetoolError::Server {
                    status: other,
                    message: s(&t, "message").to_string(),
                });
            }
        }
    }
}

/// Options of a command: `value_opts` take the next argument; the rest of `-x` are
/// flags that must be in `flag_opts`; everything else (and all after `--`) is positional.
struct Opts<'a> {
    values: Vec<(&'a str, &'a str)>,
    flags: Vec<&'a str>,
    pos: Vec<&'a str>,
}

impl<'a> Opts<'a> {
    fn parse(
        cmd: &str,
        args: &'a [String],
        value_opts: &[&str],
        flag_opts: &[&str],
    ) -> Result<Self, NodetoolError> {
        let mut o = Opts {
            values: Vec::new(),
            flags: Vec::new(),
            pos: Vec::new(),
        };
        let mut it = args.iter();
        let mut rest = false;
        while let Some(a) = it.next() {
            let a = a.as_str();
            if rest || !a.starts_with('-') || a.len() == 1 {
                o.pos.push(a);
            } else if a == "--" {
                rest = true;
            } else if value_opts.contains(&a) {
                let v = it
                    .next()
                    .ok_or_else(|| NodetoolError::Usage(format!("{cmd}: {a} needs a value")))?;
                o.values.push((a, v.as_str()));
            } else if flag_opts.contains(&a) {
                o.flags.push(a);
            } else {
                return Err(NodetoolError::Usage(format!("{cmd}: unknown option {a}")));
            }
        }
        Ok(o)
    }

    fn value(&self, names: &[&str]) -> Option<&'a str> {
        self.values
            .iter()
            .rev()
            .find(|(k, _)| names.contains(k))
            .map(|(_, v)| *v)
    }

    fn flag(&self, names: &[&str]) -> bool {
        self.flags.iter().any(|f| names.contains(f))
    }
}

/// Validates `-j/--jobs` (accepted for compatibility: every shard works on its own
/// SSTables one at a time).
fn jobs_opt(cmd: &str, o: &Opts<'_>) -> R {
    match o.value(&["-j", "--jobs"]) {
        Some(j) if j.parse::<u32>().is_err() => Err(NodetoolError::Usage(format!(
            "{cmd}: --jobs must be a number, not {j}"
        ))),
        _ => Ok(()),
    }
}

/// Starts a task (`POST path`), then waits for it unless `--background`.
fn run_task(
    c: &Client,
    path: &str,
    what: &str,
    background: bool,
    out: &mut dyn Write,
) -> Result<Option<Value>, NodetoolError> {
    let started = c.post(path)?;
    let id = s(&started, "task_id").to_string();
    if background {
        writeln!(out, "Started {what} task {id}")?;
        writeln!(out, "Follow it with 'nodetool compactionstats'.")?;
        return Ok(None);
    }
    wait_for_task(c, &id, what).map(Some)
}

fn garbagecollect(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let o = Opts::parse(
        "garbagecollect",
        args,
        &["-g", "--granularity", "-j", "--jobs"],
        &["--background"],
    )?;
    jobs_opt("garbagecollect", &o)?;
    let g = o
        .value(&["-g", "--granularity"])
        .unwrap_or("ROW")
        .to_ascii_uppercase();
    if g != "ROW" && g != "CELL" {
        return Err(NodetoolError::Usage(format!(
            "garbagecollect: granularity must be ROW or CELL, not {g}"
        )));
    }
    let path = keyspace_path(
        "/storage_service/garbagecollect",
        "/storage_service/keyspace_garbagecollect",
        &o.pos,
        &format!("granularity={g}"),
    );
    run_task(
        c,
        &path,
        "garbage collection",
        o.flag(&["--background"]),
        out,
    )
    .map(drop)
}

fn cleanup(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let o = Opts::parse("cleanup", args, &["-j", "--jobs"], &["--background"])?;
    jobs_opt("cleanup", &o)?;
    let path = keyspace_path(
        "/storage_service/cleanup",
        "/storage_service/keyspace_cleanup",
        &o.pos,
        "",
    );
    run_task(c, &path, "cleanup", o.flag(&["--background"]), out).map(drop)
}

fn scrub(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let o = Opts::parse(
        "scrub",
        args,
        &["-j", "--jobs"],
        &[
            "-s",
            "--skip-corrupted",
            "-ns",
            "--no-snapshot",
            "-n",
            "--no-validate",
            "-r",
            "--reinsert-overflowed-ttl",
            "--background",
        ],
    )?;
    jobs_opt("scrub", &o)?;
    if o.flag(&["-r", "--reinsert-overflowed-ttl"]) {
        return Err(NodetoolError::Unsupported(
            "'nodetool scrub --reinsert-overflowed-ttl' (no TTL can overflow here: local deletion times are not capped at 2038)".into(),
        ));
    }
    // As Cassandra: a snapshot of the tables first, unless --no-snapshot.
    if !o.flag(&["-ns", "--no-snapshot"]) {
        let tag = format!("pre-scrub-{}", now_ms());
        let mut q = vec![format!("tag={tag}")];
        if let Some((ks, tables)) = o.pos.split_first() {
            q.push(format!("kn={}", encode(ks)));
            if !tables.is_empty() {
                q.push(format!("cf={}", encode(&tables.join(","))));
            }
        }
        c.post(&format!("/storage_service/snapshots?{}", q.join("&")))?;
    }
    let skip = o.flag(&["-s", "--skip-corrupted"]);
    let path = keyspace_path(
        "/storage_service/scrub",
        "/storage_service/keyspace_scrub",
        &o.pos,
        if skip { "skip_corrupted=true" } else { "" },
    );
    let Some(t) = run_task(c, &path, "scrub", o.flag(&["--background"]), out)? else {
        return Ok(());
    };
    let null = Value::Null;
    let r = t.get("result").unwrap_or(&null);
    writeln!(
        out,
        "Scrubbed {} SSTables: {} partitions kept, {} unreadable partitions skipped",
        u(r, "sstables_in"),
        u(r, "partitions_kept"),
        u(r, "partitions_skipped"),
    )?;
    if u(r, "sstables_salvaged") > 0 {
        writeln!(
            out,
            "{} out-of-service SSTables were rewritten and are back in service",
            u(r, "sstables_salvaged")
        )?;
    }
    if u(r, "index_blocks_skipped") > 0 {
        writeln!(
            out,
            "{} unreadable index blocks skipped (up to 128 partitions each)",
            u(r, "index_blocks_skipped")
        )?;
    }
    if u(r, "sstables_unreadable") > 0 {
        writeln!(
            out,
            "{} SSTables could not be read (metadata or first index block) and were left as they are",
            u(r, "sstables_unreadable")
        )?;
    }
    Ok(())
}

fn refresh(c: &Client, args: &[String]) -> R {
    let o = Opts::parse("refresh", args, &[], &[])?;
    let [ks, table] = o.pos.as_slice() else {
        return Err(NodetoolError::Usage(
            "refresh requires ks and cf args".into(),
        ));
    };
    c.post(&format!(
        "/storage_service/sstables/{}?cf={}",
        encode(ks),
        encode(table)
    ))?;
    Ok(())
}

/// Cassandra 5.0's samplers that are not implemented here (`-a`).
const OTHER_SAMPLERS: &[&str] = &[
    "CAS_CONTENTIONS",
    "WRITE_SIZE",
    "LOCAL_READ_TIME",
    "READ_ROW_COUNT",
    "READ_TOMBSTONE_COUNT",
    "READ_SSTABLE_COUNT",
];

/// Cassandra 5.0's `toppartitions` (an alias of `profileload` since 4.0): per sampler,
/// `Frequency of <reads|writes> by partition:` and a table of Table, Partition, Count,
/// +/- (the 3.x layout with `READS Sampler:` and a cardinality line is gone in 4.0).
fn toppartitions(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let o = Opts::parse("toppartitions", args, &["-k", "-s", "-a"], &[])?;
    let (ks, table, duration) = match o.pos.as_slice() {
        [ks, table, d] => (*ks, *table, *d),
        _ => {
            return Err(NodetoolError::Usage(
                "toppartitions requires keyspace, column family name, and duration".into(),
            ));
        }
    };
    let num = |name: &str, v: &str| {
        v.parse::<u64>().map_err(|_| {
            NodetoolError::Usage(format!("toppartitions: {name} must be a number, not {v}"))
        })
    };
    let duration = num("duration", duration)?;
    let k = num("-k", o.value(&["-k"]).unwrap_or("10"))?;
    let capacity = num("-s", o.value(&["-s"]).unwrap_or("256"))?;
    if k >= capacity {
        return Err(NodetoolError::Usage(
            "TopK count (-k) option must be smaller then the summary capacity (-s)".into(),
        ));
    }
    let mut samplers = Vec::new();
    for a in o.value(&["-a"]).unwrap_or("READS,WRITES").split(',') {
        let a = a.trim().to_ascii_uppercase();
        if OTHER_SAMPLERS.contains(&a.as_str()) {
            return Err(NodetoolError::Unsupported(format!(
                "the toppartitions sampler {a}"
            )));
        }
        samplers.push(a);
    }
    let r = c.get(&format!(
        "/column_family/toppartitions/{}?duration={duration}&list_size={k}&capacity={capacity}&samplers={}",
        encode(&format!("{ks}:{table}")),
        encode(&samplers.join(","))
    ))?;
    let qualified = format!("{}.{}", s(&r, "keyspace"), s(&r, "table"));
    let mut first = true;
    for (name, key) in [("reads", "reads"), ("writes", "writes")] {
        let Some(v) = r.get(key) else { continue };
        if !first {
            writeln!(out)?;
        }
        first = false;
        writeln!(out, "Frequency of {name} by partition:")?;
        let parts = arr(v.get("partitions").unwrap_or(&Value::Null));
        if parts.is_empty() {
            writeln!(out, "   Nothing recorded during sampling period...")?;
            continue;
        }
        let mut t = TableBuilder::default();
        t.add(["  ", "Table", "Partition", "Count", "+/-"]);
        for p in parts {
            t.add([
                "  ".to_string(),
                qualified.clone(),
                s(p, "partition").to_string(),
                u(p, "count").to_string(),
                u(p, "error").to_string(),
            ]);
        }
        write!(out, "{}", t.render())?;
    }
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

// ---- snapshots ----

fn snapshot(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let mut tag = None;
    let mut table = None;
    let mut kt = None;
    let mut skip_flush = false;
    let mut keyspaces: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| NodetoolError::Usage(format!("{name} needs a value")))
        };
        match a.as_str() {
            "-t" | "--tag" => tag = Some(value(a)?),
            "-cf" | "--column-family" | "--table" => table = Some(value(a)?),
            "-kt" | "--kt-list" | "-kc" | "--kc.list" => kt = Some(value(a)?),
            "-sf" | "--skip-flush" => skip_flush = true,
            "--ttl" => {
                return Err(NodetoolError::Unsupported(
                    "'nodetool snapshot --ttl'".into(),
                ));
            }
            f if f.starts_with('-') => {
                return Err(NodetoolError::Usage(format!(
                    "snapshot: unknown option {f}"
                )));
            }
            ks => keyspaces.push(ks.to_string()),
        }
    }
    if table.is_some() && keyspaces.len() != 1 {
        return Err(NodetoolError::Usage(
            "When specifying the table for a snapshot, you must specify one and only one keyspace"
                .into(),
        ));
    }
    if kt.is_some() && (!keyspaces.is_empty() || table.is_some()) {
        return Err(NodetoolError::Usage(
            "When specifying the Keyspace table list (using -kt,--kt-list), you must not also specify keyspaces to snapshot".into(),
        ));
    }
    let tag = tag.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis().to_string())
            .unwrap_or_else(|_| "0".into())
    });
    let sf = if skip_flush { "&skip_flush=true" } else { "" };
    // (keyspace, tables) requests.
    let mut requests: Vec<(Option<String>, Vec<String>)> = Vec::new();
    if let Some(kt) = &kt {
        for item in kt.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let (k, t) = item.split_once('.').ok_or_else(|| {
                NodetoolError::Usage(format!("expected keyspace.table in -kt, got {item}"))
            })?;
            match requests.iter_mut().find(|(rk, _)| rk.as_deref() == Some(k)) {
                Some((_, ts)) => ts.push(t.to_string()),
                None => requests.push((Some(k.to_string()), vec![t.to_string()])),
            }
        }
    } else if keyspaces.is_empty() {
        requests.push((None, Vec::new()));
    } else if let Some(t) = &table {
        requests.push((keyspaces.first().cloned(), vec![t.clone()]));
    } else {
        requests.push((Some(keyspaces.join(",")), Vec::new()));
    }
    let what = match (&kt, keyspaces.is_empty()) {
        (Some(kt), _) => format!("[{kt}]"),
        (None, true) => "[all keyspaces]".to_string(),
        (None, false) => format!("[{}]", keyspaces.join(", ")),
    };
    writeln!(
        out,
        "Requested creating snapshot(s) for {what} with snapshot name [{tag}] and options {{skipFlush={skip_flush}}}"
    )?;
    for (ks, tables) in requests {
        let mut q = format!("tag={}{sf}", encode(&tag));
        if let Some(ks) = ks {
            q.push_str(&format!("&kn={}", encode(&ks)));
        }
        if !tables.is_empty() {
            q.push_str(&format!("&cf={}", encode(&tables.join(","))));
        }
        c.post(&format!("/storage_service/snapshots?{q}"))?;
    }
    writeln!(out, "Snapshot directory: {tag}")?;
    Ok(())
}

fn listsnapshots(c: &Client, out: &mut dyn Write) -> R {
    let l = c.get("/storage_service/snapshots")?;
    writeln!(out, "Snapshot Details: ")?;
    let l = arr(&l);
    if l.is_empty() {
        writeln!(out, "There are no snapshots")?;
        return Ok(());
    }
    let mut t = TableBuilder::default();
    t.add([
        "Snapshot name",
        "Keyspace name",
        "Column family name",
        "True size",
        "Size on disk",
    ]);
    let mut true_total = 0;
    for x in l {
        true_total += u(x, "true_size_bytes");
        t.add([
            s(x, "tag").to_string(),
            s(x, "keyspace").to_string(),
            s(x, "table").to_string(),
            file_size(u(x, "true_size_bytes") as f64),
            file_size(u(x, "size_bytes") as f64),
        ]);
    }
    write!(out, "{}", t.render())?;
    writeln!(out)?;
    writeln!(
        out,
        "Total TrueDiskSpaceUsed: {}",
        file_size(true_total as f64)
    )?;
    writeln!(out)?;
    Ok(())
}

fn clearsnapshot(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let mut tag = None;
    let mut all = false;
    let mut keyspaces = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-t" | "--tag" => {
                tag = Some(
                    it.next()
                        .cloned()
                        .ok_or_else(|| NodetoolError::Usage("-t needs a value".into()))?,
                )
            }
            "--all" => all = true,
            f if f.starts_with('-') => {
                return Err(NodetoolError::Usage(format!(
                    "clearsnapshot: unknown option {f}"
                )));
            }
            ks => keyspaces.push(ks.to_string()),
        }
    }
    match (&tag, all) {
        (None, false) => {
            return Err(NodetoolError::Usage(
                "Specify snapshot name or --all".into(),
            ));
        }
        (Some(_), true) => {
            return Err(NodetoolError::Usage(
                "Specify only one of snapshot name or --all".into(),
            ));
        }
        _ => {}
    }
    let what = if keyspaces.is_empty() {
        "[all keyspaces]".to_string()
    } else {
        format!("[{}]", keyspaces.join(", "))
    };
    let with = match &tag {
        Some(t) => format!("snapshot name [{t}]"),
        None => "[all snapshots]".to_string(),
    };
    writeln!(out, "Requested clearing snapshot(s) for {what} with {with}")?;
    let mut q = Vec::new();
    if let Some(t) = &tag {
        q.push(format!("tag={}", encode(t)));
    }
    if !keyspaces.is_empty() {
        q.push(format!("kn={}", encode(&keyspaces.join(","))));
    }
    c.delete(&format!("/storage_service/snapshots?{}", q.join("&")))?;
    Ok(())
}

// ---- misc ----

fn getendpoints(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let [ks, t, key] = args else {
        return Err(NodetoolError::Usage(
            "getendpoints requires keyspace, table and partition key arguments".into(),
        ));
    };
    let eps = c.get(&format!(
        "/storage_service/natural_endpoints/{}?cf={}&key={}",
        encode(ks),
        encode(t),
        encode(key)
    ))?;
    for e in arr(&eps) {
        writeln!(out, "{}", e.as_str().unwrap_or(""))?;
    }
    Ok(())
}

/// Cassandra's timeout types.
const TIMEOUT_TYPES: &[&str] = &[
    "read",
    "range",
    "write",
    "counterwrite",
    "cascontention",
    "truncate",
    "internodeconnect",
    "internodeuser",
    "internodestreaminguser",
    "misc",
];

fn timeout_type(args: &[String], n: usize, cmd: &str) -> Result<String, NodetoolError> {
    let usage = || {
        NodetoolError::Usage(format!(
            "{cmd} requires {} (type is one of {})",
            if n == 1 {
                "a timeout type"
            } else {
                "a timeout type and a value in ms"
            },
            TIMEOUT_TYPES.join(", ")
        ))
    };
    if args.len() != n {
        return Err(usage());
    }
    let t = args.first().ok_or_else(usage)?;
    if !TIMEOUT_TYPES.contains(&t.as_str()) {
        return Err(usage());
    }
    Ok(t.clone())
}

fn gettimeout(c: &Client, args: &[String]) -> R {
    let t = timeout_type(args, 1, "gettimeout")?;
    c.get(&format!("/storage_service/timeout/{t}"))?;
    Err(NodetoolError::Failed(
        "unexpected answer to gettimeout".into(),
    ))
}

fn settimeout(c: &Client, args: &[String]) -> R {
    let t = timeout_type(args, 2, "settimeout")?;
    let v = args.get(1).map(String::as_str).unwrap_or("");
    v.parse::<u64>()
        .map_err(|_| NodetoolError::Usage(format!("invalid timeout '{v}' (ms)")))?;
    c.post(&format!("/storage_service/timeout/{t}?value={}", encode(v)))?;
    Ok(())
}

fn version(c: &Client, args: &[String], out: &mut dyn Write) -> R {
    let (flags, _) = split_flags(args);
    reject_flags("version", &flags, &["-v", "--verbose"])?;
    let v = c.get("/storage_service/release_version")?;
    writeln!(out, "ReleaseVersion: {}", v.as_str().unwrap_or(""))?;
    if !flags.is_empty() {
        let a = c.get("/storage_service/amphora_release_version")?;
        writeln!(out, "AmphoraVersion: {}", a.as_str().unwrap_or(""))?;
    }
    Ok(())
}

// ---- log levels ----

fn getlogginglevels(c: &Client, out: &mut dyn Write) -> R {
    let l = c.get("/system/logger")?;
    writeln!(out)?;
    writeln!(out, "{:<50}{:>10}", "Logger Name", "Log Level")?;
    for x in arr(&l) {
        writeln!(out, "{:<50}{:>10}", s(x, "logger"), s(x, "level"))?;
    }
    Ok(())
}

fn setlogginglevel(c: &Client, args: &[String]) -> R {
    match args {
        [] => c.delete("/system/logger").map(drop),
        [target] => c
            .post(&format!("/system/logger/{}", encode(target)))
            .map(drop),
        [target, level] if target == "ROOT" => c
            .post(&format!("/system/logger?level={}", encode(level)))
            .map(drop),
        [target, level] => c
            .post(&format!(
                "/system/logger/{}?level={}",
                encode(target),
                encode(level)
            ))
            .map(drop),
        _ => Err(NodetoolError::Usage(
            "setlogginglevel takes [<component|class>] [<level>]".into(),
        )),
    }
}

fn settraceprobability(c: &Client, args: &[String]) -> R {
    let [value] = args else {
        return Err(NodetoolError::Usage(
            "settraceprobability takes exactly one value between 0 and 1".into(),
        ));
    };
    match value.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => c
            .post(&format!(
                "/storage_service/trace_probability?probability={}",
                encode(value)
            ))
            .map(drop),
        _ => Err(NodetoolError::Usage(
            "Trace probability must be between 0 and 1".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_for_a_command() {
        let mut out = Vec::new();
        help_command("toppartitions", &mut out).expect("help");
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("usage: nodetool toppartitions"), "{text}");
        out.clear();
        help_command("flush", &mut out).expect("help");
        assert!(String::from_utf8_lossy(&out).contains("Flush one or more tables"));
        assert!(help_command("nope", &mut out).is_err());
        // Every synopsis is of a listed command.
        assert!(
            USAGE
                .iter()
                .all(|(c, _)| COMMANDS.iter().any(|(x, _)| x == c))
        );
    }

    #[test]
    fn keyspace_paths() {
        assert_eq!(keyspace_path("/all", "/ks", &[], ""), "/all");
        assert_eq!(
            keyspace_path("/all", "/ks", &["k1", "t1", "t2"], "split_output=true"),
            "/ks/k1?cf=t1%2Ct2&split_output=true"
        );
    }
}
