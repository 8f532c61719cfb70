//! Latency histograms per operation type, the one-second intervals cassandra-stress prints,
//! and the final summary.
//!
//! Latencies are recorded in microseconds in HdrHistogram (1 µs .. 1 h, 3 significant digits)
//! and printed in milliseconds.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest trackable latency: one hour, in microseconds.
pub const LATENCY_MAX_US: u64 = 3_600_000_000;

pub fn new_histogram() -> Histogram<u64> {
    // Bounds are constants that hdrhistogram accepts; failure would be a programming error.
    Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("valid histogram bounds")
}

/// Counters and latencies of one operation type over some span of time.
#[derive(Debug, Clone)]
pub struct OpStats {
    pub hist: Histogram<u64>,
    pub ops: u64,
    pub partitions: u64,
    pub rows: u64,
    pub errors: u64,
}

impl Default for OpStats {
    fn default() -> Self {
        Self {
            hist: new_histogram(),
            ops: 0,
            partitions: 0,
            rows: 0,
            errors: 0,
        }
    }
}

impl OpStats {
    pub fn record(&mut self, latency: Duration, partitions: u64, rows: u64) {
        let us = (latency.as_micros() as u64).clamp(1, LATENCY_MAX_US);
        self.hist.saturating_record(us);
        self.ops += 1;
        self.partitions += partitions;
        self.rows += rows;
    }

    pub fn add(&mut self, other: &OpStats) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.ops += other.ops;
        self.partitions += other.partitions;
        self.rows += other.rows;
        self.errors += other.errors;
    }

    pub fn latency(&self) -> Latency {
        latency_of(&self.hist)
    }
}

/// The summary (ms) of a histogram of microseconds.
pub fn latency_of(hist: &Histogram<u64>) -> Latency {
    let ms = |us: u64| us as f64 / 1000.0;
    if hist.is_empty() {
        return Latency::default();
    }
    Latency {
        mean: hist.mean() / 1000.0,
        p50: ms(hist.value_at_quantile(0.50)),
        p90: ms(hist.value_at_quantile(0.90)),
        p95: ms(hist.value_at_quantile(0.95)),
        p99: ms(hist.value_at_quantile(0.99)),
        p999: ms(hist.value_at_quantile(0.999)),
        max: ms(hist.max()),
    }
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// The figures of one operation type (or the total) for a report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Figures {
    pub ops: u64,
    pub op_rate: f64,
    pub partitions: u64,
    pub partition_rate: f64,
    pub rows: u64,
    pub row_rate: f64,
    pub errors: u64,
    pub latency_ms: Latency,
}

impl Figures {
    pub fn of(stats: &OpStats, elapsed: Duration) -> Self {
        let secs = elapsed.as_secs_f64().max(1e-9);
        Self {
            ops: stats.ops,
            op_rate: stats.ops as f64 / secs,
            partitions: stats.partitions,
            partition_rate: stats.partitions as f64 / secs,
            rows: stats.rows,
            row_rate: stats.rows as f64 / secs,
            errors: stats.errors,
            latency_ms: stats.latency(),
        }
    }
}

/// One printed interval: per-type figures and the total.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IntervalReport {
    /// Seconds since the start of the measured run, at the end of the interval.
    pub time_s: f64,
    /// Length of the interval in seconds (the last one is usually short).
    pub length_s: f64,
    pub total: Figures,
    pub per_op: Vec<(String, Figures)>,
}

pub const HEADER: &str = "type       total ops,    op/s,    pk/s,   row/s,    mean,     med,     .95,     .99,    .999,     max,   time,   stderr, errors,  gc: #,  max ms,  sum ms,  sdv ms,      mb";

/// Width of the `type` column: cassandra-stress's 10, wider for long profile query names.
pub fn type_width(names: &[String]) -> usize {
    names.iter().map(|n| n.len() + 2).max().unwrap_or(0).max(10)
}

/// The header with a `type` column `width` wide.
pub fn header(width: usize) -> String {
    let rest = HEADER.find(',').map(|i| &HEADER[i..]).unwrap_or("");
    format!("{:<width$}{:>10}{rest}", "type", "total ops")
}

/// One progress row, cassandra-stress's ROWFORMAT; gc columns are 0 (no JVM here).
pub fn format_row(
    width: usize,
    kind: &str,
    total_ops: u64,
    f: &Figures,
    time_s: f64,
    stderr: f64,
    errors: u64,
) -> String {
    let l = &f.latency_ms;
    format!(
        "{:<width$}{:>10},{:>8.0},{:>8.0},{:>8.0},{:>8.1},{:>8.1},{:>8.1},{:>8.1},{:>8.1},{:>8.1},{:>7.1},{:>9.5},{:>7},{:>7},{:>8},{:>8},{:>8},{:>8}",
        format!("{kind},"),
        total_ops,
        f.op_rate,
        f.partition_rate,
        f.row_rate,
        l.mean,
        l.p50,
        l.p95,
        l.p99,
        l.p999,
        l.max,
        time_s,
        stderr,
        errors,
        0,
        0,
        0,
        0,
        0
    )
}

