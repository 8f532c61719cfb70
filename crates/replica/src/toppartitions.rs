//! `nodetool toppartitions`: a per-shard sampler of the partition keys one table reads
//! and writes for a while. Off by default; when off, the read and write paths pay one
//! branch on a `Cell<bool>`.
//!
//! Counting is the Space-Saving algorithm (Metwally et al.; Cassandra's sampler uses the
//! same idea): at most `capacity` keys are tracked; a new key arriving when the table is
//! full replaces the key with the smallest count and inherits that count as its error
//! bound, so every reported count is an upper bound and `count - error` a lower one.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};

use amphora_types::schema::TableId;
use bytes::Bytes;

/// Most keys a sampler tracks per shard and kind (Cassandra's `-s` maximum is 1024).
pub const MAX_CAPACITY: usize = 1024;
/// Distinct keys remembered for the cardinality (beyond it the cardinality is a floor).
pub const MAX_CARDINALITY_TRACKED: usize = 1 << 17;

/// Which operations a sampler counts (Cassandra's `-a READS,WRITES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerKinds {
    pub reads: bool,
    pub writes: bool,
}

/// One kind's counts.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    counts: HashMap<Bytes, (u64, u64)>,
    distinct: HashSet<u64>,
    hasher: RandomState,
}

impl SpaceSaving {
    pub fn new(capacity: usize) -> Self {
        SpaceSaving {
            capacity: capacity.clamp(1, MAX_CAPACITY),
            counts: HashMap::new(),
            distinct: HashSet::new(),
            hasher: RandomState::new(),
        }
    }

    pub fn offer(&mut self, key: &Bytes) {
        if self.distinct.len() < MAX_CARDINALITY_TRACKED {
            self.distinct.insert(self.hasher.hash_one(key));
        }
        if let Some(c) = self.counts.get_mut(key) {
            c.0 += 1;
            return;
        }
        if self.counts.len() < self.capacity {
            self.counts.insert(key.clone(), (1, 0));
            return;
        }
        // Evicts the smallest count (O(capacity), capacity <= 1024: sampling only).
        let victim = self
            .counts
            .iter()
            .min_by_key(|(_, (n, _))| *n)
            .map(|(k, (n, _))| (k.clone(), *n));
        if let Some((k, n)) = victim {
            self.counts.remove(&k);
            self.counts.insert(key.clone(), (n + 1, n));
        }
    }

    pub fn result(&self) -> TopKeys {
        let mut top: Vec<(Bytes, u64, u64)> = self
            .counts
            .iter()
            .map(|(k, (n, e))| (k.clone(), *n, *e))
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        TopKeys {
            cardinality: self.distinct.len() as u64,
            top,
        }
    }
}

/// What a sampler saw of one kind: distinct keys and (key, count, error) by count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopKeys {
    pub cardinality: u64,
    pub top: Vec<(Bytes, u64, u64)>,
}

/// A running sampler of one table on one shard.
#[derive(Debug, Clone)]
pub struct Sampler {
    pub table: TableId,
    pub kinds: SamplerKinds,
    pub reads: SpaceSaving,
    pub writes: SpaceSaving,
}

impl Sampler {
    pub fn new(table: TableId, capacity: usize, kinds: SamplerKinds) -> Self {
        Sampler {
            table,
            kinds,
            reads: SpaceSaving::new(capacity),
            writes: SpaceSaving::new(capacity),
        }
    }

    pub fn record_read(&mut self, table: TableId, key: &Bytes) {
        if self.kinds.reads && table == self.table {
            self.reads.offer(key);
        }
    }

    pub fn record_write(&mut self, table: TableId, key: &Bytes) {
        if self.kinds.writes && table == self.table {
            self.writes.offer(key);
        }
    }
}

/// Merges shards' results (a partition is sampled on the shard owning it, so keys rarely
/// repeat across shards; when they do, counts and errors add up) and keeps `list_size`.
pub fn merge(parts: &[TopKeys], list_size: usize) -> TopKeys {
    let mut all: HashMap<Bytes, (u64, u64)> = HashMap::new();
    let mut cardinality = 0;
    for p in parts {
        cardinality += p.cardinality;
        for (k, n, e) in &p.top {
            let c = all.entry(k.clone()).or_default();
            c.0 += n;
            c.1 += e;
        }
    }
    let mut top: Vec<(Bytes, u64, u64)> = all.into_iter().map(|(k, (n, e))| (k, n, e)).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(list_size);
    TopKeys { cardinality, top }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn exact_under_capacity() {
        let mut s = SpaceSaving::new(10);
        for _ in 0..5 {
            s.offer(&b("hot"));
        }
        s.offer(&b("cold"));
        let r = s.result();
        assert_eq!(r.cardinality, 2);
        assert_eq!(r.top[0], (b("hot"), 5, 0));
        assert_eq!(r.top[1], (b("cold"), 1, 0));
    }

    #[test]
    fn hot_key_survives_eviction_with_bounded_error() {
        let mut s = SpaceSaving::new(4);
        for i in 0..100 {
            s.offer(&b("hot"));
            s.offer(&b(&format!("k{i}")));
        }
        let r = s.result();
        assert_eq!(r.top[0].0, b("hot"));
        assert_eq!(r.top[0].1, 100);
        assert_eq!(r.cardinality, 101);
        // Evicted keys' replacements carry the evicted count as their error.
        assert!(r.top.iter().skip(1).all(|(_, n, e)| e < n));
    }

    #[test]
    fn merge_adds_and_truncates() {
        let a = TopKeys {
            cardinality: 2,
            top: vec![(b("x"), 3, 0), (b("y"), 1, 0)],
        };
        let c = TopKeys {
            cardinality: 1,
            top: vec![(b("z"), 2, 1)],
        };
        let m = merge(&[a, c], 2);
        assert_eq!(m.cardinality, 3);
        assert_eq!(m.top, vec![(b("x"), 3, 0), (b("z"), 2, 1)]);
    }
}
