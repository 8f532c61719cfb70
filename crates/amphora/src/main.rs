//! The `amphora` binary: `amphora server` starts a node (more subcommands follow:
//! nodetool, stress, sstable).

use std::net::IpAddr;
use std::path::PathBuf;

use amphora_server::config::{CommitlogSync, NodeConfig, parse_size};
use std::io::Write as _;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// jemalloc, with its memory in transparent huge pages (options embedded at build time by
/// .cargo/config.toml; see docs/architecture.md, "Memory allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Advances jemalloc's `epoch`, which refreshes the statistics the functions below read.
#[cfg(feature = "jemalloc")]
fn jemalloc_refresh() -> bool {
    tikv_jemalloc_ctl::epoch::advance().is_ok()
}

/// jemalloc's live and active bytes as of the last [`jemalloc_refresh`], for the row
/// cache's defragmentation.
#[cfg(feature = "jemalloc")]
fn jemalloc_usage() -> Option<amphora_storage::alloc::AllocatorUsage> {
    use tikv_jemalloc_ctl::stats;
    Some(amphora_storage::alloc::AllocatorUsage {
        allocated: stats::allocated::read().ok()? as u64,
        active: stats::active::read().ok()? as u64,
    })
}

/// Whether the allocation holding `ptr` sits in a slab used less than the other slabs of
/// its size class in its arena on average, and not in the slab being filled: jemalloc's
/// `experimental.utilization.query` (5.3; the output layout is its
/// `inspect_extent_util_stats_verbose_t`, documented in its src/ctl.c).
///
/// # Safety
/// `ptr` must lie inside a live allocation of the global allocator: jemalloc's lookup of
/// an address it never mapped dereferences a null page table leaf.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
unsafe fn jemalloc_should_move(ptr: *const u8) -> bool {
    use std::ffi::c_void;
    use std::sync::OnceLock;
    #[repr(C)]
    struct Utilization {
        slabcur: *mut c_void,
        nfree: usize,
        nregs: usize,
        /// Of the whole slab (extent), not of a region.
        size: usize,
        bin_nfree: usize,
        bin_nregs: usize,
    }
    static MIB: OnceLock<Option<[usize; 3]>> = OnceLock::new();
    let mib = MIB.get_or_init(|| {
        let mut mib = [0usize; 3];
        let mut len = mib.len();
        // SAFETY: a NUL-terminated name, and `mib`/`len` describe a writable array of
        // `len` elements, as mallctlnametomib requires.
        let r = unsafe {
            tikv_jemalloc_sys::mallctlnametomib(
                c"experimental.utilization.query".as_ptr(),
                mib.as_mut_ptr(),
                &mut len,
            )
        };
        (r == 0 && len == mib.len()).then_some(mib)
    });
    let Some(mib) = mib else { return false };
    let mut out = Utilization {
        slabcur: std::ptr::null_mut(),
        nfree: 0,
        nregs: 0,
        size: 0,
        bin_nfree: 0,
        bin_nregs: 0,
    };
    let mut out_len = std::mem::size_of::<Utilization>();
    let mut input: *const c_void = ptr.cast();
    // SAFETY: `out`/`out_len` describe a writable `Utilization` (the size jemalloc checks
    // before writing), the input is one pointer as the query expects, and that pointer
    // lies in a live jemalloc allocation (this function's contract), so jemalloc finds
    // its extent.
    let r = unsafe {
        tikv_jemalloc_sys::mallctlbymib(
            mib.as_ptr(),
            mib.len(),
            (&mut out as *mut Utilization).cast(),
            &mut out_len,
            (&mut input as *mut *const c_void).cast(),
            std::mem::size_of::<*const c_void>(),
        )
    };
    // A large allocation (one region), a full slab, or a full bin (no slab being filled).
    if r != 0 || out.nregs <= 1 || out.nfree == 0 || out.slabcur.is_null() {
        return false;
    }
    // `size` is the slab's (extent's) size in bytes.
    let cur = out.slabcur as usize;
    if (cur..cur + out.size).contains(&(ptr as usize)) {
        return false;
    }
    // Emptier than the bin's average: (nregs - nfree) / nregs < (bin_nregs - bin_nfree) / bin_nregs.
    out.nfree * out.bin_nregs > out.bin_nfree * out.nregs
}

