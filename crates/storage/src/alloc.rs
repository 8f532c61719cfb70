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
    /// Refreshes the figures [`Self::usage`], [`Self::trim_kept_pages`] and
    /// [`Self::kept_pages`] read, which are those of the last refresh (jemalloc's
    /// `epoch`: a merge of every arena's statistics, about a million instructions with
    /// this binary's arenas, so one refresh serves a whole round of reads). False when
    /// the allocator cannot.
    pub refresh: fn() -> bool,
    /// The figures as of the last [`Self::refresh`], `None` when unavailable.
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
    /// Returns to the OS what [`kept_pages_excess`] says the calling thread's arena keeps
    /// beyond `cap` and `resident_limit`, and keeps the rest; the bytes returned (0 when
    /// nothing is in excess), `None` when the allocator cannot tell. Bounds what
    /// `keep_pages_on_this_thread` keeps. Decides on the figures of the last
    /// [`Self::refresh`].
    pub trim_kept_pages: fn(cap: u64, resident_limit: Option<u64>) -> Option<u64>,
    /// The calling thread's arena, for [`Self::kept_pages`] and [`Self::prefault`] from
    /// other threads; `None` when the allocator cannot tell.
    pub this_threads_arena: fn() -> Option<u32>,
    /// What an arena keeps, and the allocator's resident memory, as of the last
    /// [`Self::refresh`].
    pub kept_pages: fn(arena: u32) -> Option<KeptPages>,
    /// Faults about `bytes` of fresh memory in on the calling thread and hands it to
    /// `arena`, which keeps it for its own thread's next allocations; returns the bytes
    /// faulted. A shard's memtable growing into memory never touched before cost the
    /// shard thread 6-7 ms per 2 MiB page on this project's VMs (the host backs a page
    /// on its first touch); a background thread doing it ahead takes that off the
    /// shard ([`PREFAULT_RESERVE`]).
    pub prefault: fn(arena: u32, bytes: u64) -> u64,
}

/// An arena's kept (freed, still resident) pages and the allocator's resident memory, in
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptPages {
    pub kept: u64,
    pub resident: u64,
}

/// Kept pages a shard's arena is topped up to by faulting memory in off the shard
/// ([`AllocatorHooks::prefault`]): a few seconds of a memtable's growth at a moderate
/// write rate. Only while the allocator's resident memory stays this much below the
/// resident limit as well, so the reserve never pushes it over (where kept pages are
/// returned to the OS).
pub const PREFAULT_RESERVE: u64 = 16 << 20;

/// How much memory to fault in for an arena keeping `k.kept` bytes, with the allocator
/// resident at `k.resident` under `resident_limit`: enough to bring the kept pages to
/// [`PREFAULT_RESERVE`], within the room below the limit less a reserve's margin; 0 when
/// that is under 2 MiB (a huge page).
pub fn prefault_wanted(k: KeptPages, resident_limit: Option<u64>) -> u64 {
    let room = resident_limit.map_or(u64::MAX, |l| {
        l.saturating_sub(k.resident)
            .saturating_sub(PREFAULT_RESERVE)
    });
    let want = PREFAULT_RESERVE.saturating_sub(k.kept).min(room);
    if want < 2 << 20 { 0 } else { want }
}

/// Kept pages below this are not returned for being over the resident limit (a purge of
/// a few pages every check would cost syscalls and save nothing); past the limit, this
/// much more than the overshoot is returned.
pub const KEPT_PAGES_MIN_TRIM: u64 = 8 << 20;

/// How much of an arena's kept pages `k.kept` to return to the OS: down to fifteen
/// sixteenths of `cap` when they are over it, and the allocator's overshoot of
/// `resident_limit` plus [`KEPT_PAGES_MIN_TRIM`] while it is over the limit (once at
/// least that much is kept); the larger, at most all of them. The rest stays for the
/// next memtable: returning all of them, as the first version did, made the memtable
/// after a purge fault ~256 MB back in (~2.5 ms per MB on this project's VMs, where the
/// host takes returned pages back).
pub fn kept_pages_excess(k: KeptPages, cap: u64, resident_limit: Option<u64>) -> u64 {
    let over_cap = if k.kept > cap {
        k.kept - (cap - cap / 16)
    } else {
        0
    };
    let over_limit = match resident_limit {
        Some(limit) if k.resident > limit && k.kept >= KEPT_PAGES_MIN_TRIM => {
            k.resident - limit + KEPT_PAGES_MIN_TRIM
        }
        _ => 0,
    };
    over_cap.max(over_limit).min(k.kept)
}

