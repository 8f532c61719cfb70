//! [`Rows`]: the clustering rows of one partition in a read result, either owned or a
//! shared run of a row cache entry.
//!
//! A row cache hit on a partition whose cached rows are already in their live form (no
//! tombstones, no row deletions, nothing expired at the read's `now`) and that no memtable
//! overlaps returns the entry's rows themselves: one reference count instead of a copy of
//! every row, cell vector and value. Readers see a `[Row]` either way (`Deref`).
//!
//! PERF-CRITICAL: built and dropped on every point read.

use std::ops::{Deref, Range};
use std::sync::Arc;

use amphora_types::data::Row;

use crate::rowcache::CachedPartition;

/// The rows of a [`crate::PartitionData`], in result order.
#[derive(Clone)]
pub struct Rows(Repr);

#[derive(Clone)]
enum Repr {
    Owned(Vec<Row>),
    /// `rows[range]` of a cached partition (never modified once shared).
    Shared {
        entry: Arc<CachedPartition>,
        range: Range<usize>,
    },
}

impl Rows {
    /// No rows.
    pub const fn new() -> Self {
        Rows(Repr::Owned(Vec::new()))
    }

    /// The decoded entry's `rows[range]`, shared with the cache; None if the entry is held
    /// encoded or `range` is not within its rows.
    pub(crate) fn shared(entry: &Arc<CachedPartition>, range: Range<usize>) -> Option<Self> {
        entry.decoded()?.rows.get(range.clone())?;
        Some(Rows(Repr::Shared {
            entry: entry.clone(),
            range,
        }))
    }

    /// The rows as a vector of their own (copied if shared).
    pub fn into_vec(self) -> Vec<Row> {
        match self.0 {
            Repr::Owned(v) => v,
            Repr::Shared { .. } => self.to_vec(),
        }
    }

    /// Whether these rows are shared with the row cache (not copied).
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Repr::Shared { .. })
    }
}

impl Default for Rows {
    fn default() -> Self {
        Rows::new()
    }
}

impl Deref for Rows {
    type Target = [Row];
    #[inline]
    fn deref(&self) -> &[Row] {
        match &self.0 {
            Repr::Owned(v) => v,
            // Checked when made (`Rows::shared`), and the entry never changes.
            Repr::Shared { entry, range } => entry
                .decoded()
                .and_then(|d| d.rows.get(range.clone()))
                .unwrap_or_default(),
        }
    }
}

impl From<Vec<Row>> for Rows {
    fn from(v: Vec<Row>) -> Self {
        Rows(Repr::Owned(v))
    }
}

impl From<Rows> for Vec<Row> {
    fn from(r: Rows) -> Self {
        r.into_vec()
    }
}

impl FromIterator<Row> for Rows {
    fn from_iter<I: IntoIterator<Item = Row>>(iter: I) -> Self {
        Rows(Repr::Owned(iter.into_iter().collect()))
    }
}

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Rows {
    fn eq(&self, other: &Rows) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<Row>> for Rows {
    fn eq(&self, other: &Vec<Row>) -> bool {
        **self == **other
    }
}

impl<'a> IntoIterator for &'a Rows {
    type Item = &'a Row;
    type IntoIter = std::slice::Iter<'a, Row>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl IntoIterator for Rows {
    type Item = Row;
    type IntoIter = std::vec::IntoIter<Row>;
    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::data::{Clustering, PartitionUpdate};
    use bytes::Bytes;

    fn row(c: u8) -> Row {
        Row::new(Clustering(vec![Bytes::from(vec![c])]))
    }

    #[test]
    fn shared_rows_read_like_owned_ones() {
        let entry = Arc::new(CachedPartition::new(PartitionUpdate {
            rows: (0..5).map(row).collect(),
            ..Default::default()
        }));
        let shared = Rows::shared(&entry, 1..4).expect("in range");
        assert!(shared.is_shared());
        let owned: Rows = (1..4).map(row).collect();
        assert!(!owned.is_shared());
        assert_eq!(shared, owned);
        assert_eq!(shared, (1..4).map(row).collect::<Vec<_>>());
        assert_eq!(shared.len(), 3);
        assert_eq!(shared.first(), Some(&row(1)));
        assert_eq!(format!("{shared:?}"), format!("{owned:?}"));
        assert_eq!((&shared).into_iter().count(), 3);
        assert_eq!(shared.clone().into_vec(), owned.clone().into_vec());
        // The entry itself is untouched by what is done with the copies.
        let mut v = shared.clone().into_vec();
        v.clear();
        assert_eq!(entry.decoded().map(|d| d.rows.len()), Some(5));
        assert_eq!(shared.len(), 3);
        assert!(Rows::shared(&entry, 3..6).is_none());
        assert!(Rows::shared(&entry, 5..5).is_some_and(|r| r.is_empty()));
    }
}
