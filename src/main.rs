//! `ckpt-opt`: fit an ONNX training graph under a memory ceiling by recomputing
//! activations, and prove on ONNX Runtime that it still trains the same.
//!
//! Exit codes: 0 success, 1 bad input or usage, 2 the ceiling cannot be met,
//! 3 validation failed.

mod cli;
mod inspect;
mod main_job;

use std::process::ExitCode;

use clap::Parser;

/// An error with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn input(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 1,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::input(e)
    }
}

fn main() -> ExitCode {
    // Behave like a Unix filter: a closed pipe (`ckpt-opt print m.onnx | head`) ends the
    // process quietly instead of panicking in print!.
    // SAFETY: called first in main, before any thread exists; restores the default action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = match cli::Cli::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(1),
            };
        }
    };
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}
