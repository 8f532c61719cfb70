//! `amphora stress`: a cassandra-stress-compatible load generator.
//!
//! Owns: cassandra-stress's command line ([`settings`]), its distributions ([`distribution`]),
//! key and value generation ([`generate`]), user profiles ([`profile`]), the load engine with
//! fixed-rate scheduling that corrects coordinated omission ([`runner`]), HdrHistogram
//! latencies and cassandra-stress's progress and summary output ([`metrics`]), and the result
//! files: JSON, HDR interval log and the offline HTML report ([`report`]).
//!
//! It is a client: it talks to any CQL server (Amphora, Apache Cassandra, ScyllaDB) through the
//! shard-aware `scylla` driver ([`workload`]) and must never depend on Amphora's server crates,
//! so that its numbers mean the same thing against every server.
//!
//! Key types: [`settings::Settings`], [`runner::Workload`], [`runner::RunConfig`],
//! [`metrics::OpStats`]. Entry point: [`run`]. Usage: `docs/dev/stress.md`.

pub mod distribution;
pub mod error;
pub mod generate;
pub mod metrics;
pub mod pipeline;
pub mod profile;
pub mod report;
pub mod runner;
pub mod settings;
pub mod workload;

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;

pub use error::StressError;
use metrics::{Figures, format_row, format_summary, rate_stderr};
use report::{AutoStep, GraphRun, HdrLog, OpSummary, RunSummary};
use runner::{RunConfig, RunResult, Workload};
use settings::{Command, OpKind, RateMode, Settings};

/// Default interval between progress lines.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// cassandra-stress's warm-up: at most 50,000 operations on at most 100 threads.
pub const WARMUP_OPS_MAX: u64 = 50_000;
pub const WARMUP_THREADS_MAX: usize = 100;
/// Request timeout (cassandra-stress uses the Java driver's 12 s default): the driver's for
/// schema statements, the runner's watchdog for operations.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(12);

