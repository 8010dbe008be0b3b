//! `loadtest`: the load client for pushgate, and for any push gateway whose
//! endpoints fit its URL templates. See `loadtest --help` and
//! `loadtest <scenario> --help`; `loadtest/run-smoke.sh` is a short run.

use std::process::ExitCode;

use clap::Parser as _;

mod channels;
mod chart;
mod cli;
mod compare;
mod fleet;
mod frames;
mod hist;
mod http;
mod procstat;
mod pusher;
mod report;
mod rng;
mod scenario;
mod sse;
mod target;
mod tokens;
mod worker;

use cli::{Cli, Scenario};

/// Exit status when `--check` finds a count off.
const CHECK_FAILED: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.scenario, Scenario::Worker) {
        return match worker::main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("loadtest worker: error: {err:#}");
                ExitCode::FAILURE
            }
        };
    }
    let compared = match &cli.scenario {
        Scenario::Compare(args) => Some(compare::run(args)),
        Scenario::CompareSummary(args) => Some(compare::summary(args)),
        _ => None,
    };
    if let Some(result) = compared {
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("loadtest: error: {err:#}");
                ExitCode::FAILURE
            }
        };
    }
    raise_open_files_limit();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("loadtest: error: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let (finished, common) = match runtime.block_on(scenario::run(cli.scenario)) {
        Ok(done) => done,
        Err(err) => {
            eprintln!("loadtest: error: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(err) = finished.report.emit(
        common.json.as_deref(),
        common.markdown.as_deref(),
        common.svg.as_deref(),
    ) {
        eprintln!("loadtest: error: {err:#}");
        return ExitCode::FAILURE;
    }
    for problem in &finished.problems {
        eprintln!("loadtest: check: {problem}");
    }
    if common.check && !finished.problems.is_empty() {
        return ExitCode::from(CHECK_FAILED);
    }
    ExitCode::SUCCESS
}

/// Raises this process's soft open-files limit to its hard limit: each
/// connection is a file.
pub fn raise_open_files_limit() {
    if let Err(err) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("loadtest: warning: cannot raise the open files limit: {err}");
    }
}
