//! How the process asks the kernel for memory.

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
    fn the_flag_is_set_for_the_process() {
        assert!(disable_transparent_huge_pages().unwrap());
        assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap());
    }
}
