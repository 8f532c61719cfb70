//! Maintenance operations on one shard's table (nodetool garbagecollect, cleanup, scrub,
//! refresh) and the per-table SSTable histograms of tablehistograms.
//!
//! Each rewrite runs on the shard's compaction thread through [`ShardStorage::rewrite`],
//! so its outputs replace its inputs under the same transaction log as a compaction's
//! (crash safe), and it is counted in pending/completed compactions. Garbagecollect,
//! cleanup and refresh use the compaction executor
//! ([`crate::compaction::run_rewrite`]) with a hook: garbagecollect shadows each merged
//! partition by the same partition in the table's other SSTables (a wide one a window of
//! rows at a time, alongside theirs), cleanup and refresh see only keys (the partitions
//! they keep are merged as a compaction merges them: raw copies, wide partitions a window
//! of rows at a time); scrub has its own loop because it must keep going past the read
//! errors the executor stops at.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;

use amphora_types::data::{
    ColumnData, DeletionTime, PartitionKey, PartitionUpdate, Row, max_deletion, range_deletion_at,
};
use amphora_types::schema::{ClusteringComparator, TableId, TableSchema};

use crate::compaction::{
    CompactionJob, CompactionTxn, PartitionHook, copy_streamed, read_streamed, run_rewrite,
    streamed_window,
};
use crate::error::{Result, StorageError};
use crate::shard::{RewriteInput, ShardStorage};
use crate::sstable::{SSTableReader, SSTableWriter, parse_toc_name};

/// Where `nodetool refresh` looks for new SSTables: this subdirectory of the table's
/// directory (ScyllaDB's convention).
pub const UPLOAD_DIR: &str = "upload";

/// Which tombstones garbagecollect applies across SSTables (Cassandra's `-g`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// Partition, range and row deletions (Cassandra's default).
    Row,
    /// Also cell tombstones and collection deletions.
    Cell,
}

impl std::str::FromStr for Granularity {
    type Err = StorageError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "ROW" => Ok(Granularity::Row),
            "CELL" => Ok(Granularity::Cell),
            other => Err(StorageError::Invalid(format!(
                "granularity must be ROW or CELL, not {other}"
            ))),
        }
    }
}

/// What one operation did on one shard's table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub sstables_in: u64,
    pub sstables_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Partitions written to the outputs.
    pub partitions_kept: u64,
    /// Partitions left out on purpose (not owned, fully deleted).
    pub partitions_dropped: u64,
    /// Partitions that could not be read (scrub).
    pub partitions_skipped: u64,
    /// Index blocks (up to 128 partitions each) that could not be read (scrub): the
    /// partitions they locate are not salvaged.
    pub index_blocks_skipped: u64,
    /// Out-of-service SSTables that scrub rewrote and put back in service.
    pub sstables_salvaged: u64,
    /// Out-of-service SSTables scrub could not open at all (left in place).
    pub sstables_unreadable: u64,
}

impl MaintenanceReport {
    pub fn add(&mut self, o: &MaintenanceReport) {
        self.sstables_in += o.sstables_in;
        self.sstables_out += o.sstables_out;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.partitions_kept += o.partitions_kept;
        self.partitions_dropped += o.partitions_dropped;
        self.partitions_skipped += o.partitions_skipped;
        self.index_blocks_skipped += o.index_blocks_skipped;
        self.sstables_salvaged += o.sstables_salvaged;
        self.sstables_unreadable += o.sstables_unreadable;
    }
}

/// Which shard owns a token (the caller's token → shard mapping).
pub type Owns = Arc<dyn Fn(i64) -> bool + Send + Sync>;

/// Told the input bytes of each SSTable an operation is done with (task progress).
pub type Progress<'a> = &'a mut dyn FnMut(u64);

fn job_for(inputs: &[Arc<SSTableReader>]) -> CompactionJob {
    CompactionJob {
        inputs: inputs.iter().map(|s| s.generation).collect(),
        // A one-SSTable rewrite keeps its level (LCS); a refresh lands in L0.
        output_level: match inputs {
            [one] => one.stats.level,
            _ => 0,
        },
        max_output_bytes: None,
        drop_only: false,
    }
}

fn sizes(outs: &[SSTableReader]) -> (u64, u64) {
    (
        outs.len() as u64,
        outs.iter().map(SSTableReader::data_size).sum(),
    )
}

