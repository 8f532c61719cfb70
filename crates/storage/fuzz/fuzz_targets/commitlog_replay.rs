//! Replays an arbitrary segment body (after a valid header): must never panic.
#![no_main]

use amphora_storage::CommitFailurePolicy;
use amphora_storage::commitlog::{ReplayReport, replay, segment_file_name, segment_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("amphora-fuzz-cl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let mut seg = segment_header(1).to_vec();
    seg.extend_from_slice(data);
    if std::fs::write(dir.join(segment_file_name(1)), &seg).is_err() {
        return;
    }
    let mut report = ReplayReport::default();
    let _ = replay(&dir, CommitFailurePolicy::Ignore, &mut report, |_, m| {
        std::hint::black_box(m);
    });
});