/// Binds the calling thread to a new jemalloc arena that never returns freed pages to the
/// OS (`arenas.create`; `arena.<i>.dirty_decay_ms` and `muzzy_decay_ms` = -1; then
/// `thread.arena`). On failure the thread keeps its arena and the reason is logged.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
fn jemalloc_keep_pages_on_this_thread() {
    use tikv_jemalloc_ctl::raw;
    // SAFETY: NUL-terminated control names, each read or written with the type jemalloc
    // documents for it: `unsigned` for arenas.create and thread.arena, `ssize_t` for the
    // decay times.
    let bind = || -> Result<u32, String> {
        let arena: u32 =
            unsafe { raw::read(b"arenas.create\0") }.map_err(|e| format!("arenas.create: {e}"))?;
        for what in ["dirty_decay_ms", "muzzy_decay_ms"] {
            let name = format!("arena.{arena}.{what}\0");
            unsafe { raw::write(name.as_bytes(), -1isize) }
                .map_err(|e| format!("arena.{arena}.{what}: {e}"))?;
        }
        unsafe { raw::write(b"thread.arena\0", arena) }
            .map_err(|e| format!("thread.arena: {e}"))?;
        Ok(arena)
    };
    match bind() {
        Ok(arena) => tracing::debug!(arena, "thread bound to an arena that keeps its pages"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot give this thread an arena that keeps its pages")
        }
    }
}

/// Returns to the OS what [`amphora_storage::alloc::kept_pages_excess`] says the calling
/// thread's arena keeps beyond `cap` and `resident_limit` (see
/// [`jemalloc_keep_pages_on_this_thread`]), and says how many bytes that was; `Some(0)`
/// when nothing is in excess, `None` when jemalloc's figures are unavailable. Decides on
/// the figures of the last [`jemalloc_refresh`].
///
/// jemalloc purges an arena whole (`arena.<i>.purge`), so the pages to keep are taken out
/// of it first: allocated from the arena in [`HOLD_CHUNK`] pieces, never touched (they
/// come from its freed extents, which it reuses before mapping new memory), and freed
/// again after the purge, when the arena keeps them anew. Freed extents smaller than a
/// piece cannot be held and go back with the excess.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
fn jemalloc_trim_kept_pages(cap: u64, resident_limit: Option<u64>) -> Option<u64> {
    use tikv_jemalloc_sys::{MALLOCX_ARENA, MALLOCX_TCACHE_NONE, dallocx, mallocx};
    let arena = jemalloc_this_threads_arena()?;
    let k = jemalloc_kept_pages(arena)?;
    let excess = amphora_storage::alloc::kept_pages_excess(k, cap, resident_limit);
    if excess == 0 {
        return Some(0);
    }
    let keep = usize::try_from(k.kept - excess).unwrap_or(usize::MAX);
    let flags = MALLOCX_ARENA(arena as usize) | MALLOCX_TCACHE_NONE;
    let mut held = Vec::with_capacity(keep / HOLD_CHUNK);
    for _ in 0..keep / HOLD_CHUNK {
        // SAFETY: a non-zero size and flags built with jemalloc's own constructors; the
        // memory is never read or written.
        let p = unsafe { mallocx(HOLD_CHUNK, flags) };
        if p.is_null() {
            break;
        }
        held.push(p);
    }
    // What is left of the kept pages is what the purge returns.
    let returned = if held.is_empty() {
        k.kept
    } else if jemalloc_refresh() {
        jemalloc_kept_pages(arena).map_or(excess, |left| left.kept)
    } else {
        excess
    };
    tracing::debug!(
        arena,
        kept = k.kept,
        resident = k.resident,
        excess,
        held = held.len() * HOLD_CHUNK,
        returned,
        "trimming the kept pages"
    );
    let purge = std::ffi::CString::new(format!("arena.{arena}.purge")).ok();
    let purged = purge.is_some_and(|p| jemalloc_run(&p));
    let refresh_again = !held.is_empty();
    for p in held {
        // SAFETY: `p` came from `mallocx` above and is freed once, without the thread
        // cache, so its pages go straight back to the arena.
        unsafe { dallocx(p, MALLOCX_TCACHE_NONE) };
    }
    // The figures read next (the prefault's, the defragmentation's) are those after the
    // trim, not those with the held pieces out.
    if refresh_again {
        jemalloc_refresh();
    }
    purged.then_some(returned)
}

