//! Hooks into the process's memory allocator, registered once by the binary (jemalloc;
//! a build with the system allocator registers none and nothing here does anything).
//!
//! The row cache uses them to undo fragmentation: when its entries are evicted at random
//! (say a workload's small partitions give way to another's wide ones), the allocator's
//! slabs of their size classes stay partly used, and that memory serves no other size.
//! When the allocator's active pages pass its live allocations by a margin
//! ([`fragmented`]), the shard moves cached entries that sit in slabs emptier than their
//! size class's average ([`AllocatorHooks::should_move`]) into new allocations, which
//! fill the fuller slabs; the emptied slabs go back to the allocator for any size.

use std::sync::OnceLock;

/// Process-wide allocator figures, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorUsage {
    /// Live allocations.
    pub allocated: u64,
    /// Pages holding live allocations (allocated plus size-class and slab slack).
    pub active: u64,
}

/// What the binary's allocator tells the storage engine.
#[derive(Debug, Clone, Copy)]
pub struct AllocatorHooks {
    /// Current figures (refreshed by the call), `None` when unavailable.
    pub usage: fn() -> Option<AllocatorUsage>,
    /// Whether the allocation holding this address sits in a slab used less than the
    /// other slabs of its size class (in its arena) on average, and is not the slab
    /// being filled: moving it helps free that slab.
    ///
    /// # Safety
    /// The address must lie inside a live allocation of the global allocator (jemalloc's
    /// lookup of an address it never mapped dereferences a null page table leaf).
    pub should_move: unsafe fn(*const u8) -> bool,
    /// Returns the calling thread's cached free regions to their slabs, so the next
    /// allocations come from the slabs the allocator fills first, not from the places
    /// entries just left (jemalloc's `thread.tcache.flush`).
    pub flush_thread_cache: fn(),
    /// Gives the calling thread an arena of its own that keeps the pages freed in it
    /// instead of returning them to the OS after a while, so a memtable that follows a
    /// flushed one reuses its pages rather than faulting fresh ones in (on a VM a 2 MiB
    /// page's first touch can take milliseconds). Called once by each shard thread unless
    /// `AMPHORA_SHARD_KEEP_PAGES=0`; other threads keep the allocator's default. What is
    /// kept is bounded by [`Self::trim_kept_pages`].
    pub keep_pages_on_this_thread: fn(),
    /// When the calling thread's arena holds more than `cap` bytes of freed pages, or
    /// holds some (at least [`KEPT_PAGES_MIN_TRIM`]) while the allocator's resident memory
    /// (all arenas) is above `resident_limit` (if any), returns them all to the OS; the bytes
    /// returned (0 when neither holds), `None` when the allocator cannot tell. Bounds
    /// what `keep_pages_on_this_thread` keeps.
    pub trim_kept_pages: fn(cap: u64, resident_limit: Option<u64>) -> Option<u64>,
}

/// Kept pages below this are not returned for being over the resident limit (a purge of
/// a few pages every check would cost syscalls and save nothing).
pub const KEPT_PAGES_MIN_TRIM: u64 = 8 << 20;

static HOOKS: OnceLock<AllocatorHooks> = OnceLock::new();

/// Registers the allocator's hooks; only the first registration counts.
pub fn set_hooks(hooks: AllocatorHooks) {
    let _ = HOOKS.set(hooks);
}

/// The registered hooks, if any.
pub fn hooks() -> Option<&'static AllocatorHooks> {
    HOOKS.get()
}

/// Whether `u` shows enough slack to start defragmenting: active pages more than a
/// sixteenth (and at least 64 MiB) above live allocations.
pub fn fragmented(u: AllocatorUsage) -> bool {
    u.active > u.allocated + (u.allocated / 16).max(64 << 20)
}

/// Whether defragmenting goes on: the slack is still above half the starting threshold
/// (a thirty-second of live allocations, at least 32 MiB), so slack hovering near the
/// threshold does not start and stop it over and over.
pub fn still_fragmented(u: AllocatorUsage) -> bool {
    u.active > u.allocated + (u.allocated / 32).max(32 << 20)
}

/// Pages in use beyond live allocations.
pub fn slack(u: AllocatorUsage) -> u64 {
    u.active.saturating_sub(u.allocated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_above_a_sixteenth_and_64_mib_is_fragmentation() {
        let gb = 1u64 << 30;
        let u = |allocated, active| AllocatorUsage { allocated, active };
        assert!(!fragmented(u(gb, gb)));
        assert!(!fragmented(u(gb, gb + gb / 16)));
        assert!(fragmented(u(gb, gb + gb / 16 + 1)));
        // Small heaps: 64 MiB of slack at least.
        assert!(!fragmented(u(100 << 20, 160 << 20)));
        assert!(fragmented(u(100 << 20, 165 << 20)));
        // Once started, it goes on down to half the threshold.
        assert!(still_fragmented(u(gb, gb + gb / 20)));
        assert!(!still_fragmented(u(gb, gb + gb / 32)));
        assert_eq!(slack(u(gb, gb + 5)), 5);
        assert_eq!(slack(u(gb, gb - 5)), 0);
    }
}
