//! Result files: the JSON summary for the benchmark harness (`-log json=`), the HdrHistogram
//! interval log (`-log hdrfile=`) and the self-contained HTML report (`-graph file=`).
//!
//! The HTML report is inline SVG drawn here, with no script and no network. Like
//! cassandra-stress's `-graph`, each run is appended to the file: the runs' data live in a
//! `<script type="application/json">` block that the next run reads back, and every chart
//! draws all runs, one series per run (named by `revision=` or the command).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use serde::{Deserialize, Serialize};

use crate::error::StressError;
use crate::metrics::{Figures, IntervalReport, Latency};

/// The JSON result of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub tool: &'static str,
    pub version: &'static str,
    pub command: String,
    pub args: Vec<String>,
    pub start_unix_ms: u128,
    pub elapsed_s: f64,
    pub threads: usize,
    pub rate: String,
    pub consistency: String,
    pub total: Figures,
    pub ops: Vec<OpSummary>,
    pub intervals: Vec<IntervalReport>,
    pub aborted: Option<String>,
    /// Fixed rate: the client's own start lag (intended start to hand-off to the driver).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_start_lag_ms: Option<Latency>,
    /// `-rate auto`: every thread count tried (the rest of the file is the fastest step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_steps: Option<Vec<AutoStep>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AutoStep {
    pub threads: usize,
    #[serde(flatten)]
    pub total: Figures,
}

#[derive(Debug, Clone, Serialize)]
pub struct OpSummary {
    pub name: String,
    #[serde(flatten)]
    pub figures: Figures,
}

pub fn write_json(path: &Path, summary: &RunSummary) -> Result<(), StressError> {
    let io = |source| StressError::Io {
        what: "writing JSON results",
        path: path.to_path_buf(),
        source,
    };
    let text = serde_json::to_string_pretty(summary).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(path, text + "\n").map_err(io)
}

/// Writes an HdrHistogram interval log on its own thread (the log writer borrows its file).
/// (tag, start offset, length, histogram) of one interval.
type HdrInterval = (String, Duration, Duration, Histogram<u64>);

pub struct HdrLog {
    tx: Option<mpsc::Sender<HdrInterval>>,
    handle: Option<JoinHandle<Result<(), String>>>,
    path: PathBuf,
}

impl HdrLog {
    pub fn create(path: &Path, start: SystemTime) -> Result<Self, StressError> {
        let file = std::fs::File::create(path).map_err(|source| StressError::Io {
            what: "creating HDR log",
            path: path.to_path_buf(),
            source,
        })?;
        let (tx, rx) = mpsc::channel::<HdrInterval>();
        let handle = std::thread::spawn(move || -> Result<(), String> {
            let mut file = std::io::BufWriter::new(file);
            let mut serializer = V2DeflateSerializer::new();
            let mut writer = IntervalLogWriterBuilder::new()
                .add_comment(
                    "Logging op latencies for Amphora stress (values in microseconds, max in ms)",
                )
                .with_start_time(start)
                .with_base_time(start)
                .with_max_value_divisor(1000.0)
                .begin_log_with(&mut file, &mut serializer)
                .map_err(|e| e.to_string())?;
            for (tag, offset, length, hist) in rx {
                writer
                    .write_histogram(&hist, offset, length, Tag::new(&tag))
                    .map_err(|e| format!("{e:?}"))?;
            }
            drop(writer);
            file.flush().map_err(|e| e.to_string())
        });
        Ok(Self {
            tx: Some(tx),
            handle: Some(handle),
            path: path.to_path_buf(),
        })
    }

    /// Logs one interval histogram; the tag is cassandra-stress's `<OP>-rt` (response time).
    pub fn record(&self, op: &str, offset: Duration, length: Duration, hist: &Histogram<u64>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send((format!("{op}-rt"), offset, length, hist.clone()));
        }
    }

    pub fn finish(mut self) -> Result<(), StressError> {
        drop(self.tx.take());
        let err = |reason: String| StressError::Io {
            what: "writing HDR log",
            path: self.path.clone(),
            source: std::io::Error::other(reason),
        };
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(Ok(()))) | None => Ok(()),
            Some(Ok(Err(e))) => Err(err(e)),
            Some(Err(_)) => Err(err("HDR log thread panicked".into())),
        }
    }
}

/// One run in the HTML report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GraphRun {
    pub revision: String,
    pub title: String,
    pub command: String,
    pub date: String,
    /// Interval points: time (s), op/s, mean, p50, p95, p99, p99.9, max (ms), errors.
    pub points: Vec<[f64; 9]>,
    pub summary: Vec<(String, String)>,
}