/// The pieces [`jemalloc_trim_kept_pages`] holds the pages it keeps in: large enough that
/// holding 512 MiB takes 512 allocations, small enough to fit the extents a memtable's
/// 256 KiB chunks leave when freed together.
#[cfg(feature = "jemalloc")]
const HOLD_CHUNK: usize = 1 << 20;

/// The calling thread's jemalloc arena (`thread.arena`).
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
fn jemalloc_this_threads_arena() -> Option<u32> {
    // SAFETY: a NUL-terminated control name read with the type jemalloc documents for it
    // (`unsigned`).
    unsafe { tikv_jemalloc_ctl::raw::read(b"thread.arena\0") }.ok()
}

/// Freed pages arena `arena` keeps (`stats.arenas.<i>.pdirty` pages) and jemalloc's
/// resident bytes (all arenas), in bytes; `None` when jemalloc cannot tell.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
fn jemalloc_kept_pages(arena: u32) -> Option<amphora_storage::alloc::KeptPages> {
    use tikv_jemalloc_ctl::raw;
    // As of the last epoch advance (`jemalloc_refresh`).
    // SAFETY: NUL-terminated control names read with the types jemalloc documents for
    // them: `size_t` for arenas.page and the page count.
    let page: usize = unsafe { raw::read(b"arenas.page\0") }.ok()?;
    let name = format!("stats.arenas.{arena}.pdirty\0");
    let pages: usize = unsafe { raw::read(name.as_bytes()) }.ok()?;
    Some(amphora_storage::alloc::KeptPages {
        kept: (pages as u64).saturating_mul(page as u64),
        resident: tikv_jemalloc_ctl::stats::resident::read().ok()? as u64,
    })
}

/// Faults about `bytes` of memory in for arena `arena` on the calling thread and hands it
/// back to that arena, which keeps it (see [`jemalloc_keep_pages_on_this_thread`]): 2 MiB
/// allocations, every 4 KiB page written, then all freed. Returns the bytes faulted. Not
/// aligned to 2 MiB: jemalloc makes an aligned allocation by trimming a larger one, and the
/// trimmed ends, never touched, went to the arena's freed pages too, where the shard's next
/// allocations found them first (and faulted them in itself).
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
fn jemalloc_prefault(arena: u32, bytes: u64) -> u64 {
    use tikv_jemalloc_sys::{MALLOCX_ARENA, MALLOCX_TCACHE_NONE, dallocx, mallocx};
    const CHUNK: usize = 2 << 20;
    let flags = MALLOCX_ARENA(arena as usize) | MALLOCX_TCACHE_NONE;
    let chunks = usize::try_from(bytes).unwrap_or(usize::MAX).div_ceil(CHUNK);
    let mut held = Vec::with_capacity(chunks);
    for _ in 0..chunks {
        // SAFETY: a non-zero size and flags built with jemalloc's own constructors.
        let p = unsafe { mallocx(CHUNK, flags) }.cast::<u8>();
        if p.is_null() {
            break;
        }
        for off in (0..CHUNK).step_by(4096) {
            // SAFETY: `off` < CHUNK, inside the allocation just made; a volatile write so
            // the touch is not optimised away.
            unsafe { p.add(off).write_volatile(0) };
        }
        held.push(p);
    }
    let faulted = (held.len() * CHUNK) as u64;
    for p in held {
        // SAFETY: `p` came from `mallocx` above and is freed once; freed without the
        // thread cache, so the pages go straight back to their arena.
        unsafe { dallocx(p.cast(), MALLOCX_TCACHE_NONE) };
    }
    faulted
}

/// Runs a jemalloc control that takes and returns nothing (`thread.tcache.flush`,
/// `arena.<i>.purge`); whether jemalloc accepted it.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
fn jemalloc_run(name: &std::ffi::CStr) -> bool {
    // SAFETY: a NUL-terminated name; the control takes and returns nothing, so every
    // pointer is null and every length 0.
    let r = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    r == 0
}

