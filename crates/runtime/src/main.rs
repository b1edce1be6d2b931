//! `database-operator`: see `database-operator --help`.

fn main() -> std::process::ExitCode {
    database_operator_runtime::cli::main()
}