/// Rewrites each SSTable on its own (Cassandra's garbagecollect): drops data shadowed by
/// deletions in the same SSTable or in the table's other SSTables (`granularity` says
/// which deletions count), and tombstones past gc_grace_seconds that nothing older can
/// need. Memtables are not consulted for shadowing (their data stays: conservative), and
/// tombstones are purged only under a compaction's rules.
pub async fn garbage_collect(
    st: &ShardStorage,
    id: TableId,
    granularity: Granularity,
    progress: Progress<'_>,
) -> Result<MaintenanceReport> {
    let mut report = MaintenanceReport::default();
    for s in st.sstables(id) {
        rewrite_one(st, id, &s, &mut report, move |inp: &RewriteInput| {
            let cmp = inp.schema.clustering_comparator();
            Filter::Shadow(Box::new(
                move |u: &mut PartitionUpdate, other: &PartitionUpdate| {
                    shadow_by(&cmp, u, other, granularity);
                },
            ))
        })
        .await?;
        progress(s.data_size());
    }
    Ok(report)
}

/// Removes from a partition (or a window of its rows) what the same part of another
/// source shadows.
type Shadow = Box<dyn Fn(&mut PartitionUpdate, &PartitionUpdate)>;

/// What [`rewrite_one`] passes each partition of its SSTable through.
enum Filter {
    /// Shadowing by the same partition in each of the table's other SSTables
    /// ([`PartitionHook::Shadow`]).
    Shadow(Shadow),
    /// The key alone: the partition is kept as a compaction keeps it, or dropped unread.
    Keys(Box<dyn FnMut(&PartitionKey) -> bool>),
}

/// Rewrites the single SSTable `s` (its own compaction transaction, purging under a
/// compaction's rules), passing each partition through the filter `make_filter` builds
/// on the background thread (dropping what it rejects), and adds what it did to
/// `report`: one SSTable and its bytes in, the outputs, partitions kept and dropped.
async fn rewrite_one<M>(
    st: &ShardStorage,
    id: TableId,
    s: &SSTableReader,
    report: &mut MaintenanceReport,
    make_filter: M,
) -> Result<()>
where
    M: FnOnce(&RewriteInput) -> Filter + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let work = Box::new(move |inp: RewriteInput| {
        let mut r = MaintenanceReport::default();
        let mut count = |kept: bool| {
            if kept {
                r.partitions_kept += 1;
            } else {
                r.partitions_dropped += 1;
            }
        };
        let (shadow, mut by_key);
        let hook = match make_filter(&inp) {
            Filter::Shadow(f) => {
                shadow = f;
                PartitionHook::Shadow {
                    shadow: &*shadow,
                    count: &mut count,
                }
            }
            Filter::Keys(mut f) => {
                by_key = move |key: &PartitionKey| {
                    let kept = f(key);
                    count(kept);
                    kept
                };
                PartitionHook::Keys(&mut by_key)
            }
        };
        let gens: Vec<u64> = inp.inputs.iter().map(|s| s.generation).collect();
        let out = run_rewrite(
            &inp.schema,
            &inp.dir,
            &inp.inputs,
            &gens,
            &inp.next_generation,
            &job_for(&inp.inputs),
            &inp.purge,
            Some(hook),
        )?;
        let (n, b) = sizes(&out.0);
        r.sstables_out = n;
        r.bytes_out = b;
        let _ = tx.send(r);
        Ok(out)
    });
    let bytes_in = s.data_size();
    if st.rewrite(id, vec![s.generation], false, work).await? {
        let mut r = rx.try_recv().unwrap_or_default();
        r.sstables_in = 1;
        r.bytes_in = bytes_in;
        report.add(&r);
    }
    Ok(())
}

