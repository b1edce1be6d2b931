//! `database-operator`: see `database-operator --help`.

/// mimalloc instead of the system allocator: a reconcile renders and compares a few hundred
/// small objects, and with glibc's malloc allocation was about 40 % of the core's time
/// (docs/performance.md). Built without the default `mimalloc` feature, the binary uses the
/// system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    database_operator_runtime::cli::main()
}
