//! Output helpers that reproduce Cassandra nodetool's formatting.

/// Cassandra's `FileUtils.stringifyFileSize`: `#.##` with binary units.
pub fn file_size(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    const MIB: f64 = KIB * 1024.0;
    const GIB: f64 = MIB * 1024.0;
    const TIB: f64 = GIB * 1024.0;
    let (v, unit) = if bytes >= TIB {
        (bytes / TIB, "TiB")
    } else if bytes >= GIB {
        (bytes / GIB, "GiB")
    } else if bytes >= MIB {
        (bytes / MIB, "MiB")
    } else if bytes >= KIB {
        (bytes / KIB, "KiB")
    } else {
        (bytes, "bytes")
    };
    format!("{} {unit}", decimal(v))
}

/// Java's `DecimalFormat("#.##")`: at most two decimals, no trailing zeros.
pub fn decimal(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".into()
    } else {
        s.to_owned()
    }
}

/// Bytes as nodetool prints them: raw number, or human readable with `-H`.
pub fn bytes(v: u64, human: bool) -> String {
    if human {
        file_size(v as f64)
    } else {
        v.to_string()
    }
}

/// Cassandra's `TableBuilder`: columns padded to their widest cell, one space apart.
#[derive(Default)]
pub struct TableBuilder {
    rows: Vec<Vec<String>>,
    /// Column separator; one space when empty (nodetool status uses two).
    delimiter: &'static str,
}

impl TableBuilder {
    pub fn with_delimiter(delimiter: &'static str) -> Self {
        TableBuilder {
            rows: Vec::new(),
            delimiter,
        }
    }

    pub fn add<I, S>(&mut self, row: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(row.into_iter().map(Into::into).collect());
    }

    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0usize; cols];
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(c.chars().count());
                }
            }
        }
        let mut out = String::new();
        for r in &self.rows {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                if i > 0 {
                    line.push_str(if self.delimiter.is_empty() {
                        " "
                    } else {
                        self.delimiter
                    });
                }
                let w = widths.get(i).copied().unwrap_or(0);
                line.push_str(&format!("{c:<w$}"));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Milliseconds since the epoch as `2026-11-22T02:18:24.000` (UTC).
pub fn timestamp_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_like_cassandra() {
        assert_eq!(file_size(0.0), "0 bytes");
        assert_eq!(file_size(512.0), "512 bytes");
        assert_eq!(file_size(106_803.2), "104.3 KiB");
        assert_eq!(file_size(1_268_777.0), "1.21 MiB");
        assert_eq!(file_size(1024.0 * 1024.0 * 1024.0 * 3.0), "3 GiB");
        assert_eq!(decimal(2.0), "2");
        assert_eq!(decimal(0.5), "0.5");
    }

    #[test]
    fn table_columns_align() {
        let mut t = TableBuilder::default();
        t.add(["id", "keyspace_name"]);
        t.add(["12345", "ks"]);
        assert_eq!(t.render(), "id    keyspace_name\n12345 ks\n");
    }

    #[test]
    fn timestamps() {
        assert_eq!(timestamp_ms(0), "1970-01-01T00:00:00.000");
        assert_eq!(timestamp_ms(1_795_314_304_123), "2026-11-22T02:25:04.123");
    }
}