/// Returns the calling thread's jemalloc cache of free regions to their slabs
/// (`thread.tcache.flush`).
#[cfg(feature = "jemalloc")]
fn jemalloc_flush_thread_cache() {
    jemalloc_run(c"thread.tcache.flush");
}

/// jemalloc's process-wide figures for `/metrics` (`amphora_memory_allocator_*_bytes`).
#[cfg(feature = "jemalloc")]
fn jemalloc_stats() -> Vec<amphora_server::metrics::AllocatorStat> {
    use amphora_server::metrics::AllocatorStat;
    use tikv_jemalloc_ctl::{epoch, stats};
    // The figures are refreshed only when the epoch advances.
    if epoch::advance().is_err() {
        return Vec::new();
    }
    let stat = |name, help, v: tikv_jemalloc_ctl::Result<usize>| {
        v.ok().map(|b| AllocatorStat {
            name,
            help,
            bytes: b as u64,
        })
    };
    [
        stat(
            "allocated",
            "Bytes the process has allocated and not freed.",
            stats::allocated::read(),
        ),
        stat(
            "active",
            "Bytes in pages holding allocations (allocated plus size-class and slab slack).",
            stats::active::read(),
        ),
        stat(
            "metadata",
            "Bytes of the allocator's own metadata.",
            stats::metadata::read(),
        ),
        stat(
            "resident",
            "Bytes in physically resident pages the allocator maps (includes freed pages not yet returned).",
            stats::resident::read(),
        ),
        stat(
            "mapped",
            "Bytes in the allocator's active extents.",
            stats::mapped::read(),
        ),
        stat(
            "retained",
            "Bytes of virtual memory the allocator keeps mapped but returned to the OS.",
            stats::retained::read(),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[derive(Parser)]
#[command(
    name = "amphora",
    version,
    about = "Apache Cassandra-compatible database, shard-per-core"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Starts a node (defaults: 127.0.0.1:9042, data in ./data, one shard per core).
    Server(ServerArgs),
    /// Offline SSTable tools (the node may be stopped).
    #[command(subcommand)]
    Sstable(SstableCommand),
    /// cassandra-stress-compatible load generator (see docs/dev/stress.md).
    Stress {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Cassandra's nodetool over the node's REST API (-h host -p port; docs/dev/rest-api.md).
    #[command(disable_help_flag = true)]
    Nodetool {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum SstableCommand {
    /// Prints an SSTable as JSON (like sstabledump); FILE is any component of it.
    Dump { file: PathBuf },
    /// Checks every checksum of every SSTable and commitlog under DIR (a node's data dir,
    /// a shard's, or a table's); exits 1 on corruption.
    Validate { dir: PathBuf },
}

#[derive(clap::Args)]
struct ServerArgs {
    /// YAML config with cassandra.yaml / scylla.yaml key names.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address for CQL (and, later, inter-node) traffic.
    #[arg(long)]
    listen_address: Option<IpAddr>,
    #[arg(long)]
    native_transport_port: Option<u16>,
    #[arg(long)]
    native_shard_aware_transport_port: Option<u16>,
    #[arg(long)]
    api_port: Option<u16>,
    #[arg(long)]
    prometheus_port: Option<u16>,
    /// Number of shards (default: one per core).
    #[arg(long)]
    smp: Option<u32>,
    /// Memory for the node, e.g. 2G (default: most of RAM).
    #[arg(long)]
    memory: Option<String>,
    /// periodic (default), batch or group.
    #[arg(long, value_parser = parse_sync)]
    commitlog_sync: Option<CommitlogSync>,
    #[arg(long)]
    cluster_name: Option<String>,
    /// Do not pin shard threads to cores.
    #[arg(long)]
    no_pin: bool,
}

fn parse_sync(s: &str) -> Result<CommitlogSync, String> {
    s.parse()
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Logs go to stderr; client tools (stress, nodetool) only log warnings by default so
    // their own output stays readable.
    let default_level = match cli.command {
        Command::Server(_) => "info",
        _ => "warn",
    };
    amphora_server::logging::init(default_level);
    match cli.command {
        Command::Server(a) => {
            #[cfg(feature = "jemalloc")]
            {
                amphora_server::metrics::set_allocator_stats(jemalloc_stats);
                amphora_storage::alloc::set_hooks(amphora_storage::alloc::AllocatorHooks {
                    refresh: jemalloc_refresh,
                    usage: jemalloc_usage,
                    should_move: jemalloc_should_move,
                    flush_thread_cache: jemalloc_flush_thread_cache,
                    keep_pages_on_this_thread: jemalloc_keep_pages_on_this_thread,
                    trim_kept_pages: jemalloc_trim_kept_pages,
                    this_threads_arena: jemalloc_this_threads_arena,
                    kept_pages: jemalloc_kept_pages,
                    prefault: jemalloc_prefault,
                });
            }
            server(a)
        }
        Command::Sstable(c) => sstable(c),
        Command::Stress { args } => amphora_stress::run(args),
        Command::Nodetool { args } => std::process::exit(amphora_nodetool::run(
            &args,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        )),
    }
}

fn sstable(c: SstableCommand) -> anyhow::Result<()> {
    match c {
        SstableCommand::Dump { file } => {
            let json = amphora_storage::tools::dump_sstable(&file)
                .with_context(|| format!("dumping {}", file.display()))?;
            // A closed pipe (`| head`) ends the dump quietly.
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{json}") {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
        SstableCommand::Validate { dir } => {
            // A node's data dir holds one storage directory per shard.
            let mut roots: Vec<PathBuf> = std::fs::read_dir(&dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.is_dir()
                        && p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("shard-"))
                })
                .collect();
            if roots.is_empty() {
                roots.push(dir.clone());
            }
            roots.sort();
            let (mut ok, mut segments, mut errors) = (0, 0, 0);
            for root in &roots {
                let r = amphora_storage::tools::validate_dir(root);
                ok += r.sstables_ok;
                segments += r.segments;
                for e in &r.errors {
                    errors += 1;
                    eprintln!("CORRUPT: {e}");
                }
            }
            println!(
                "{ok} SSTables verified, {segments} commitlog segments checked, {errors} errors"
            );
            if errors > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

fn server(a: ServerArgs) -> anyhow::Result<()> {
    let mut cfg = NodeConfig::default();
    if let Some(p) = &a.config {
        cfg = cfg.load_file(p)?;
    }
    if let Some(v) = a.data_dir {
        cfg.data_dir = v;
    }
    if let Some(v) = a.listen_address {
        cfg.listen_address = v;
    }
    if let Some(v) = a.native_transport_port {
        cfg.native_port = v;
    }
    if let Some(v) = a.native_shard_aware_transport_port {
        cfg.shard_aware_port = v;
    }
    if let Some(v) = a.api_port {
        cfg.api_port = v;
    }
    if let Some(v) = a.prometheus_port {
        cfg.prometheus_port = Some(v);
    }
    if let Some(v) = a.smp {
        cfg.smp = v;
    }
    if let Some(v) = a.memory {
        cfg.memory_bytes = parse_size(&v)
            .map_err(anyhow::Error::msg)
            .context("--memory")?;
    }
    if let Some(v) = a.commitlog_sync {
        cfg.commitlog_sync = v;
    }
    if let Some(v) = a.cluster_name {
        cfg.cluster_name = v;
    }
    if a.no_pin {
        cfg.pin_shards = false;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let node = amphora_server::node::Node::start(cfg.clone())
            .await
            .context("starting the node")?;
        println!(
            "Amphora is up: CQL on {} (shard-aware {}), {} shard(s), data in {}, started in {} ms",
            node.native_addr,
            node.shard_aware_addr,
            node.nr_shards,
            cfg.data_dir.display(),
            node.startup_ms
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        }
        node.shutdown().await.context("shutting down")?;
        tracing::info!("shutdown complete");
        Ok(())
    })
}

#[cfg(all(test, feature = "jemalloc"))]
mod tests {
    use super::*;

    /// The utilization query answers (its layout matches jemalloc's), names allocations
    /// of a size class whose slabs were thinned, and never the slab being filled or a
    /// large allocation.
    #[test]
    fn jemalloc_names_allocations_in_thinned_slabs() {
        // A size class nothing else in the test uses much (224 bytes).
        let mut boxes: Vec<Option<Box<[u8; 220]>>> =
            (0..20_000).map(|_| Some(Box::new([7u8; 220]))).collect();
        // Thin the first half to one in eight, leave the second half full.
        for (i, b) in boxes.iter_mut().enumerate().take(10_000) {
            if i % 8 != 0 {
                *b = None;
            }
        }
        // SAFETY: every address is inside a live box.
        #[allow(unsafe_code)]
        let named = |range: std::ops::Range<usize>| {
            boxes[range]
                .iter()
                .flatten()
                .filter(|b| unsafe { jemalloc_should_move(b.as_ptr()) })
                .count()
        };
        // Freed regions cached by this thread go back to their slabs first.
        jemalloc_flush_thread_cache();
        let thinned = named(0..10_000);
        let full = named(10_000..20_000);
        assert!(thinned > 1_000, "thinned slabs: {thinned} of 1250 named");
        // Full slabs are never named; one slab (128 regions of 224 bytes) may straddle
        // the two halves.
        assert!(full <= 128, "{full} named in full slabs");
        let large = vec![0u8; 1 << 20];
        // SAFETY: inside a live vector.
        #[allow(unsafe_code)]
        let large_named = unsafe { jemalloc_should_move(large.as_ptr()) };
        assert!(!large_named);
        // This test holds 1,250 + 10,000 boxes of 224 bytes and the 1 MiB vector.
        assert!(jemalloc_refresh());
        let usage = jemalloc_usage().expect("jemalloc's stats");
        assert!(usage.active >= usage.allocated && usage.allocated > 3_500_000);
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_shard_threads_arena_keeps_its_pages() {
        use tikv_jemalloc_ctl::raw;
        let (before, after, dirty, muzzy, default_dirty) = std::thread::spawn(|| {
            // SAFETY: NUL-terminated names read with their documented types.
            let read_arena =
                || unsafe { raw::read::<u32>(b"thread.arena\0") }.expect("thread.arena");
            let before = read_arena();
            jemalloc_keep_pages_on_this_thread();
            let after = read_arena();
            let decay = |arena: u32, what: &str| {
                let name = format!("arena.{arena}.{what}\0");
                unsafe { raw::read::<isize>(name.as_bytes()) }.expect("decay")
            };
            let dirty = decay(after, "dirty_decay_ms");
            let muzzy = decay(after, "muzzy_decay_ms");
            (before, after, dirty, muzzy, decay(before, "dirty_decay_ms"))
        })
        .join()
        .expect("thread");
        assert_ne!(before, after, "the thread got a new arena");
        assert_eq!((dirty, muzzy), (-1, -1));
        assert!(
            default_dirty >= 0,
            "other arenas keep the default decay: {default_dirty}"
        );
    }

    /// Minor page faults of the calling thread so far (`/proc/thread-self/stat`).
    fn thread_minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
        let after_comm = stat.rsplit_once(')').expect("comm").1;
        // Fields after the command: state, ppid, pgrp, session, tty, tpgid, flags, minflt.
        after_comm
            .split_whitespace()
            .nth(7)
            .and_then(|f| f.parse().ok())
            .expect("minflt")
    }

    /// A thread with an arena that keeps its pages allocates 24 MiB in 256 KiB pieces (a
    /// memtable's chunk size) and writes them; returns its page faults meanwhile.
    /// With `prefault`, another thread first faults `PREFAULT_RESERVE` in for its arena.
    fn faults_of_allocating(prefault: bool) -> u64 {
        let (arena_tx, arena_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            jemalloc_keep_pages_on_this_thread();
            arena_tx
                .send(jemalloc_this_threads_arena().expect("arena"))
                .expect("send");
            go_rx.recv().expect("go");
            let mut held = Vec::with_capacity(96);
            let before = thread_minor_faults();
            for _ in 0..(24 << 20) / (256 << 10) {
                // Not `vec![0; n]`: jemalloc zeroes a recycled extent for a zeroed
                // allocation by handing its pages back to the OS, which faults them again
                // (the memtable's allocations are not zeroed).
                let mut v = Vec::<u8>::with_capacity(256 << 10);
                v.resize(256 << 10, 1);
                held.push(v);
            }
            let faults = thread_minor_faults() - before;
            drop(held);
            faults
        });
        let arena = arena_rx.recv().expect("arena");
        if prefault {
            let faulted = std::thread::spawn(move || {
                jemalloc_prefault(arena, 2 * amphora_storage::alloc::PREFAULT_RESERVE)
            })
            .join()
            .expect("prefault");
            assert_eq!(faulted, 2 * amphora_storage::alloc::PREFAULT_RESERVE);
            assert!(jemalloc_refresh());
            let kept = jemalloc_kept_pages(arena).expect("kept");
            assert!(kept.kept >= faulted, "{kept:?}");
        }
        go_tx.send(()).expect("go");
        t.join().expect("thread")
    }

    #[test]
    fn pages_faulted_in_for_an_arena_serve_its_threads_allocations_without_faults() {
        let cold = faults_of_allocating(false);
        let warm = faults_of_allocating(true);
        // Huge pages or not, a cold arena faults (12 times for 24 MiB in 2 MiB pages, 6,144
        // in 4 KiB ones; ~1,400 here, a mix); one topped up beforehand serves the memory
        // already in, but for its first piece or two (a new arena's own first extent: 74
        // faults here, each a 4 KiB page).
        assert!(cold >= 8, "cold {cold}");
        assert!(
            warm * 10 < cold && warm <= 2 * 65,
            "warm {warm} (cold {cold})"
        );
    }

    #[test]
    #[allow(unsafe_code)]
    fn the_compiled_in_allocator_options_are_in_effect() {
        use tikv_jemalloc_ctl::raw;
        // SAFETY: NUL-terminated option names read with their documented types (size_t,
        // const char *).
        let fit = unsafe { raw::read::<usize>(b"opt.lg_extent_max_active_fit\0") };
        let thp = unsafe { raw::read_str(b"opt.thp\0") };
        assert_eq!(
            fit.ok(),
            Some(20),
            "lg_extent_max_active_fit (.cargo/config.toml)"
        );
        assert_eq!(thp.ok(), Some(&b"always\0"[..]), "thp (.cargo/config.toml)");
    }

    /// Keeps 64 MiB of freed pages on a new thread with its own arena, then makes the
    /// trim calls `(cap, resident_limit)` in turn there; their results.
    fn trims_after_keeping_64_mib<const N: usize>(
        calls: [(u64, Option<u64>); N],
    ) -> [Option<u64>; N] {
        std::thread::spawn(move || {
            jemalloc_keep_pages_on_this_thread();
            // 64 MiB in 1 MiB pieces, touched, then freed: the arena keeps their pages.
            let chunks: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 1 << 20]).collect();
            drop(chunks);
            calls.map(|(cap, limit)| {
                assert!(jemalloc_refresh());
                jemalloc_trim_kept_pages(cap, limit)
            })
        })
        .join()
        .expect("thread")
    }

    #[test]
    fn kept_pages_over_the_cap_go_back_to_the_os_down_to_the_cap() {
        let mb = 1u64 << 20;
        let [under, over, again, smaller] = trims_after_keeping_64_mib([
            (1 << 30, None),
            (32 * mb, None),
            (32 * mb, None),
            (mb, None),
        ]);
        assert_eq!(under, Some(0), "64 MiB kept is under a 1 GiB cap");
        // Down to 30 MiB (fifteen sixteenths of the cap): at least 34 MiB returned (the
        // arena keeps more than the 64 MiB: the thread's other allocations).
        let over = over.expect("jemalloc's per-arena stats");
        assert!(over >= 34 * mb, "returned {over} bytes");
        assert_eq!(again, Some(0), "what is left is within the cap");
        // The pages held through the purge were kept: a smaller cap returns them.
        let smaller = smaller.expect("jemalloc's per-arena stats");
        assert!(smaller >= 28 * mb, "returned {smaller} bytes");
    }

    #[test]
    fn kept_pages_go_back_to_the_os_while_resident_memory_is_over_the_limit() {
        // Well under a 1 GiB cap; any process has more than 1 MiB resident.
        let [within, over, after] = trims_after_keeping_64_mib([
            (1 << 30, Some(u64::MAX)),
            (1 << 30, Some(1 << 20)),
            (1 << 30, Some(1 << 20)),
        ]);
        assert_eq!(within, Some(0), "under the cap and the resident limit");
        let over = over.expect("jemalloc's per-arena stats");
        assert!(over >= 60 << 20, "returned {over} bytes");
        assert_eq!(after, Some(0), "nothing left to return");
    }
}