/// Runs `amphora stress ARGS...` (cassandra-stress's command line) to completion.
pub fn run(args: Vec<String>) -> anyhow::Result<()> {
    if args.is_empty() || matches!(args[0].as_str(), "help" | "-h" | "--help" | "-?") {
        print!("{}", settings::USAGE);
        return Ok(());
    }
    let settings = match settings::parse(&args) {
        Ok(s) => s,
        Err(e) => {
            eprint!("{}", settings::USAGE);
            eprintln!();
            return Err(e.into());
        }
    };
    // On one CPU (make bench pins the client to one) a current-thread runtime: with a single
    // worker the multi-thread scheduler left ~10% of the core idle at saturation and the
    // current-thread one ran ~25% more reads per second (docs/benchmarks.md, session 29).
    let one_cpu = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let rt = if one_cpu {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()
    .context("starting the tokio runtime")?;
    rt.block_on(run_async(settings, args))
}

/// Prints to stdout and, with `-log file=`, to the log file.
struct Output {
    file: Option<std::io::BufWriter<std::fs::File>>,
}

impl Output {
    fn line(&mut self, s: &str) {
        println!("{s}");
        if let Some(f) = &mut self.file {
            let _ = writeln!(f, "{s}");
        }
    }

    fn flush(&mut self) {
        let _ = std::io::stdout().flush();
        if let Some(f) = &mut self.file {
            let _ = f.flush();
        }
    }
}

/// The lean connection of [`pipeline`] for the predefined commands against one node, unless
/// `-mode driver`; `None` (the driver then carries every request) when it can not be opened.
async fn pipelined_connection(
    settings: &Settings,
    session: &Session,
    out: &mut Output,
) -> Option<pipeline::Pipeline> {
    if settings.driver_only {
        return None;
    }
    // A cluster behind the one `-node`: the driver spreads the requests over its nodes by
    // token; one connection would make that node coordinate them all.
    let nodes = session.get_cluster_state().get_nodes_info().len();
    if nodes > 1 {
        out.line(&format!(
            "Requests: through the driver ({nodes} nodes in the cluster)"
        ));
        return None;
    }
    let [node] = node_addresses(settings).try_into().ok()?;
    match pipeline::Pipeline::connect(&node, settings.send_interval).await {
        Ok(p) => {
            let every = match settings.send_interval {
                d if d.is_zero() => "every event-loop turn".to_string(),
                d => format!("at most every {} µs", d.as_micros()),
            };
            out.line(&format!(
                "Requests: one pipelined connection to {node}, sends {every} (-mode driver: the driver)"
            ));
            Some(p)
        }
        Err(e) => {
            out.line(&format!(
                "WARN: no pipelined connection ({e}); requests go through the driver"
            ));
            None
        }
    }
}

/// `host:port` of every `-node`.
fn node_addresses(settings: &Settings) -> Vec<String> {
    settings
        .nodes
        .iter()
        .map(|h| {
            if h.contains(':') && !h.starts_with('[') && h.matches(':').count() == 1 {
                h.clone()
            } else if h.contains(':') && !h.starts_with('[') {
                format!("[{h}]:{}", settings.port)
            } else {
                format!("{h}:{}", settings.port)
            }
        })
        .collect()
}

async fn connect(settings: &Settings) -> Result<Session, StressError> {
    let profile = ExecutionProfile::builder()
        .consistency(workload::driver_consistency(settings.consistency))
        .request_timeout(Some(REQUEST_TIMEOUT))
        .build();
    let nodes = node_addresses(settings);
    SessionBuilder::new()
        .known_nodes(&nodes)
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await
        .map_err(|e| StressError::Connect {
            nodes: nodes.join(","),
            reason: e.to_string(),
        })
}

fn print_settings(out: &mut Output, s: &Settings, args: &[String]) {
    out.line("******************** Stress Settings ********************");
    out.line(&format!("Command: {}", s.describe_command()));
    out.line(&format!("  Arguments: {}", args.join(" ")));
    match (s.count, s.duration) {
        (Some(n), _) => out.line(&format!("  Count: {n}")),
        (_, Some(d)) => out.line(&format!("  Duration: {} SECONDS", d.as_secs())),
        _ => out.line("  Duration: until converged (not supported: runs 1,000,000 ops)"),
    }
    out.line(&format!("  Consistency Level: {}", s.consistency));
    out.line(&format!("  No Warmup: {}", s.no_warmup));
    out.line(&format!(
        "Population: {}{}",
        s.population,
        if s.contents_sorted {
            " contents=SORTED"
        } else {
            ""
        }
    ));
    match s.rate.auto {
        Some(a) => out.line(&format!(
            "Rate: auto threads>={} threads<={} {}",
            a.min,
            a.max,
            describe_rate(s.rate.mode)
        )),
        None => out.line(&format!(
            "Rate: threads={} {}",
            s.rate.threads,
            describe_rate(s.rate.mode)
        )),
    }
    out.line(&format!(
        "Columns: {} size={} n={}",
        s.columns.names.join(","),
        s.columns.size,
        s.columns.count
    ));
    out.line(&format!(
        "Schema: keyspace={} replication={} {:?} compaction={:?}",
        s.schema.keyspace,
        s.schema.replication_strategy,
        s.schema.replication_options,
        s.schema.compaction
    ));
    out.line(&format!("Node: {:?} native port {}", s.nodes, s.port));
    out.line(&format!(
        "Errors: ignore={} tries={}",
        s.ignore_errors, s.tries
    ));
    if !s.accepted.is_empty() {
        out.line(&format!("Accepted, no effect: {}", s.accepted.join(" ")));
    }
    out.line("");
}

fn describe_rate(r: RateMode) -> String {
    match r {
        RateMode::Unlimited => "unlimited".into(),
        RateMode::Throttle(r) => format!("throttle={r:.0}/s"),
        RateMode::Fixed(r) => format!("fixed={r:.0}/s"),
    }
}

async fn run_async(settings: Settings, args: Vec<String>) -> anyhow::Result<()> {
    let mut out = Output {
        file: match &settings.log.file {
            Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(
                |source| StressError::Io {
                    what: "creating log file",
                    path: p.clone(),
                    source,
                },
            )?)),
            None => None,
        },
    };
    if !settings.log.no_settings {
        print_settings(&mut out, &settings, &args);
    }
    let session = Arc::new(connect(&settings).await?);
    out.line(&format!(
        "Connected to cluster: {}",
        settings
            .nodes
            .iter()
            .map(|h| format!("{h}:{}", settings.port))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let pipe = match &settings.command {
        Command::Single(_) | Command::Mixed(_) => {
            pipelined_connection(&settings, &session, &mut out).await
        }
        Command::User { .. } => None,
    };
    let mut log_line = |s: &str| out.line(s);
    match &settings.command {
        Command::Single(k) => {
            let ops = vec![*k];
            let w =
                workload::Predefined::setup(session, pipe, &settings, ops.clone(), &mut log_line)
                    .await?;
            let names: Vec<String> = ops.iter().map(|k| k.name().to_string()).collect();
            drive(Arc::new(w), &names, vec![1.0], &settings, &args, &mut out).await
        }
        Command::Mixed(ratio) => {
            let ops: Vec<OpKind> = ratio.iter().map(|(k, _)| *k).collect();
            let weights: Vec<f64> = ratio.iter().map(|(_, w)| *w).collect();
            let w =
                workload::Predefined::setup(session, pipe, &settings, ops.clone(), &mut log_line)
                    .await?;
            let names: Vec<String> = ops.iter().map(|k| k.name().to_string()).collect();
            drive(Arc::new(w), &names, weights, &settings, &args, &mut out).await
        }
        Command::User { profile, ops } => {
            let p = profile::load(profile)?;
            let names: Vec<String> = ops.iter().map(|(n, _)| n.clone()).collect();
            let weights: Vec<f64> = ops.iter().map(|(_, w)| *w).collect();
            let w = workload::User::setup(session, &settings, &p, &names, &mut log_line).await?;
            drive(Arc::new(w), &names, weights, &settings, &args, &mut out).await
        }
    }
}

async fn drive<W: Workload>(
    w: Arc<W>,
    names: &[String],
    weights: Vec<f64>,
    settings: &Settings,
    args: &[String],
    out: &mut Output,
) -> anyhow::Result<()> {
    let op_desc = names.join(", ");
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    if !settings.no_warmup {
        let n = match settings.count {
            Some(n) => (n / 4).min(WARMUP_OPS_MAX),
            None => WARMUP_OPS_MAX,
        };
        if n > 0 {
            out.line(&format!("Warming up {op_desc} with {n} iterations..."));
            out.flush();
            let cfg = RunConfig {
                threads: settings.rate.threads.min(WARMUP_THREADS_MAX),
                rate: RateMode::Unlimited,
                count: Some(n),
                duration: None,
                tries: settings.tries,
                ignore_errors: true,
                interval: Duration::from_secs(3600),
                weights: weights.clone(),
                seed: seed ^ 0x5eed,
                precise_pacing: true,
                op_timeout: Some(REQUEST_TIMEOUT),
            };
            let r = runner::run(w.clone(), names, &cfg, |_| {}).await;
            let t = r.total();
            if t.errors > 0 {
                out.line(&format!(
                    "Warm-up: {} errors in {} operations",
                    t.errors,
                    t.ops + t.errors
                ));
            }
        }
    }
    match settings.rate.auto {
        None => {
            let m = measured(
                &w,
                names,
                &weights,
                settings,
                out,
                settings.rate.threads,
                seed,
            )
            .await?;
            finish(m, names, settings, args, out, &op_desc, None)
        }
        Some(auto) => {
            let mut steps: Vec<Measured> = Vec::new();
            let mut rates: Vec<f64> = Vec::new();
            let mut threads = auto.min;
            loop {
                out.line(&format!("Running with {threads} threadCount"));
                let m = measured(&w, names, &weights, settings, out, threads, seed).await?;
                let rate = m.total_fig.op_rate;
                if let Some(prev) = steps.last() {
                    out.line(&format!(
                        "Improvement over {} threadCount: {:.0}%",
                        prev.threads,
                        100.0 * (rate / prev.total_fig.op_rate.max(1e-9) - 1.0)
                    ));
                }
                print_summary(&m, names, settings, out);
                let failed = m.result.aborted.is_some();
                rates.push(rate);
                steps.push(m);
                if failed || !auto_keeps_going(&rates) {
                    break;
                }
                match auto.next(threads) {
                    Some(n) => threads = n,
                    None => break,
                }
            }
            out.line("");
            out.line("             id, type       total ops,    op/s,    mean,     med,     .95,     .99,    .999,     max");
            for m in &steps {
                let f = &m.total_fig;
                let l = &f.latency_ms;
                out.line(&format!(
                    "{:>4} threadCount, total, {:>10}, {:>7.0}, {:>7.1}, {:>7.1}, {:>7.1}, {:>7.1}, {:>7.1}, {:>7.1}",
                    m.threads, f.ops, f.op_rate, l.mean, l.p50, l.p95, l.p99, l.p999, l.max
                ));
            }
            let auto_steps: Vec<AutoStep> = steps
                .iter()
                .map(|m| AutoStep {
                    threads: m.threads,
                    total: m.total_fig.clone(),
                })
                .collect();
            // The report files describe the step with the highest throughput.
            let best = steps
                .into_iter()
                .max_by(|a, b| a.total_fig.op_rate.total_cmp(&b.total_fig.op_rate))
                .ok_or_else(|| anyhow::anyhow!("auto thread search ran no step"))?;
            finish(best, names, settings, args, out, &op_desc, Some(auto_steps))
        }
    }
}

/// cassandra-stress's stop rule for `-rate auto`: go on while the last three steps improved
/// throughput on average and the last five by more than 2% on average.
fn auto_keeps_going(rates: &[f64]) -> bool {
    fn avg_improvement(rates: &[f64], count: usize) -> Option<f64> {
        if rates.len() <= count {
            return None;
        }
        let tail = &rates[rates.len() - count - 1..];
        let sum: f64 = tail.windows(2).map(|w| w[1] / w[0].max(1e-9) - 1.0).sum();
        Some(sum / count as f64)
    }
    avg_improvement(rates, 3).is_none_or(|i| i > 0.0)
        && avg_improvement(rates, 5).is_none_or(|i| i > 0.02)
}

/// One measured run (after the warm-up) and what its reports need.
struct Measured {
    threads: usize,
    result: RunResult,
    total_fig: Figures,
    per_op: Vec<(String, Figures)>,
    start_wall: SystemTime,
}

async fn measured<W: Workload>(
    w: &Arc<W>,
    names: &[String],
    weights: &[f64],
    settings: &Settings,
    out: &mut Output,
    threads: usize,
    seed: u64,
) -> anyhow::Result<Measured> {
    let op_desc = names.join(", ");
    let count = match (settings.count, settings.duration) {
        (None, None) => Some(1_000_000),
        (c, _) => c,
    };
    let mut desc = format!("Running {op_desc} with {threads} threads ");
    match (count, settings.duration) {
        (_, Some(d)) => desc += &format!("for {} seconds", d.as_secs()),
        (Some(n), _) => desc += &format!("for {n} iteration"),
        _ => {}
    }
    if settings.rate.mode != RateMode::Unlimited {
        desc += &format!(" ({})", describe_rate(settings.rate.mode));
    }
    out.line(&desc);
    let cfg = RunConfig {
        threads,
        rate: settings.rate.mode,
        count,
        duration: settings.duration,
        tries: settings.tries,
        ignore_errors: settings.ignore_errors,
        interval: settings.log.interval.unwrap_or(REPORT_INTERVAL),
        weights: weights.to_vec(),
        seed,
        precise_pacing: true,
        op_timeout: Some(REQUEST_TIMEOUT),
    };
    let start_wall = SystemTime::now();
    let hdr = match &settings.log.hdrfile {
        Some(p) => Some(HdrLog::create(p, start_wall)?),
        None => None,
    };
    let width = metrics::type_width(names);
    out.line(&metrics::header(width));
    out.flush();
    let progress = count.filter(|_| settings.duration.is_none());
    let tty = std::io::stderr().is_terminal();
    let multi = names.len() > 1;
    let result: RunResult = runner::run(w.clone(), names, &cfg, |ev| {
        let stderr = rate_stderr(ev.rates);
        if multi {
            let per_op = ev.report.per_op.iter().zip(ev.stats).zip(ev.op_totals);
            for (((name, f), s), done) in per_op {
                if s.ops + s.errors > 0 {
                    out.line(&format_row(
                        width,
                        name,
                        *done,
                        f,
                        ev.report.time_s,
                        stderr,
                        f.errors,
                    ));
                }
            }
        }
        out.line(&format_row(
            width,
            "total",
            ev.total_ops,
            &ev.report.total,
            ev.report.time_s,
            stderr,
            ev.report.total.errors,
        ));
        out.flush();
        if let Some(h) = &hdr {
            for (name, s) in names.iter().zip(ev.stats) {
                if s.ops > 0 {
                    h.record(name, ev.start_offset, ev.length, &s.hist);
                }
            }
        }
        if let Some(n) = progress {
            let done = ev.total_ops.min(n);
            let pct = done as f64 * 100.0 / n.max(1) as f64;
            let rate = ev.report.total.op_rate.max(1.0);
            let eta = (n - done) as f64 / rate;
            let width = 30usize;
            let filled = ((pct / 100.0) * width as f64) as usize;
            let bar = format!(
                "[{}{}] {pct:5.1}% {done}/{n} ops, eta {:.0}s",
                "#".repeat(filled),
                " ".repeat(width - filled),
                eta
            );
            if tty {
                eprint!("\r{bar}");
            } else {
                eprintln!("progress: {bar}");
            }
        }
    })
    .await;
    if tty && progress.is_some() {
        eprintln!();
    }
    if let Some(h) = hdr {
        h.finish()?;
    }
    let total = result.total();
    let total_fig = Figures::of(&total, result.elapsed);
    let per_op: Vec<(String, Figures)> = names
        .iter()
        .zip(&result.totals)
        .map(|(n, s)| (n.clone(), Figures::of(s, result.elapsed)))
        .collect();
    Ok(Measured {
        threads,
        result,
        total_fig,
        per_op,
        start_wall,
    })
}

fn print_summary(m: &Measured, _names: &[String], settings: &Settings, out: &mut Output) {
    if !settings.log.no_summary {
        for l in format_summary(&m.total_fig, &m.per_op, m.result.elapsed).lines() {
            out.line(l);
        }
    }
}

/// The summary (for a single run), the END line, and the JSON / graph files.
fn finish(
    m: Measured,
    names: &[String],
    settings: &Settings,
    args: &[String],
    out: &mut Output,
    op_desc: &str,
    auto: Option<Vec<AutoStep>>,
) -> anyhow::Result<()> {
    if auto.is_none() {
        print_summary(&m, names, settings, out);
        if let Some(h) = &m.result.start_lag {
            let l = metrics::latency_of(h);
            out.line(&format!(
                "Client start lag          : median {:.2} ms, .99 {:.2} ms, .999 {:.2} ms, max {:.2} ms (fixed rate: intended start to the driver; part of every latency above)",
                l.p50, l.p99, l.p999, l.max
            ));
        }
    }
    let Measured {
        threads,
        result,
        total_fig,
        per_op,
        start_wall,
    } = m;
    if let Some(e) = &result.aborted {
        out.line(&format!(
            "FAILURE: an operation failed after {} tries: {e}",
            settings.tries
        ));
    }
    out.line("");
    out.line("END");
    out.flush();
    if let Some(p) = &settings.log.json {
        let summary = RunSummary {
            tool: "amphora-stress",
            version: env!("CARGO_PKG_VERSION"),
            command: settings.describe_command(),
            args: args.to_vec(),
            start_unix_ms: start_wall
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            elapsed_s: result.elapsed.as_secs_f64(),
            threads,
            rate: describe_rate(settings.rate.mode),
            consistency: settings.consistency.to_string(),
            total: total_fig.clone(),
            ops: per_op
                .iter()
                .map(|(n, f)| OpSummary {
                    name: n.clone(),
                    figures: f.clone(),
                })
                .collect(),
            intervals: result.intervals.clone(),
            aborted: result.aborted.clone(),
            client_start_lag_ms: result.start_lag.as_ref().map(metrics::latency_of),
            auto_steps: auto,
        };
        report::write_json(p, &summary)?;
    }
    if let Some(g) = &settings.graph {
        let title = g
            .title
            .clone()
            .unwrap_or_else(|| format!("amphora stress - {}", settings.describe_command()));
        let revision = g
            .revision
            .clone()
            .unwrap_or_else(|| settings.describe_command());
        let run: GraphRun = report::graph_run(
            revision,
            title.clone(),
            args.join(" "),
            &result.intervals,
            &total_fig,
        );
        report::write_graph(&g.file, &title, run)?;
    }
    if let Some(e) = result.aborted {
        return Err(StressError::OperationFailed {
            op: op_desc.to_string(),
            tries: settings.tries,
            reason: e,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::auto_keeps_going;

    #[test]
    fn auto_search_stops_when_throughput_stops_improving() {
        // Fewer than four steps: always go on.
        assert!(auto_keeps_going(&[100.0, 90.0, 80.0]));
        // Still climbing.
        assert!(auto_keeps_going(&[100.0, 200.0, 300.0, 350.0]));
        // The last three steps lost throughput on average.
        assert!(!auto_keeps_going(&[100.0, 200.0, 150.0, 140.0, 130.0]));
        // Five steps whose average gain is 1%: flat enough to stop.
        assert!(!auto_keeps_going(&[
            100.0, 101.0, 102.0, 103.0, 104.0, 105.0
        ]));
        // Five steps with a 10% average gain: go on.
        assert!(auto_keeps_going(&[
            100.0, 110.0, 121.0, 133.0, 146.0, 161.0
        ]));
    }
}