/// Relative standard error of the mean of the interval op rates (cassandra-stress's `stderr`).
pub fn rate_stderr(rates: &[f64]) -> f64 {
    let n = rates.len();
    if n < 2 {
        return 0.0;
    }
    let mean = rates.iter().sum::<f64>() / n as f64;
    if mean <= 0.0 {
        return 0.0;
    }
    let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (var.sqrt() / (n as f64).sqrt()) / mean
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The final "Results:" block, in cassandra-stress 4.x's layout.
pub fn format_summary(total: &Figures, per_op: &[(String, Figures)], elapsed: Duration) -> String {
    let list = |f: &dyn Fn(&Figures) -> String| -> String {
        per_op
            .iter()
            .map(|(name, fig)| format!("{name}: {}", f(fig)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rate = |r: f64| thousands(r.round() as u64);
    let mut s = String::from("\nResults:\n");
    s += &format!(
        "Op rate                   : {:>8} op/s  [{}]\n",
        rate(total.op_rate),
        list(&|f| format!("{} op/s", rate(f.op_rate)))
    );
    s += &format!(
        "Partition rate            : {:>8} pk/s  [{}]\n",
        rate(total.partition_rate),
        list(&|f| format!("{} pk/s", rate(f.partition_rate)))
    );
    s += &format!(
        "Row rate                  : {:>8} row/s [{}]\n",
        rate(total.row_rate),
        list(&|f| format!("{} row/s", rate(f.row_rate)))
    );
    let lat = |label: &str, get: &dyn Fn(&Latency) -> f64| -> String {
        format!(
            "{label:<26}: {:>6.1} ms [{}]\n",
            get(&total.latency_ms),
            list(&|f| format!("{:.1} ms", get(&f.latency_ms)))
        )
    };
    s += &lat("Latency mean", &|l| l.mean);
    s += &lat("Latency median", &|l| l.p50);
    s += &lat("Latency 95th percentile", &|l| l.p95);
    s += &lat("Latency 99th percentile", &|l| l.p99);
    s += &lat("Latency 99.9th percentile", &|l| l.p999);
    s += &lat("Latency max", &|l| l.max);
    s += &format!(
        "Total partitions          : {:>10} [{}]\n",
        thousands(total.partitions),
        list(&|f| thousands(f.partitions))
    );
    s += &format!(
        "Total errors              : {:>10} [{}]\n",
        thousands(total.errors),
        list(&|f| thousands(f.errors))
    );
    s += "Total GC count            : 0\n";
    s += "Total GC memory           : 0.000 KiB\n";
    s += "Total GC time             :    0.0 seconds\n";
    s += "Avg GC time               :    NaN ms\n";
    s += "StdDev GC time            :    0.0 ms\n";
    let secs = elapsed.as_secs();
    s += &format!(
        "Total operation time      : {:02}:{:02}:{:02}\n",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn percentiles_in_ms() {
        let mut s = OpStats::default();
        for ms in 1..=1000u64 {
            s.record(Duration::from_millis(ms), 1, 1);
        }
        let l = s.latency();
        assert!((l.p50 - 500.0).abs() < 1.0, "{l:?}");
        assert!((l.p99 - 990.0).abs() < 1.0, "{l:?}");
        assert!((l.max - 1000.0).abs() < 1.0, "{l:?}");
        assert!((l.mean - 500.5).abs() < 1.0, "{l:?}");
    }

    #[test]
    fn merging_histograms_adds_counts() {
        let mut a = OpStats::default();
        let mut b = OpStats::default();
        a.record(Duration::from_millis(1), 1, 2);
        b.record(Duration::from_millis(100), 1, 3);
        b.errors = 4;
        a.add(&b);
        assert_eq!((a.ops, a.rows, a.errors), (2, 5, 4));
        assert!((a.latency().max - 100.0).abs() < 0.1);
    }

    #[test]
    fn row_matches_header_columns() {
        let mut s = OpStats::default();
        s.record(Duration::from_micros(1500), 1, 1);
        let f = Figures::of(&s, Duration::from_secs(1));
        let row = format_row(10, "total", 1, &f, 1.0, 0.0, 0);
        assert_eq!(header(10), HEADER);
        assert!(header(22).starts_with("type                   total ops,"));
        // The row's first field is `total,`; the header's is `type       total ops`.
        assert_eq!(row.split(',').count(), HEADER.split(',').count() + 1);
        assert!(row.starts_with("total,"));
        assert!(row.contains("     1.5,"), "{row}");
    }

    #[test]
    fn summary_layout() {
        let mut s = OpStats::default();
        s.record(Duration::from_millis(2), 1, 1);
        let f = Figures::of(&s, Duration::from_secs(1));
        let text = format_summary(&f, &[("WRITE".into(), f.clone())], Duration::from_secs(61));
        assert!(
            text.contains("Op rate                   :        1 op/s  [WRITE: 1 op/s]"),
            "{text}"
        );
        assert!(
            text.contains("Latency 99.9th percentile :    2.0 ms [WRITE: 2.0 ms]"),
            "{text}"
        );
        assert!(
            text.contains("Total errors              :          0 [WRITE: 0]"),
            "{text}"
        );
        assert!(
            text.contains("Total operation time      : 00:01:01"),
            "{text}"
        );
    }

    #[test]
    fn stderr_of_steady_rates_is_zero() {
        assert_eq!(rate_stderr(&[100.0, 100.0, 100.0]), 0.0);
        assert!(rate_stderr(&[50.0, 150.0]) > 0.0);
    }
}