const DATA_START: &str = "<script type=\"application/json\" id=\"amphora-stress-data\">";
const DATA_END: &str = "</script>";

pub fn graph_run(
    revision: String,
    title: String,
    command: String,
    intervals: &[IntervalReport],
    total: &Figures,
) -> GraphRun {
    // A last interval much shorter than the others plots a meaningless rate: leave it out.
    let full = intervals.iter().map(|i| i.length_s).fold(0.0f64, f64::max);
    let points = intervals
        .iter()
        .filter(|i| intervals.len() == 1 || i.length_s >= full / 2.0)
        .map(|i| {
            let l = &i.total.latency_ms;
            [
                i.time_s,
                i.total.op_rate,
                l.mean,
                l.p50,
                l.p95,
                l.p99,
                l.p999,
                l.max,
                i.total.errors as f64,
            ]
        })
        .collect();
    let l = &total.latency_ms;
    let summary = vec![
        ("Op rate".into(), format!("{:.0} op/s", total.op_rate)),
        (
            "Partition rate".into(),
            format!("{:.0} pk/s", total.partition_rate),
        ),
        ("Row rate".into(), format!("{:.0} row/s", total.row_rate)),
        ("Latency mean".into(), format!("{:.2} ms", l.mean)),
        ("Latency median".into(), format!("{:.2} ms", l.p50)),
        ("Latency 95th percentile".into(), format!("{:.2} ms", l.p95)),
        ("Latency 99th percentile".into(), format!("{:.2} ms", l.p99)),
        (
            "Latency 99.9th percentile".into(),
            format!("{:.2} ms", l.p999),
        ),
        ("Latency max".into(), format!("{:.2} ms", l.max)),
        ("Total operations".into(), total.ops.to_string()),
        ("Total errors".into(), total.errors.to_string()),
    ];
    GraphRun {
        revision,
        title,
        command,
        date: format!(
            "{}",
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        ),
        points,
        summary,
    }
}

/// Appends `run` to the report at `path` (creating it) and rewrites the HTML.
pub fn write_graph(path: &Path, title: &str, run: GraphRun) -> Result<(), StressError> {
    let io = |source| StressError::Io {
        what: "writing graph",
        path: path.to_path_buf(),
        source,
    };
    let mut runs: Vec<GraphRun> = match std::fs::read_to_string(path) {
        Ok(old) => read_runs(&old),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io(e)),
    };
    runs.push(run);
    std::fs::write(path, render_html(title, &runs)).map_err(io)
}

fn read_runs(html: &str) -> Vec<GraphRun> {
    let Some(start) = html.find(DATA_START) else {
        return Vec::new();
    };
    let rest = &html[start + DATA_START.len()..];
    let Some(end) = rest.find(DATA_END) else {
        return Vec::new();
    };
    serde_json::from_str(&rest[..end].replace("<\\/", "</")).unwrap_or_default()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One line chart: `series` of (label, colour, points (x, y)).
/// (label, colour, points) of one line.
type Series<'a> = (String, &'a str, Vec<(f64, f64)>);