/// Removes from `u` what the deletions of `other` (the same partition in another source)
/// shadow. Nothing of `other` is copied into `u`. Row by row: `u` and `other` may be the
/// same window of a wide partition's rows, each with its partition's deletions.
pub(crate) fn shadow_by(
    cmp: &ClusteringComparator,
    u: &mut PartitionUpdate,
    other: &PartitionUpdate,
    granularity: Granularity,
) {
    let pd = other.partition_deletion;
    if let (Some(ours), Some(theirs)) = (u.partition_deletion, pd)
        && ours <= theirs
    {
        u.partition_deletion = None;
    }
    if let Some(d) = pd {
        u.range_tombstones.retain(|rt| rt.deletion > d);
    }
    let row_deletion = |r: &Row| -> Option<DeletionTime> {
        let ranged = range_deletion_at(cmp, &other.range_tombstones, &r.clustering);
        let own = other
            .rows
            .binary_search_by(|o| cmp.compare(&o.clustering.0, &r.clustering.0))
            .ok()
            .and_then(|i| other.rows.get(i))
            .and_then(|o| o.deletion);
        max_deletion(max_deletion(pd, ranged), own)
    };
    let shadow_cells = |r: &mut Row, o: Option<&Row>| {
        let Some(o) = o else { return };
        r.cells.retain_mut(|(col, d)| {
            let Some(theirs) = o.cell(*col) else {
                return true;
            };
            match (d, theirs) {
                (ColumnData::Simple(c), ColumnData::Simple(t)) => {
                    !(t.is_tombstone && c.timestamp < t.timestamp)
                }
                (
                    ColumnData::Complex { deletion, cells },
                    ColumnData::Complex {
                        deletion: their_del,
                        cells: their_cells,
                    },
                ) => {
                    if let Some(td) = their_del {
                        if deletion.is_some_and(|x| x <= *td) {
                            *deletion = None;
                        }
                        cells.retain(|(_, c)| !td.deletes(c.timestamp));
                    }
                    cells.retain(|(path, c)| {
                        !their_cells
                            .iter()
                            .any(|(p, t)| p == path && t.is_tombstone && c.timestamp < t.timestamp)
                    });
                    deletion.is_some() || !cells.is_empty()
                }
                _ => true,
            }
        });
    };
    if let Some(sr) = u.static_row.as_mut() {
        if let Some(d) = pd {
            sr.shadow(d);
        }
        if granularity == Granularity::Cell {
            shadow_cells(sr, other.static_row.as_ref());
        }
    }
    if u.static_row.as_ref().is_some_and(Row::is_empty) {
        u.static_row = None;
    }
    for r in u.rows.iter_mut() {
        if let Some(d) = row_deletion(r) {
            r.shadow(d);
        }
        if granularity == Granularity::Cell {
            let o = other
                .rows
                .binary_search_by(|o| cmp.compare(&o.clustering.0, &r.clustering.0))
                .ok()
                .and_then(|i| other.rows.get(i));
            shadow_cells(r, o);
        }
    }
    u.rows.retain(|r| !r.is_empty());
}

/// Rewrites the SSTables holding partitions this shard does not own (`owns`), without
/// them. SSTables whose index shows only owned partitions are left alone.
pub async fn cleanup(
    st: &ShardStorage,
    id: TableId,
    owns: Owns,
    progress: Progress<'_>,
) -> Result<MaintenanceReport> {
    let mut report = MaintenanceReport::default();
    for s in st.sstables(id) {
        if !has_unowned(&s, &owns)? {
            progress(s.data_size());
            continue;
        }
        let owns = owns.clone();
        rewrite_one(st, id, &s, &mut report, move |_: &RewriteInput| {
            Filter::Keys(Box::new(move |key: &PartitionKey| owns(key.token)))
        })
        .await?;
        progress(s.data_size());
    }
    Ok(report)
}

/// Whether the SSTable's index names a partition `owns` rejects (reads the index only).
fn has_unowned(s: &SSTableReader, owns: &Owns) -> Result<bool> {
    let mut sc = s.scan_from(i64::MIN, None, false)?;
    while let Some(k) = sc.peek_key()? {
        if !owns(k.token) {
            return Ok(true);
        }
        sc.skip();
    }
    Ok(false)
}

/// Whether scrub stops at the first unreadable partition. Cassandra's rule: partitions
/// of a table with counters are only skipped with `--skip-corrupted` (a lost counter
/// shard changes totals); other tables' corrupt partitions are always skipped.
pub fn scrub_aborts_on_corruption(schema: &TableSchema, skip_corrupted: bool) -> bool {
    !skip_corrupted && schema.columns.iter().any(|c| c.ty.is_counter())
}

