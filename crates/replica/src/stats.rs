//! Per-table read/write counters and latency histograms of one shard (nodetool tablestats,
//! tablehistograms, /metrics). Plain integers owned by the shard: no atomics, no locks.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use amphora_types::schema::TableId;

/// Hashes a `TableId` (a random UUID) by folding its 128 bits: the per-table counters are
/// looked up on every read and write, and SipHash is not needed against our own ids.
#[derive(Default)]
pub struct TableIdHasher(u64);

impl Hasher for TableIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `TableId` (it hashes one u128); FNV-1a for anything else.
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 ^= (v as u64) ^ ((v >> 64) as u64);
    }
}

/// Per-table counters of one shard.
pub type TableCounterMap = HashMap<TableId, TableCounters, BuildHasherDefault<TableIdHasher>>;

/// Buckets of a [`Histogram`]: Cassandra's `EstimatedHistogram` offsets (1, 2, 3, … each
/// about 1.2× the previous), so percentiles read like Cassandra's.
pub const HISTOGRAM_BUCKETS: usize = 90;

/// Upper bound (inclusive) of each bucket; values above the last land in the last bucket.
pub fn bucket_offsets() -> &'static [u64; HISTOGRAM_BUCKETS] {
    static OFFSETS: OnceLock<[u64; HISTOGRAM_BUCKETS]> = OnceLock::new();
    OFFSETS.get_or_init(|| {
        let mut o = [0u64; HISTOGRAM_BUCKETS];
        let mut last = 1u64;
        for slot in o.iter_mut() {
            *slot = last;
            let next = (last as f64 * 1.2).round() as u64;
            last = if next > last { next } else { last + 1 };
        }
        o
    })
}

/// A fixed-bucket histogram (values in µs for latencies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    pub buckets: [u64; HISTOGRAM_BUCKETS],
    pub count: u64,
    pub sum: u64,
    pub max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: [0; HISTOGRAM_BUCKETS],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        let offsets = bucket_offsets();
        let i = offsets
            .partition_point(|o| *o < value)
            .min(HISTOGRAM_BUCKETS - 1);
        if let Some(b) = self.buckets.get_mut(i) {
            *b += 1;
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
        self.max = self.max.max(value);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    /// The bucket upper bound at or below which `p` (0..=1) of the values fall; 0 when empty.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((self.count as f64) * p).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target {
                // The last bucket is open-ended: report the largest value seen.
                return if i == HISTOGRAM_BUCKETS - 1 {
                    self.max
                } else {
                    bucket_offsets()[i].min(self.max)
                };
            }
        }
        self.max
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

/// One table's counters on one shard (local reads and writes, as Cassandra's
/// `Local read/write count` and latencies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableCounters {
    pub reads: u64,
    pub writes: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    /// µs per local read.
    pub read_latency: Histogram,
    /// µs per local write, until it is durable per the commitlog sync mode.
    pub write_latency: Histogram,
}

impl TableCounters {
    pub fn merge(&mut self, o: &TableCounters) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.read_errors += o.read_errors;
        self.write_errors += o.write_errors;
        self.read_latency.merge(&o.read_latency);
        self.write_latency.merge(&o.write_latency);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ids_hash_by_folding() {
        let mut m = TableCounterMap::default();
        m.entry(TableId(1 << 70 | 5)).or_default().writes += 1;
        m.entry(TableId(7)).or_default().writes += 2;
        m.entry(TableId(1 << 70 | 5)).or_default().writes += 1;
        assert_eq!(m.get(&TableId(1 << 70 | 5)).map(|c| c.writes), Some(2));
        assert_eq!(m.get(&TableId(7)).map(|c| c.writes), Some(2));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn offsets_grow_like_cassandra() {
        let o = bucket_offsets();
        assert_eq!(&o[..10], &[1, 2, 3, 4, 5, 6, 7, 8, 10, 12]);
        assert!(o.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn percentiles_follow_the_values() {
        let mut h = Histogram::default();
        for v in 1..=100u64 {
            h.record(v);
        }
        assert_eq!(h.count, 100);
        assert_eq!(h.max, 100);
        let p50 = h.percentile(0.5);
        assert!((50..=60).contains(&p50), "p50 {p50}");
        assert_eq!(h.percentile(1.0), 100);
        assert!(h.percentile(0.99) >= 99);
        let mut other = Histogram::default();
        other.record(5_000);
        h.merge(&other);
        assert_eq!(h.max, 5_000);
        assert_eq!(h.percentile(1.0), 5_000);
        assert_eq!(Histogram::default().percentile(0.5), 0);
    }
}
