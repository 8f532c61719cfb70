//! Offline tools behind `amphora sstable dump FILE` and `amphora sstable validate DIR`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use amphora_types::data::{Cell, ColumnData, DeletionTime, PartitionUpdate, Row};

use crate::commitlog::{self, ReplayReport};
use crate::config::CommitFailurePolicy;
use crate::error::{Result, StorageError};
use crate::sstable::{SSTableReader, parse_toc_name};

/// Splits `.../am1-<gen>-<Component>` into (directory, generation).
pub fn sstable_of(path: &Path) -> Result<(PathBuf, u64)> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let generation = name
        .strip_prefix(crate::sstable::FORMAT_PREFIX)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|r| r.split('-').next())
        .and_then(|g| g.parse::<u64>().ok())
        .ok_or_else(|| {
            StorageError::Invalid(format!("{} is not an SSTable component", path.display()))
        })?;
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    Ok((dir, generation))
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2 + 2);
    s.push_str("0x");
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn json_deletion(d: &DeletionTime) -> String {
    format!(
        "{{\"marked_deleted\": {}, \"local_delete_time\": {}}}",
        d.marked_for_delete_at, d.local_deletion_time
    )
}

fn json_cell(c: &Cell) -> String {
    let mut s = format!("\"tstamp\": {}", c.timestamp);
    if c.is_tombstone {
        let _ = write!(
            s,
            ", \"deletion_info\": {{\"local_delete_time\": {}}}",
            c.local_expiry
        );
    } else {
        if c.ttl > 0 {
            let _ = write!(
                s,
                ", \"ttl\": {}, \"expires_at\": {}",
                c.ttl, c.local_expiry
            );
        }
        if c.is_counter {
            let _ = write!(
                s,
                ", \"counter\": {}",
                amphora_types::data::counter_value(&c.value)
            );
        } else {
            let _ = write!(s, ", \"value\": \"{}\"", hex(&c.value));
        }
    }
    s
}

fn json_row(r: &Row, kind: &str) -> String {
    let mut s = format!("{{\"type\": \"{kind}\"");
    if !r.clustering.0.is_empty() {
        let parts: Vec<String> = r
            .clustering
            .0
            .iter()
            .map(|b| format!("\"{}\"", hex(b)))
            .collect();
        let _ = write!(s, ", \"clustering\": [{}]", parts.join(", "));
    }
    if let Some(m) = r.marker {
        let _ = write!(s, ", \"liveness_info\": {{\"tstamp\": {}", m.timestamp);
        if m.ttl > 0 {
            let _ = write!(
                s,
                ", \"ttl\": {}, \"expires_at\": {}",
                m.ttl, m.local_expiry
            );
        }
        s.push('}');
    }
    if let Some(d) = r.deletion {
        let _ = write!(s, ", \"deletion_info\": {}", json_deletion(&d));
    }
    let cells: Vec<String> = r
        .cells
        .iter()
        .map(|(id, d)| match d {
            ColumnData::Simple(c) => format!("{{\"column\": {id}, {}}}", json_cell(c)),
            ColumnData::Complex { deletion, cells } => {
                let mut x = format!("{{\"column\": {id}");
                if let Some(d) = deletion {
                    let _ = write!(x, ", \"deletion_info\": {}", json_deletion(d));
                }
                let els: Vec<String> = cells
                    .iter()
                    .map(|(p, c)| format!("{{\"path\": \"{}\", {}}}", hex(p), json_cell(c)))
                    .collect();
                let _ = write!(x, ", \"cells\": [{}]}}", els.join(", "));
                x
            }
        })
        .collect();
    let _ = write!(s, ", \"cells\": [{}]}}", cells.join(", "));
    s
}

