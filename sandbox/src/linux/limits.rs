//! Resource limits: what the hard limits allow, and what `RLIMIT_NPROC` counts.

/// The type of `RLIMIT_*` constants.
#[cfg(target_env = "gnu")]
pub(super) type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
pub(super) type Resource = libc::c_int;

/// `value`, or the hard limit of `resource` if lower (only root may raise it).
pub(super) fn capped(resource: Resource, value: u64) -> libc::rlim_t {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `current` is a valid rlimit to fill.
    if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
        return value;
    }
    value.min(current.rlim_max)
}

/// The tasks (threads) of `uid` now: what `RLIMIT_NPROC` counts.
pub(super) fn tasks_of(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut tasks = 0;
    for entry in entries.flatten() {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid || entry.metadata().ok().map(|m| m.uid()) != Some(uid) {
            continue;
        }
        if let Ok(threads) = std::fs::read_dir(entry.path().join("task")) {
            tasks += threads.count() as u64;
        }
    }
    tasks
}