/// Reads every SSTable of the table, in service or not (taken out after a checksum
/// failure, or unreadable at start), and rewrites each keeping the partitions that read
/// back and verify, skipping the rest (see [`scrub_aborts_on_corruption`]). Rewritten
/// out-of-service SSTables are back in service. One whose metadata cannot be opened, or
/// whose first index block is unreadable (so no partition can be found), is left as it
/// is, in service or not, and counted in `sstables_unreadable`.
pub async fn scrub(
    st: &ShardStorage,
    id: TableId,
    skip_corrupted: bool,
    progress: Progress<'_>,
) -> Result<MaintenanceReport> {
    let schema = st.schema(id).ok_or(StorageError::UnknownTable(id))?;
    let abort = scrub_aborts_on_corruption(&schema, skip_corrupted);
    let mut report = MaintenanceReport::default();
    // Each live SSTable alone, then the out-of-service ones together.
    let mut live = Vec::new();
    for s in st.sstables(id) {
        if salvageable(&s.dir, s.generation) {
            live.push((vec![s.generation], false));
        } else {
            report.sstables_unreadable += 1;
            progress(s.data_size());
        }
    }
    for (inputs, out_of_service) in live.into_iter().chain(std::iter::once((Vec::new(), true))) {
        let (tx, rx) = std::sync::mpsc::channel();
        let work = Box::new(move |inp: RewriteInput| {
            let mut r = MaintenanceReport::default();
            let out = scrub_job(&inp, abort, &mut r)?;
            let _ = tx.send(r);
            Ok(out)
        });
        if st.rewrite(id, inputs, out_of_service, work).await? {
            let r = rx.try_recv().unwrap_or_default();
            progress(r.bytes_in);
            report.add(&r);
        }
    }
    Ok(report)
}

/// Whether scrub can find any partition of an SSTable: it opens, and its first index
/// block reads back (a fresh reader: a failure must not mark the live one).
fn salvageable(dir: &Path, generation: u64) -> bool {
    let ok = SSTableReader::open(dir, generation)
        .and_then(|s| s.scan_from(i64::MIN, None, false).map(drop));
    if let Err(e) = &ok {
        tracing::error!(
            "scrub: SSTable {generation} in {} cannot be read (no partition can be located) and is left as it is: {e}",
            dir.display()
        );
    }
    ok.is_ok()
}

fn scrub_job(
    inp: &RewriteInput,
    abort: bool,
    r: &mut MaintenanceReport,
) -> Result<(Vec<SSTableReader>, CompactionTxn)> {
    // Fresh readers: a checksum failure met here must not mark the live reader.
    let mut sources: Vec<(u64, Option<SSTableReader>, bool)> = Vec::new();
    for s in &inp.inputs {
        sources.push((
            s.generation,
            Some(SSTableReader::open(&inp.dir, s.generation)?),
            false,
        ));
    }
    for g in &inp.out_of_service {
        match SSTableReader::open(&inp.dir, *g) {
            Ok(s) if salvageable(&inp.dir, *g) => sources.push((*g, Some(s), true)),
            _ => r.sstables_unreadable += 1,
        }
    }
    let replaced: Vec<u64> = sources
        .iter()
        .filter(|(_, s, _)| s.is_some())
        .map(|(g, _, _)| *g)
        .collect();
    let mut txn = CompactionTxn::begin(&inp.dir, &replaced)?;
    let mut outputs = Vec::new();
    let mut created = Vec::new();
    let res = (|| -> Result<()> {
        for (g, s, offline) in &sources {
            let Some(s) = s else { continue };
            r.sstables_in += 1;
            r.bytes_in += s.data_size();
            let out_gen = inp.next_generation.fetch_add(1, AtomicOrdering::Relaxed);
            txn.add_output(out_gen)?;
            created.push(out_gen);
            let mut w = SSTableWriter::new(&inp.dir, out_gen, &inp.schema)?;
            w.expect_partitions(s.stats.partitions);
            let skipped_before = r.partitions_skipped;
            copy_readable(s, &mut w, r, abort)?;
            if r.partitions_skipped > skipped_before {
                tracing::warn!(
                    "scrub: SSTable {g} in {}: {} unreadable partitions skipped",
                    inp.dir.display(),
                    r.partitions_skipped - skipped_before
                );
            }
            // Published only once the log naming it is durable.
            let mut sync_txn = || txn.sync();
            if let Some(o) = w.finish_with(
                s.stats.commitlog_upper_bound,
                s.stats.level,
                Some(&mut sync_txn),
            )? {
                r.sstables_out += 1;
                r.bytes_out += o.data_size();
                outputs.push(o);
            }
            if *offline {
                r.sstables_salvaged += 1;
            }
        }
        txn.commit()
    })();
    if let Err(e) = res {
        for g in created {
            crate::sstable::delete_generation(&inp.dir, g);
        }
        let _ = std::fs::remove_file(&txn.path);
        return Err(e);
    }
    // The shard deletes the live inputs it knows; the out-of-service ones are ours.
    for (g, s, offline) in &sources {
        if *offline && s.is_some() {
            crate::sstable::delete_generation(&inp.dir, *g);
        }
    }
    Ok((outputs, txn))
}

