//! The default open and active session budgets, from the process's
//! open-file limit (see DESIGN.md, "Store").

/// File descriptors an open session is counted to hold while it is
/// active: its active segment (which holds its writer lock, `LOCK` being
/// a second name of it) and its catalog, and one more for a `LOCK` of its
/// own, which a writer keeps where it cannot move the lock into the
/// segment (a file system without hard links): three at most.
///
/// Example: [`Store::open_with`](crate::Store::open_with).
pub const FDS_PER_ACTIVE_SESSION: usize = 3;

/// File descriptors an open session holds while it is parked: the one that
/// holds its writer lock (its active segment's, through which its saves
/// write).
///
/// Example: [`Store::open_with`](crate::Store::open_with).
pub const FDS_PER_PARKED_SESSION: usize = 1;

/// The default [`StoreOptions::max_open_sessions`](super::StoreOptions::max_open_sessions), from the process's soft
/// open-file limit (`RLIMIT_NOFILE`, read when the options are made). The
/// store's sessions may take three quarters of it, leaving a quarter to
/// the application: half of those descriptors go to active sessions
/// ([`default_max_active_sessions`], three each: a sixth of the three
/// quarters in sessions), and the other half to parked ones (one each),
/// so that the open sessions are two thirds of that three quarters, between 16 and 16,384 (each also holds a memory map,
/// and `vm.max_map_count` is 65,530 by default). At the common limit of
/// 1,024 that is 512 sessions, 128 of them active; at 20,000, 10,000 and
/// 2,500. Sessions over the budget still work, each save reopening its
/// log; a budget that holds the sessions a process keeps busy saves that
/// reopen (issue 14, workload B). Raise the soft limit (`ulimit -n`,
/// `LimitNOFILE=`) to raise this default.
///
/// Example: [`Store::open_with`](crate::Store::open_with).
pub fn default_max_open_sessions() -> usize {
    open_budget_for(crate::mmap::open_file_limit())
}

/// The default [`StoreOptions::max_active_sessions`](super::StoreOptions::max_active_sessions): see
/// [`default_max_open_sessions`].
///
/// Example: [`Store::open_with`](crate::Store::open_with).
pub fn default_max_active_sessions() -> usize {
    active_budget_for(crate::mmap::open_file_limit())
}

/// [`default_max_open_sessions`] for a soft limit of `limit` descriptors
/// (`None`: unknown, which gives 256).
#[doc(hidden)]
pub fn open_budget_for(limit: Option<u64>) -> usize {
    budgets_for(limit).0
}

/// [`default_max_active_sessions`] for a soft limit of `limit` descriptors
/// (`None`: unknown, which gives 64).
#[doc(hidden)]
pub fn active_budget_for(limit: Option<u64>) -> usize {
    budgets_for(limit).1
}

/// The open and the active sessions' budgets for a soft limit of `limit`
/// descriptors: with `fds` three quarters of it, `active` sessions take
/// `fds / 2` (three descriptors each) and the parked ones the other half
/// (one each), so `open = fds - 2 × active`.
fn budgets_for(limit: Option<u64>) -> (usize, usize) {
    const MIN: usize = 16;
    const MAX: usize = 16_384;
    let Some(limit) = limit else {
        return (256, 64);
    };
    let fds = usize::try_from(limit / 4 * 3).unwrap_or(usize::MAX);
    let active = fds / 2 / FDS_PER_ACTIVE_SESSION;
    let parked = (fds - active * FDS_PER_ACTIVE_SESSION) / FDS_PER_PARKED_SESSION;
    let open = (active + parked).clamp(MIN, MAX);
    (open, active.clamp(MIN, open))
}