fn json_partition(key: &[u8], token: i64, u: &PartitionUpdate) -> String {
    let mut s = format!(
        "  {{\"partition\": {{\"key\": \"{}\", \"token\": {token}",
        hex(key)
    );
    if let Some(d) = u.partition_deletion {
        let _ = write!(s, ", \"deletion_info\": {}", json_deletion(&d));
    }
    s.push_str("}, \"rows\": [");
    let mut rows: Vec<String> = Vec::new();
    if let Some(sr) = &u.static_row {
        rows.push(json_row(sr, "static_block"));
    }
    for r in &u.rows {
        rows.push(json_row(r, "row"));
    }
    for rt in &u.range_tombstones {
        let b = |x: &amphora_types::data::ClusteringBound| {
            let parts: Vec<String> = x
                .prefix
                .0
                .iter()
                .map(|b| format!("\"{}\"", hex(b)))
                .collect();
            format!(
                "{{\"clustering\": [{}], \"inclusive\": {}}}",
                parts.join(", "),
                x.inclusive
            )
        };
        rows.push(format!(
            "{{\"type\": \"range_tombstone\", \"start\": {}, \"end\": {}, \"deletion_info\": {}}}",
            b(&rt.start),
            b(&rt.end),
            json_deletion(&rt.deletion)
        ));
    }
    let _ = write!(s, "{}]}}", rows.join(", "));
    s
}

/// The content of an SSTable as JSON (like Cassandra's sstabledump; values in hex,
/// columns by id).
pub fn dump_sstable(path: &Path) -> Result<String> {
    let (dir, generation) = sstable_of(path)?;
    let r = SSTableReader::open(&dir, generation)?;
    let mut scan = r.scan_from(i64::MIN, None, false)?;
    let mut parts = Vec::new();
    while let Some((k, u)) = scan.next_partition()? {
        parts.push(json_partition(&k.key, k.token, &u));
    }
    Ok(format!("[\n{}\n]\n", parts.join(",\n")))
}

/// What `validate` found.
#[derive(Debug, Default)]
pub struct ValidateReport {
    pub sstables_ok: u64,
    /// SSTables listed but deleted by the node while validation read them.
    pub sstables_removed: u64,
    pub segments: u64,
    pub errors: Vec<StorageError>,
    pub commitlog: Option<ReplayReport>,
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_toc_name)
            .is_some()
        {
            out.push(p);
        }
    }
}

/// Checks every checksum of every SSTable under `dir` (recursively) and, if `dir` has a
/// `commitlog/` directory, every commitlog entry. Never modifies anything.
pub fn validate_dir(dir: &Path) -> ValidateReport {
    let mut report = ValidateReport::default();
    let mut tocs = Vec::new();
    walk(dir, &mut tocs);
    tocs.sort();
    for toc in tocs {
        let res = sstable_of(&toc)
            .and_then(|(d, g)| SSTableReader::open(&d, g))
            .and_then(|r| {
                r.verify()?;
                let mut s = r.scan_from(i64::MIN, None, false)?;
                while s.next_partition()?.is_some() {}
                Ok(())
            });
        match res {
            Ok(()) => report.sstables_ok += 1,
            // A running node deletes an SSTable it compacted away (TOC first) once its
            // last reader is gone, which may be while this walk reads it: an SSTable
            // whose TOC is gone is no longer live, so its missing files are no damage.
            Err(_) if !toc.exists() => report.sstables_removed += 1,
            Err(e) => report.errors.push(e),
        }
    }
    let log_dir = dir.join("commitlog");
    if log_dir.is_dir() {
        match commitlog::list_segments(&log_dir) {
            Ok(segs) => {
                report.segments = segs.len() as u64;
                let mut rep = ReplayReport::default();
                match commitlog::verify_segments(&log_dir, CommitFailurePolicy::Ignore, &mut rep) {
                    Ok(()) => {
                        for c in &rep.corrupt {
                            report.errors.push(StorageError::CommitlogCorrupt {
                                path: c.path.clone(),
                                offset: c.offset,
                                reason: c.reason.clone(),
                            });
                        }
                        if let Some(t) = &rep.torn_tail {
                            report.errors.push(StorageError::corrupt(
                                &t.path,
                                t.offset,
                                "torn tail",
                            ));
                        }
                        report.commitlog = Some(rep);
                    }
                    Err(e) => report.errors.push(e),
                }
            }
            Err(e) => report.errors.push(e),
        }
    }
    report
}