/// What an allocation of `n` bytes takes: jemalloc's size class (8, multiples of 16 up to
/// 128, then four classes per doubling), the binary's allocator. glibc's chunks (`n` + 8
/// rounded up to 16, at least 32) can be up to 16 bytes larger for small sizes, so a build
/// with the system allocator under-accounts a little. The caches and memtables account
/// their memory with it (their budgets are what the allocator gives them).
pub const fn alloc_size(n: usize) -> usize {
    match n {
        0 => 0,
        1..=8 => 8,
        9..=128 => n.next_multiple_of(16),
        _ => {
            let below = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            n.next_multiple_of(below / 4)
        }
    }
}

/// What a vector's buffer takes.
pub fn vec_bytes<T>(v: &Vec<T>) -> usize {
    alloc_size(v.capacity() * std::mem::size_of::<T>())
}

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
    fn the_prefault_tops_the_kept_pages_up_within_the_resident_limit() {
        let mb = 1u64 << 20;
        let k = |kept, resident| KeptPages { kept, resident };
        // Nothing kept, far below the limit: the whole reserve.
        assert_eq!(
            prefault_wanted(k(0, 500 * mb), Some(2000 * mb)),
            PREFAULT_RESERVE
        );
        assert_eq!(prefault_wanted(k(0, 500 * mb), None), PREFAULT_RESERVE);
        // Part kept: the rest of it.
        assert_eq!(
            prefault_wanted(k(10 * mb, 0), None),
            PREFAULT_RESERVE - 10 * mb
        );
        // Less than a huge page missing: nothing.
        assert_eq!(prefault_wanted(k(PREFAULT_RESERVE - mb, 0), None), 0);
        assert_eq!(prefault_wanted(k(PREFAULT_RESERVE, 0), None), 0);
        // Near the limit: only the room left below it less a reserve's margin.
        let limit = 2000 * mb;
        let near = limit - PREFAULT_RESERVE - 4 * mb;
        assert_eq!(prefault_wanted(k(0, near), Some(limit)), 4 * mb);
        assert_eq!(
            prefault_wanted(k(0, limit - PREFAULT_RESERVE), Some(limit)),
            0
        );
        assert_eq!(prefault_wanted(k(0, limit + mb), Some(limit)), 0);
    }

    #[test]
    fn only_the_kept_pages_beyond_the_cap_or_the_resident_limit_go_back() {
        let mb = 1u64 << 20;
        let k = |kept, resident| KeptPages { kept, resident };
        let cap = 512 * mb;
        // Within both: nothing.
        assert_eq!(
            kept_pages_excess(k(cap, 1000 * mb), cap, Some(2000 * mb)),
            0
        );
        assert_eq!(kept_pages_excess(k(cap, 1000 * mb), cap, None), 0);
        // Over the cap: down to fifteen sixteenths of it.
        assert_eq!(
            kept_pages_excess(k(581 * mb, 1000 * mb), cap, Some(2000 * mb)),
            581 * mb - 480 * mb
        );
        // Over the limit: the overshoot and a margin.
        assert_eq!(
            kept_pages_excess(k(300 * mb, 2010 * mb), cap, Some(2000 * mb)),
            10 * mb + KEPT_PAGES_MIN_TRIM
        );
        // Both: the larger.
        assert_eq!(
            kept_pages_excess(k(600 * mb, 2300 * mb), cap, Some(2000 * mb)),
            300 * mb + KEPT_PAGES_MIN_TRIM
        );
        // Never more than is kept; too little kept to bother while over the limit.
        assert_eq!(
            kept_pages_excess(k(100 * mb, 3000 * mb), cap, Some(2000 * mb)),
            100 * mb
        );
        assert_eq!(
            kept_pages_excess(k(KEPT_PAGES_MIN_TRIM - 1, 3000 * mb), cap, Some(2000 * mb)),
            0
        );
    }

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
