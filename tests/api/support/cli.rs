//! The command line against a test database: in-process through
//! `cli::run_with` (output captured), or as the real binary.

use std::process::{Command, Output};

use clap::Parser;
use webhook_inbox::cli::{Cli, run_with};

use super::database::TestDatabase;

/// What an in-process run printed, and its error if it failed.
#[derive(Debug)]
pub struct CliRun {
    pub stdout: String,
    pub error: Option<String>,
}

impl CliRun {
    /// The output of a run that must have succeeded.
    #[track_caller]
    pub fn ok(self) -> String {
        assert!(self.error.is_none(), "the command failed: {:?}\n{}", self.error, self.stdout);
        self.stdout
    }

    /// The JSON lines of the output.
    #[track_caller]
    pub fn json_lines(self) -> Vec<serde_json::Value> {
        self.ok().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }
}

/// Runs `webhook-inbox --database-url <db> <args>` in-process.
pub async fn cli(db: &TestDatabase, args: &[&str]) -> CliRun {
    let url = db.url();
    let argv = ["webhook-inbox", "--database-url", &url].into_iter().chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|err| panic!("{args:?} does not parse: {err}"));
    let mut stdout = Vec::new();
    let result = run_with(cli, &mut stdout).await;
    CliRun { stdout: String::from_utf8(stdout).unwrap(), error: result.err().map(|err| format!("{err:#}")) }
}

/// Runs the real binary with `DATABASE_URL` set to `db`.
pub fn binary(db: &TestDatabase, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_webhook-inbox"))
        .args(args)
        .env("DATABASE_URL", db.url())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}
