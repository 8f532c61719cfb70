//! Long-running admin operations (major compaction, cleanup, scrub, garbagecollect) as tasks with an id, progress and a
//! state that can be polled or waited on (ScyllaDB's task manager shape), and the
//! compaction history the API itself ran.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// Finished tasks kept for `task_status` after they end.
pub const MAX_FINISHED_TASKS: usize = 100;
/// Entries kept in the compaction history.
pub const MAX_HISTORY: usize = 1000;

#[derive(Debug, Clone, Serialize)]
pub struct TaskStatus {
    pub id: String,
    /// `major_compaction`, `cleanup`, `scrub` or `garbage_collect`.
    pub kind: String,
    pub keyspace: String,
    pub tables: Vec<String>,
    /// `running`, `done` or `failed`.
    pub state: String,
    /// Bytes of the input SSTables (all shards) and how many of them were compacted.
    pub progress_total: u64,
    pub progress_completed: u64,
    pub progress_units: String,
    pub start_time_ms: u64,
    pub end_time_ms: Option<u64>,
    pub error: Option<String>,
    /// What the operation did, summed over shards (cleanup, scrub, garbagecollect).
    pub result: Option<serde_json::Value>,
}

impl TaskStatus {
    /// A task of `kind` over `tables` that starts now with `total` bytes to go, under a new id.
    pub fn running(
        kind: &str,
        keyspace: String,
        tables: &[std::sync::Arc<amphora_types::schema::TableSchema>],
        total: u64,
        start_time_ms: u64,
    ) -> TaskStatus {
        TaskStatus {
            id: uuid::Uuid::new_v4().to_string(),
            kind: kind.into(),
            keyspace,
            tables: tables
                .iter()
                .map(|t| format!("{}.{}", t.keyspace, t.name))
                .collect(),
            state: "running".into(),
            progress_total: total,
            progress_completed: 0,
            progress_units: "bytes".into(),
            start_time_ms,
            end_time_ms: None,
            error: None,
            result: None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state != "running"
    }
}

/// One compaction of one table on one shard.
#[derive(Debug, Clone, Serialize)]
pub struct CompactionRecord {
    pub id: String,
    pub keyspace: String,
    pub table: String,
    pub shard: u32,
    pub compacted_at_ms: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub sstables_in: u64,
    pub sstables_out: u64,
}

#[derive(Default)]
pub(crate) struct Jobs {
    pub tasks: BTreeMap<String, TaskStatus>,
    pub history: VecDeque<CompactionRecord>,
}

impl Jobs {
    pub fn insert(&mut self, t: TaskStatus) {
        self.tasks.insert(t.id.clone(), t);
        let finished: Vec<(u64, String)> = self
            .tasks
            .values()
            .filter(|t| t.is_done())
            .map(|t| (t.end_time_ms.unwrap_or(0), t.id.clone()))
            .collect();
        if finished.len() > MAX_FINISHED_TASKS {
            let mut finished = finished;
            finished.sort();
            for (_, id) in finished.iter().take(finished.len() - MAX_FINISHED_TASKS) {
                self.tasks.remove(id);
            }
        }
    }

    pub fn record(&mut self, r: CompactionRecord) {
        self.history.push_back(r);
        while self.history.len() > MAX_HISTORY {
            self.history.pop_front();
        }
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
