//! `database-operator`: see `database-operator --help`.

/// mimalloc instead of the system allocator: a reconcile renders and compares a few hundred
/// small objects, and with glibc's malloc allocation was about 40 % of the core's time
/// (docs/performance.md). Built without the default `mimalloc` feature, the binary uses the
/// system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // mimalloc reads its options before `main`: start again with the operator's settings
    // (`memory::ALLOCATOR_ENV`) unless the environment already says something about them.
    #[cfg(all(feature = "mimalloc", unix))]
    {
        use database_operator_runtime::memory;
        if memory::allocator_env_missing(|name| std::env::var_os(name)) {
            let error = memory::restart_with_allocator_env();
            eprintln!(
                "warning: could not start again with the allocator's settings ({error}); \
                 running with mimalloc's defaults"
            );
        }
    }
    database_operator_runtime::cli::main()
}
