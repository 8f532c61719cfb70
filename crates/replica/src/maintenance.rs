//! This shard's part of the node's maintenance operations (nodetool garbagecollect,
//! cleanup, scrub, refresh, toppartitions, tablehistograms): the REST layer calls these
//! on every shard (`submit_to_all`) and adds up the answers.

use std::path::PathBuf;
use std::sync::Arc;

use amphora_storage::maintenance::{
    self, Granularity, MaintenanceReport, Owns, Progress, SSTableHistograms,
};
use amphora_types::schema::TableSchema;
use amphora_types::token::shard_of;

use crate::toppartitions::{Sampler, SamplerKinds, TopKeys};
use crate::{ReplicaError, ShardDb};

/// How tokens map to shards on this node (`nr_shards`, ScyllaDB's `ignore_msb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharding {
    pub nr_shards: u32,
    pub ignore_msb: u32,
}

impl ShardDb {
    /// Whether this shard owns a token.
    pub fn owner_filter(&self, sharding: Sharding) -> Owns {
        let me = self.shard();
        Arc::new(move |token| shard_of(token, sharding.nr_shards, sharding.ignore_msb) == me)
    }

    pub async fn garbage_collect(
        &self,
        t: &TableSchema,
        granularity: Granularity,
        progress: Progress<'_>,
    ) -> Result<MaintenanceReport, ReplicaError> {
        Ok(maintenance::garbage_collect(self.storage(), t.id, granularity, progress).await?)
    }

    /// Drops the partitions of other shards from this shard's SSTables (on one node the
    /// node owns every token; a partition in the wrong shard can only come from files
    /// placed by hand).
    pub async fn cleanup(
        &self,
        t: &TableSchema,
        sharding: Sharding,
        progress: Progress<'_>,
    ) -> Result<MaintenanceReport, ReplicaError> {
        let owns = self.owner_filter(sharding);
        Ok(maintenance::cleanup(self.storage(), t.id, owns, progress).await?)
    }

    pub async fn scrub(
        &self,
        t: &TableSchema,
        skip_corrupted: bool,
        progress: Progress<'_>,
    ) -> Result<MaintenanceReport, ReplicaError> {
        Ok(maintenance::scrub(self.storage(), t.id, skip_corrupted, progress).await?)
    }

    /// This shard's `upload/` directory of the table and the SSTables in it.
    pub fn upload_dir(&self, t: &TableSchema) -> Result<(PathBuf, Vec<u64>), ReplicaError> {
        let dir = self.table_dir(t).join(maintenance::UPLOAD_DIR);
        let gens = maintenance::upload_generations(&dir)?;
        Ok((dir, gens))
    }

    /// Loads the partitions this shard owns from the uploaded SSTables.
    pub async fn refresh(
        &self,
        t: &TableSchema,
        uploads: Vec<(PathBuf, Vec<u64>)>,
        sharding: Sharding,
    ) -> Result<MaintenanceReport, ReplicaError> {
        let owns = self.owner_filter(sharding);
        Ok(maintenance::refresh(self.storage(), t.id, uploads, owns).await?)
    }

    pub fn sstable_histograms(&self, t: &TableSchema) -> SSTableHistograms {
        maintenance::sstable_histograms(self.storage(), t.id)
    }

    /// Starts sampling one table's partition keys on this shard; fails if a sampler is
    /// already running here.
    pub fn start_sampling(
        &self,
        t: &TableSchema,
        capacity: usize,
        kinds: SamplerKinds,
    ) -> Result<(), ReplicaError> {
        let mut s = self.sampler.borrow_mut();
        if s.is_some() {
            return Err(ReplicaError::Busy(
                "a toppartitions sampler is already running".into(),
            ));
        }
        *s = Some(Sampler::new(t.id, capacity, kinds));
        self.sampling.set(true);
        Ok(())
    }

    /// Stops the sampler; returns what it counted (reads, writes).
    pub fn stop_sampling(&self) -> Option<(TopKeys, TopKeys)> {
        self.sampling.set(false);
        self.sampler
            .borrow_mut()
            .take()
            .map(|s| (s.reads.result(), s.writes.result()))
    }
}