/// Copies the partitions of `s` that read back into `w`; counts the others.
fn copy_readable(
    s: &SSTableReader,
    w: &mut SSTableWriter,
    r: &mut MaintenanceReport,
    abort: bool,
) -> Result<()> {
    // Counters' corrupt partitions stop the scrub (see `scrub_aborts_on_corruption`).
    let skip = |e: StorageError| -> Result<()> {
        if abort {
            return Err(StorageError::Invalid(format!(
                "scrub stopped at a corrupt partition of a table with counters (rerun with --skip-corrupted to drop it): {e}"
            )));
        }
        Ok(())
    };
    // Checked by `salvageable` first; failing here fails the job (nothing replaced).
    let mut sc = s.scan_from(i64::MIN, None, false)?;
    let mut last: Option<PartitionKey> = None;
    loop {
        match sc.peek_key() {
            Ok(None) => return Ok(()),
            Ok(Some(_)) => {}
            // An unreadable index block: the scanner moves on to the next one.
            Err(e) => {
                r.index_blocks_skipped += 1;
                skip(e)?;
                continue;
            }
        }
        // A wide partition is read through a window of rows at a time (every row must
        // decode), then copied the same way: never decoded whole.
        if let Some(window) = sc.current_entry().and_then(|e| streamed_window(e.len)) {
            let Some((k, e)) = sc.take_current()? else {
                return Ok(());
            };
            if last.as_ref().is_some_and(|l| *l >= k) {
                r.partitions_skipped += 1;
                skip(StorageError::corrupt(
                    s.data_path(),
                    e.position,
                    "partitions out of ring order",
                ))?;
                continue;
            }
            match read_streamed(s, &k, e, window) {
                Ok(p) => {
                    copy_streamed(s, &p, window, w)?;
                    r.partitions_kept += 1;
                    last = Some(k);
                }
                Err(e @ StorageError::Corrupt { .. }) => {
                    r.partitions_skipped += 1;
                    skip(e)?;
                }
                Err(e) => return Err(e),
            }
            continue;
        }
        match sc.next_partition() {
            Ok(Some((k, u))) => {
                if last.as_ref().is_some_and(|l| *l >= k) {
                    r.partitions_skipped += 1;
                    skip(StorageError::corrupt(
                        s.data_path(),
                        0,
                        "partitions out of ring order",
                    ))?;
                    continue;
                }
                w.append(&k, &u)?;
                r.partitions_kept += 1;
                last = Some(k);
            }
            Ok(None) => return Ok(()),
            Err(e @ StorageError::Corrupt { .. }) => {
                r.partitions_skipped += 1;
                skip(e)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Generations with a TOC in `dir` (an `upload/` directory).
pub fn upload_generations(dir: &Path) -> Result<Vec<u64>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StorageError::io(dir, e)),
    };
    let mut gens: Vec<u64> = rd
        .flatten()
        .filter_map(|e| parse_toc_name(&e.file_name().to_string_lossy()))
        .collect();
    gens.sort();
    Ok(gens)
}

/// Opens and fully verifies (every checksum) the SSTables `gens` of `dir`.
pub fn open_verified(dir: &Path, gens: &[u64]) -> Result<Vec<Arc<SSTableReader>>> {
    gens.iter()
        .map(|g| {
            let s = SSTableReader::open(dir, *g)?;
            s.verify()?;
            Ok(Arc::new(s))
        })
        .collect()
}

/// Loads the partitions this shard owns (`owns`) from the SSTables `gens` of each
/// upload directory into the table, as new SSTables of its own (one merged rewrite).
/// The uploaded files are left in place: the caller removes them once every shard has
/// loaded its part ([`remove_uploaded`]).
pub async fn refresh(
    st: &ShardStorage,
    id: TableId,
    uploads: Vec<(PathBuf, Vec<u64>)>,
    owns: Owns,
) -> Result<MaintenanceReport> {
    let mut sources = Vec::new();
    for (dir, gens) in &uploads {
        sources.extend(open_verified(dir, gens)?);
    }
    if sources.is_empty() {
        return Ok(MaintenanceReport::default());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let work = Box::new(move |inp: RewriteInput| {
        let mut r = MaintenanceReport {
            sstables_in: sources.len() as u64,
            bytes_in: sources.iter().map(|s| s.data_size()).sum(),
            ..Default::default()
        };
        let mut keep = |key: &PartitionKey| {
            let kept = owns(key.token);
            if kept {
                r.partitions_kept += 1;
            } else {
                r.partitions_dropped += 1;
            }
            kept
        };
        let out = run_rewrite(
            &inp.schema,
            &inp.dir,
            &sources,
            &[],
            &inp.next_generation,
            &job_for(&sources),
            &inp.purge,
            Some(PartitionHook::Keys(&mut keep)),
        )?;
        let (n, b) = sizes(&out.0);
        r.sstables_out = n;
        r.bytes_out = b;
        let _ = tx.send(r);
        Ok(out)
    });
    st.rewrite(id, Vec::new(), false, work).await?;
    Ok(rx.try_recv().unwrap_or_default())
}

/// Deletes the loaded SSTables from their upload directories (TOC first).
pub fn remove_uploaded(uploads: &[(PathBuf, Vec<u64>)]) {
    for (dir, gens) in uploads {
        for g in gens {
            crate::sstable::delete_generation(dir, *g);
        }
    }
}

/// Sums of the live SSTables' partition size and cell count histograms (bucket i =
/// `[2^i, 2^(i+1))` bytes / cells), for tablehistograms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SSTableHistograms {
    pub partition_size: [u64; 40],
    pub cell_count: [u64; 40],
}

pub fn sstable_histograms(st: &ShardStorage, id: TableId) -> SSTableHistograms {
    let mut h = SSTableHistograms {
        partition_size: [0; 40],
        cell_count: [0; 40],
    };
    for s in st.sstables(id) {
        for (a, b) in h
            .partition_size
            .iter_mut()
            .zip(s.stats.partition_size_histogram)
        {
            *a += b;
        }
        for (a, b) in h.cell_count.iter_mut().zip(s.stats.cell_count_histogram) {
            *a += b;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::{set_streaming, streamed_count};
    use crate::sstable::component_path;
    use amphora_types::data::{Cell, Clustering, ClusteringBound, LivenessInfo, RangeTombstone};
    use bytes::Bytes;

    /// Scrub copies a wide partition a window of rows at a time, reading it through first
    /// (so a corrupt one is skipped with nothing written), into the bytes the whole copy
    /// writes: two wide partitions (one with a partition deletion, a static row, a range
    /// tombstone, row deletions, expiring cells and cell tombstones) and a narrow one, copied
    /// whole and streamed in windows of 1, 7 and 4,096 rows; then the same SSTable with a
    /// byte of its data flipped: the partition it falls in is skipped either way, the rest
    /// copied the same.
    #[test]
    fn scrub_streams_wide_partitions_into_the_whole_copy_bytes() {
        let schema = crate::test_support::wide_table_1k_chunks();
        let dir = tempfile::tempdir().expect("tmp");
        let c = |n: u32| Clustering(vec![Bytes::copy_from_slice(&n.to_be_bytes())]);
        let row = |n: u32| {
            let ts = 1_000 + i64::from(n % 89);
            let v = Bytes::from(vec![n as u8; (n as usize * 7) % 50]);
            let v1 = match n % 6 {
                0 => Cell::tombstone(ts, 10),
                1 => Cell::expiring(ts, 100, 50, v.clone()),
                _ => Cell::live(ts, v.clone()),
            };
            Row {
                clustering: c(n),
                marker: (!n.is_multiple_of(4)).then(|| LivenessInfo::new(ts)),
                deletion: n
                    .is_multiple_of(13)
                    .then(|| DeletionTime::new(ts - 5, 1_500)),
                cells: vec![
                    (3, ColumnData::Simple(v1)),
                    (4, ColumnData::Simple(Cell::live(ts + 1, v))),
                ],
            }
        };
        let wide1 = PartitionUpdate {
            partition_deletion: Some(DeletionTime::new(900, 1_400)),
            static_row: Some(Row {
                clustering: Clustering::empty(),
                marker: None,
                deletion: None,
                cells: vec![(
                    2,
                    ColumnData::Simple(Cell::live(1_000, Bytes::from_static(b"st"))),
                )],
            }),
            rows: (0..2_000).map(row).collect(),
            range_tombstones: vec![RangeTombstone {
                start: ClusteringBound {
                    prefix: c(300),
                    inclusive: true,
                },
                end: ClusteringBound {
                    prefix: c(420),
                    inclusive: false,
                },
                deletion: DeletionTime::new(1_040, 1_600),
            }],
        };
        let wide2 = PartitionUpdate {
            rows: (5_000..6_500).map(row).collect(),
            ..Default::default()
        };
        let narrow = PartitionUpdate {
            rows: vec![row(7)],
            ..Default::default()
        };
        let mut parts = vec![
            (PartitionKey::new(Bytes::from_static(b"wide1")), wide1),
            (PartitionKey::new(Bytes::from_static(b"wide2")), wide2),
            (PartitionKey::new(Bytes::from_static(b"narrow")), narrow),
        ];
        parts.sort_by(|a, b| a.0.cmp(&b.0));
        // Generation 1 as written, generation 2 the same with one byte flipped.
        for g in [1, 2] {
            let mut w = SSTableWriter::new(dir.path(), g, &schema).expect("writer");
            for (k, u) in &parts {
                w.append(k, u).expect("append");
            }
            w.finish(0, 0).expect("finish").expect("an SSTable");
        }
        let data = component_path(dir.path(), 2, "Data.db");
        let mut bytes = std::fs::read(&data).expect("data");
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x5a;
        std::fs::write(&data, &bytes).expect("corrupt");

        let copy = |g: u64, out: u64, streaming: Option<(u64, usize)>| {
            let s = SSTableReader::open(dir.path(), g).expect("open");
            let mut w = SSTableWriter::new(dir.path(), out, &schema).expect("writer");
            let mut r = MaintenanceReport::default();
            set_streaming(streaming);
            let before = streamed_count();
            let res = copy_readable(&s, &mut w, &mut r, false);
            let streamed = streamed_count() - before;
            set_streaming(None);
            res.expect("copy");
            let o = w.finish(0, 0).expect("finish").expect("an SSTable");
            o.verify().expect("checksums and row index");
            (o, r, streamed)
        };
        let file = |o: &SSTableReader, c: &str| {
            std::fs::read(component_path(dir.path(), o.generation, c)).expect("component")
        };
        let mut out = 10;
        for (g, kept) in [(1, 3), (2, 2)] {
            let (whole, whole_r, n) = copy(g, out, None);
            out += 1;
            assert_eq!(n, 0);
            assert_eq!(whole_r.partitions_kept, kept, "generation {g}");
            assert_eq!(whole_r.partitions_skipped, 3 - kept, "generation {g}");
            for window in [1, 7, 4_096] {
                let (o, r, n) = copy(g, out, Some((0, window)));
                out += 1;
                // Every partition read is streamed (the threshold is 0), kept or not.
                assert_eq!(n, kept, "generation {g} window {window}");
                assert_eq!(r, whole_r, "generation {g} window {window}");
                assert!(
                    file(&o, "Data.db") == file(&whole, "Data.db"),
                    "generation {g} window {window}: Data.db differs"
                );
                for c in ["Index.db", "RowIndex.db"] {
                    assert!(file(&o, c) == file(&whole, c), "{c} differs");
                }
                assert_eq!(o.stats, whole.stats);
            }
            if g == 1 {
                for (k, u) in &parts {
                    assert!(whole.get(k).expect("get").as_ref() == Some(u), "{k:?}");
                }
            }
        }
    }
}
