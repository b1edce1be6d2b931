//! The async runtime a command runs on: the operator's multi-threaded one, or one thread for
//! the short-lived commands (`backup`, the kubectl plugin).

/// Builds the async runtime of a command (`multi_thread` for the operator, one thread for the
/// short-lived commands), or says on stderr why it could not.
pub fn build(multi_thread: bool) -> Option<tokio::runtime::Runtime> {
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    match builder.enable_all().build() {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            None
        }
    }
}

/// Runs a command's future on a new runtime ([`build`]): success, or the error logged as
/// `stopped` says and printed, and a failure exit code.
pub fn run_command(
    multi_thread: bool,
    stopped: &'static str,
    command: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    let Some(runtime) = build(multi_thread) else {
        return std::process::ExitCode::FAILURE;
    };
    match runtime.block_on(command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "{stopped}");
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