fn chart(title: &str, y_label: &str, series: &[Series<'_>]) -> String {
    let (w, h, left, right, top, bottom) = (820.0, 300.0, 70.0, 190.0, 30.0, 40.0);
    let x_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.05;
    let px = |x: f64| left + (x / x_max) * (w - left - right);
    let py = |y: f64| h - bottom - (y / y_max) * (h - top - bottom);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        left,
        esc(title)
    );
    for i in 0..=5 {
        let y = y_max * i as f64 / 5.0;
        let _ = write!(
            s,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - right,
            left - 6.0,
            py(y) + 4.0,
            fmt_num(y),
            py = py(y)
        );
        let x = x_max * i as f64 / 5.0;
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(x),
            h - bottom + 16.0,
            fmt_num(x)
        );
    }
    let _ = write!(
        s,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">time (s)</text><text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">{}</text>",
        (left + w - right) / 2.0,
        h - 6.0,
        h / 2.0,
        h / 2.0,
        esc(y_label)
    );
    let _ = write!(
        s,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>",
        w - left - right,
        h - top - bottom
    );
    for (i, (label, colour, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        if !path.is_empty() {
            let _ = write!(
                s,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\" points=\"{}\"><title>{}</title></polyline>",
                path.join(" "),
                esc(label)
            );
        }
        let ly = top + 14.0 * i as f64 + 8.0;
        let _ = write!(
            s,
            "<line x1=\"{}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{}</text>",
            w - right + 8.0,
            w - right + 26.0,
            w - right + 30.0,
            ly + 4.0,
            esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub fn render_html(title: &str, runs: &[GraphRun]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:sans-serif;margin:20px;color:#222}}table{{border-collapse:collapse;margin:8px 0 20px}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f4f4f4}}td:first-child,th:first-child{{text-align:left}}code{{background:#f4f4f4;padding:2px}}</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(title)
    );
    let label = |i: usize, r: &GraphRun| format!("{} ({})", r.revision, i + 1);
    let colour = |i: usize| COLOURS[i % COLOURS.len()];
    let ops: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (
                label(i, r),
                colour(i),
                r.points.iter().map(|p| (p[0], p[1])).collect(),
            )
        })
        .collect();
    h += &chart("Throughput", "op/s", &ops);
    h += "\n";
    let metrics = [
        (2, "Latency mean"),
        (3, "Latency median"),
        (4, "Latency 95th percentile"),
        (5, "Latency 99th percentile"),
        (6, "Latency 99.9th percentile"),
        (7, "Latency max"),
    ];
    for (idx, name) in metrics {
        let series: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    label(i, r),
                    colour(i),
                    r.points.iter().map(|p| (p[0], p[idx])).collect(),
                )
            })
            .collect();
        h += &chart(name, "ms", &series);
        h += "\n";
    }
    // Percentiles of the latest run together.
    if let Some(last) = runs.last() {
        let names = ["mean", "p50", "p95", "p99", "p99.9", "max"];
        let series: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(j, n)| {
                (
                    n.to_string(),
                    COLOURS[j % COLOURS.len()],
                    last.points.iter().map(|p| (p[0], p[j + 2])).collect(),
                )
            })
            .collect();
        h += &chart(
            &format!("Latency percentiles, {}", last.revision),
            "ms",
            &series,
        );
        h += "\n";
    }
    h += "<h2>Runs</h2>\n<table><tr><th>run</th><th>title</th><th>command</th>";
    if let Some(first) = runs.first() {
        for (k, _) in &first.summary {
            let _ = write!(h, "<th>{}</th>", esc(k));
        }
    }
    h += "</tr>\n";
    for (i, r) in runs.iter().enumerate() {
        let _ = write!(
            h,
            "<tr><td style=\"color:{}\">{}</td><td>{}</td><td><code>{}</code></td>",
            colour(i),
            esc(&label(i, r)),
            esc(&r.title),
            esc(&r.command)
        );
        for (_, v) in &r.summary {
            let _ = write!(h, "<td>{}</td>", esc(v));
        }
        h += "</tr>\n";
    }
    h += "</table>\n";
    let data = serde_json::to_string(runs).unwrap_or_else(|_| "[]".into());
    let _ = write!(
        h,
        "{DATA_START}{}{DATA_END}\n</body></html>\n",
        data.replace("</", "<\\/")
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rev: &str) -> GraphRun {
        GraphRun {
            revision: rev.into(),
            title: "t <1>".into(),
            command: "WRITE".into(),
            date: "0".into(),
            points: vec![
                [1.0, 100.0, 1.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0],
                [2.0, 120.0, 1.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0],
            ],
            summary: vec![("Op rate".into(), "110 op/s".into())],
        }
    }

    #[test]
    fn html_is_self_contained_and_appends_runs() {
        let dir = std::env::temp_dir().join(format!("amphora-graph-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("g.html");
        let _ = std::fs::remove_file(&path);
        write_graph(&path, "bench", run("amphora")).unwrap();
        write_graph(&path, "bench", run("cassandra</script>")).unwrap();
        let html = std::fs::read_to_string(&path).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("<script src"));
        assert!(!html.contains("<link"));
        assert_eq!(html.matches("<svg").count(), 8);
        assert!(html.contains("t &lt;1&gt;"));
        let runs = read_runs(&html);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].revision, "cassandra</script>");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hdr_log_round_trips() {
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        let dir = std::env::temp_dir().join(format!("amphora-hdr-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("a.hdr");
        let log = HdrLog::create(&path, SystemTime::now()).unwrap();
        let mut h = crate::metrics::new_histogram();
        h.record(1500).unwrap();
        log.record("WRITE", Duration::ZERO, Duration::from_secs(1), &h);
        log.record("WRITE", Duration::from_secs(1), Duration::from_secs(1), &h);
        log.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let hists: Vec<_> = IntervalLogIterator::new(&bytes)
            .filter_map(|e| match e {
                Ok(LogEntry::Interval(i)) => Some(i.tag().map(|t| t.as_str().to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(
            hists,
            vec![Some("WRITE-rt".to_string()), Some("WRITE-rt".to_string())]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
