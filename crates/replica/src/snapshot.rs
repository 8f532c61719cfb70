//! Snapshots: hard links of a table's live SSTable files into
//! `<table dir>/snapshots/<tag>/` (as Cassandra lays them out), plus a `manifest.json`
//! listing the files. Restoring is copying them back into the table directory while the
//! node is down (docs/dev/rest-api.md).
//!
//! The links are made on the shard thread with no await between listing the live
//! SSTables and linking them, so a compaction cannot delete an input in between.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use amphora_types::schema::TableSchema;

use crate::{ReplicaError, ShardDb};

/// Directory under a table directory that holds snapshots.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// A snapshot tag must be a plain file name.
pub fn valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 200
        && tag != "."
        && tag != ".."
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// One table's snapshot with one tag on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub tag: String,
    pub keyspace: String,
    pub table: String,
    pub files: u64,
    /// Bytes of the snapshot's files.
    pub size_bytes: u64,
    /// Bytes held only by the snapshot (files no longer linked from the live table).
    pub true_size_bytes: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReplicaError + '_ {
    move |source| ReplicaError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl ShardDb {
    /// The table's directory on this shard (the storage engine's layout:
    /// `<shard dir>/<keyspace>/<table>-<id>`).
    pub fn table_dir(&self, t: &TableSchema) -> PathBuf {
        self.storage
            .config()
            .data_dir
            .join(&t.keyspace)
            .join(format!("{}-{}", t.name, t.id.to_simple_string()))
    }

    /// Hard-links the table's live SSTables into `snapshots/<tag>/`. Flush first (the
    /// caller does) to include memtable data. Returns the number of files linked.
    pub fn snapshot_table(&self, t: &TableSchema, tag: &str) -> Result<u64, ReplicaError> {
        let dir = self.table_dir(t);
        let target = dir.join(SNAPSHOTS_DIR).join(tag);
        // Component files share the `<format>-<generation>-` prefix of the data file.
        let prefixes: Vec<String> = self
            .storage
            .sstable_paths(t.id)
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .filter_map(|name| {
                let mut parts = name.splitn(3, '-');
                Some(format!("{}-{}-", parts.next()?, parts.next()?))
            })
            .collect();
        fs::create_dir_all(&target).map_err(io(&target))?;
        let mut linked = Vec::new();
        if !prefixes.is_empty() {
            for e in fs::read_dir(&dir).map_err(io(&dir))? {
                let e = e.map_err(io(&dir))?;
                let name = e.file_name().to_string_lossy().to_string();
                if !prefixes.iter().any(|p| name.starts_with(p.as_str())) {
                    continue;
                }
                let to = target.join(&name);
                match fs::hard_link(e.path(), &to) {
                    Ok(()) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(err) => return Err(io(&to)(err)),
                }
                linked.push(name);
            }
        }
        linked.sort();
        let manifest = serde_json::json!({ "files": linked }).to_string();
        let mpath = target.join("manifest.json");
        fs::write(&mpath, manifest).map_err(io(&mpath))?;
        Ok(linked.len() as u64)
    }

    /// The table's snapshots on this shard.
    pub fn list_snapshots(&self, t: &TableSchema) -> Result<Vec<SnapshotInfo>, ReplicaError> {
        let root = self.table_dir(t).join(SNAPSHOTS_DIR);
        let rd = match fs::read_dir(&root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&root)(e)),
        };
        let mut out = Vec::new();
        for e in rd {
            let e = e.map_err(io(&root))?;
            if !e.file_type().map(|f| f.is_dir()).unwrap_or(false) {
                continue;
            }
            let mut info = SnapshotInfo {
                tag: e.file_name().to_string_lossy().to_string(),
                keyspace: t.keyspace.clone(),
                table: t.name.clone(),
                files: 0,
                size_bytes: 0,
                true_size_bytes: 0,
            };
            let dir = e.path();
            for f in fs::read_dir(&dir).map_err(io(&dir))? {
                let f = f.map_err(io(&dir))?;
                let Ok(md) = f.metadata() else { continue };
                if !md.is_file() || f.file_name() == "manifest.json" {
                    continue;
                }
                info.files += 1;
                info.size_bytes += md.len();
                if md.nlink() == 1 {
                    info.true_size_bytes += md.len();
                }
            }
            out.push(info);
        }
        out.sort_by(|a, b| a.tag.cmp(&b.tag));
        Ok(out)
    }

    /// Removes the table's snapshot `tag` (all of them with `None`). Returns how many
    /// snapshot directories were removed.
    pub fn clear_snapshot(&self, t: &TableSchema, tag: Option<&str>) -> Result<u64, ReplicaError> {
        let root = self.table_dir(t).join(SNAPSHOTS_DIR);
        let tags: Vec<String> = match tag {
            Some(tag) => vec![tag.to_owned()],
            None => self.list_snapshots(t)?.into_iter().map(|s| s.tag).collect(),
        };
        let mut removed = 0;
        for tag in tags {
            let dir = root.join(&tag);
            match fs::remove_dir_all(&dir) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&dir)(e)),
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::valid_tag;

    #[test]
    fn tags_are_plain_names() {
        assert!(valid_tag("before-upgrade_1.2"));
        assert!(!valid_tag(""));
        assert!(!valid_tag(".."));
        assert!(!valid_tag("a/b"));
        assert!(!valid_tag("a b"));
    }
}
