//! `ckpt-opt`: fit an ONNX training graph under a memory ceiling by recomputing
//! activations, and prove on ONNX Runtime that it still trains the same.
//!
//! Exit codes ([`ckpt_opt::exit`]): 0 success, 1 bad input or usage, 2 the ceiling cannot be
//! met, 3 validation failed, 4 could not validate, 70 an internal error (a bug). Each error
//! carries its code from where it is detected; nothing converts an error into one.
//!
//! Modules import one way: `main` → `inspect`, `main_job` → the library's `model_io` → `cli`
//! (flag types); `main` → the library's `reports` (frontier, capacity, buckets) → `model_io`.

mod inspect;
mod main_job;

use std::process::ExitCode;

/// mimalloc, not the C library's allocator: a plan's trials build and drop a patched graph, its
/// shapes and a simulation each, which glibc's malloc serves with page faults (the scale bench
/// uses mimalloc too; its timings are in `BENCHMARKS.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;

use ckpt_opt::cli;
use ckpt_opt::exit::{error_text, Failure};

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
    // SIGINT/SIGTERM: no temporary file of a write in progress is left behind (130: the
    // shell's code for an interrupted command). The handler runs on its own thread while the
    // main one may be inside ONNX Runtime or CBC: `_exit` ends the process without running
    // the C++ libraries' static destructors under them (`exit` did, and a loaded machine
    // caught a segfault there).
    let _ = ctrlc::set_handler(|| {
        ckpt_ir::remove_temp_files();
        ckpt_opt::progress::finish();
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: `_exit` only ends the process; nothing runs after it.
        unsafe { libc::_exit(130) }
    });
    let quiet = match &args.command {
        None => args.optimize.output_args.quiet,
        Some(cli::Command::Validate(a)) => a.output_args.quiet,
        Some(_) => true,
    };
    ckpt_opt::progress::enable(quiet);
    let result = run(args);
    ckpt_opt::progress::finish();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("{}", failure_text(&f));
            ExitCode::from(f.code)
        }
    }
}

/// What stderr says of a failure: `error: ` and the error; an internal error says it is one.
fn failure_text(f: &Failure) -> String {
    if f.is_internal() {
        format!(
            "internal error (a bug in ckpt-opt, not a fault of the input): {}",
            error_text(&f.error)
        )
    } else {
        format!("error: {}", error_text(&f.error))
    }
}

fn run(cli: cli::Cli) -> Result<(), Failure> {
    use ckpt_opt::model_io::load;
    use ckpt_opt::reports;
    use cli::Command;
    match cli.command {
        Some(Command::Inspect(a)) => inspect::run(&a),
        Some(Command::Print(a)) => {
            let g = load(&a.model)?;
            print!("{}", ckpt_ir::print_graph(&g));
            Ok(())
        }
        Some(Command::Export(a)) => {
            let g = load(&a.model)?;
            ckpt_ir::write_model(ckpt_ir::export(&g), g.dir(), &a.output, Some(&a.model))
                .map_err(Failure::input)?;
            Ok(())
        }
        Some(Command::Validate(a)) => main_job::run_validate(&a),
        Some(Command::Frontier(a)) => reports::run_frontier(&a),
        Some(Command::Capacity(a)) => reports::run_capacity(&a),
        Some(Command::Buckets(a)) => reports::run_buckets(&a),
        None => main_job::run(cli.optimize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An internal error exits 70 and says it is one; bad input exits 1 as `error: …`.
    #[test]
    fn internal_errors_say_so_and_are_not_exit_1() {
        let bug = Failure::internal(anyhow::anyhow!("patch `recompute` broke the graph"));
        assert_eq!(bug.code, ckpt_opt::exit::INTERNAL);
        assert_ne!(bug.code, ckpt_opt::exit::BAD_INPUT);
        assert!(
            failure_text(&bug).starts_with("internal error"),
            "{}",
            failure_text(&bug)
        );
        let input = Failure::input(anyhow::anyhow!("importing m.onnx"));
        assert_eq!(input.code, ckpt_opt::exit::BAD_INPUT);
        assert_eq!(failure_text(&input), "error: importing m.onnx");
    }
}
