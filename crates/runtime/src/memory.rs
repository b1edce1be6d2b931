//! How the process asks the kernel for memory.

use std::ffi::OsString;

/// mimalloc's settings the operator runs with, as environment variables: mimalloc reads its
/// options once, when the process starts, before `main`. Its defaults keep memory for reuse
/// that the operator seldom reuses; measured with 100 clusters (`cargo xtask bench`,
/// docs/performance.md) the three together took the peak resident set of a restart from 51 to
/// 40 MiB and of the convergence from 42 to 40 MiB, with no more CPU:
///
/// - `MIMALLOC_PURGE_DELAY=0`: free memory goes back to the kernel at once (default: after
///   1 s, during which a burst of reconciles can pile up more);
/// - `MIMALLOC_PAGE_FULL_RETAIN=0`: no empty pages kept per size class and thread (default 2);
/// - `MIMALLOC_ARENA_EAGER_COMMIT=0`: arena memory committed as it is used, not up front.
pub const ALLOCATOR_ENV: &[(&str, &str)] = &[
    ("MIMALLOC_PURGE_DELAY", "0"),
    ("MIMALLOC_PAGE_FULL_RETAIN", "0"),
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
];

/// True when none of [`ALLOCATOR_ENV`] is set (`var` reads the environment): the process
/// starts itself again with them ([`restart_with_allocator_env`]). Whoever sets any of them
/// (to tune the allocator differently) gets exactly what they set.
pub fn allocator_env_missing(var: impl Fn(&str) -> Option<OsString>) -> bool {
    ALLOCATOR_ENV.iter().all(|(name, _)| var(name).is_none())
}

/// Replaces this process with a new run of the same executable, the same arguments and the
/// environment plus [`ALLOCATOR_ENV`] (the process id stays). Returns only if that failed
/// (e.g. the executable was replaced on disk); the caller then runs on with mimalloc's
/// defaults.
#[cfg(unix)]
pub fn restart_with_allocator_env() -> std::io::Error {
    use std::os::unix::process::CommandExt as _;
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    command
        .args(args)
        .envs(ALLOCATOR_ENV.iter().copied())
        .exec()
}

/// Turns transparent huge pages (THP) off for this process.
///
/// mimalloc advises the kernel to back its arenas with 2 MiB pages. Where THP is enabled
/// (`always`, or `madvise` as on Debian and Ubuntu), a 2 MiB page counts in full against the
/// resident set however little of it is in use; with 1,000 clusters, 59 of the operator's 76 MiB
/// of anonymous memory were huge pages (docs/performance.md). The operator gains nothing from
/// them (its heap is many small objects), and memory limits are set on the resident set.
///
/// Linux only; elsewhere this does nothing and returns `Ok(false)`. Returns `Ok(true)` when the
/// flag is set, an error when the kernel refused it (e.g. a seccomp profile that blocks
/// `prctl`); the operator then runs on, only with a larger resident set.
pub fn disable_transparent_huge_pages() -> std::io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        rustix::thread::disable_transparent_huge_pages(true)?;
        Ok(true)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(false)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_settings_are_added_only_when_none_is_set() {
        assert!(allocator_env_missing(|_| None));
        assert!(allocator_env_missing(|name| {
            (name == "MIMALLOC_VERBOSE").then(|| OsString::from("1"))
        }));
        assert!(!allocator_env_missing(|name| {
            (name == "MIMALLOC_PURGE_DELAY").then(|| OsString::from("250"))
        }));
    }

    #[test]
    fn the_flag_is_set_for_the_process() {
        assert!(disable_transparent_huge_pages().unwrap());
        assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap());
    }
}
