//! The fuzzer's command line: a seeded mutation campaign over every model in the
//! workspace's `tests/fixtures/` and `examples/` through import → analyse → candidates (and, with `--depth plan`, the whole main
//! job), catching panics. Crashing inputs and their minimized forms go to
//! `target/fuzz-crashes/`; an input that aborts the process (a failed allocation, a stack
//! overflow) is saved by a SIGABRT handler as `target/fuzz-crashes/abort.onnx`. Exit status 1
//! if anything panicked. See `docs/fuzzing.md`.
//!
//!     cargo run --release -p ckpt-fuzz -- --execs 1000000 --seed 1
//!     cargo run --release -p ckpt-fuzz -- --seconds 600 --depth plan

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use clap::Parser;

use ckpt_fuzz::mutate::{corpus, fuzz, Depth, FuzzOptions};

#[derive(Parser, Debug)]
#[command(about = "Mutation-fuzz the ckpt-opt pipeline (see docs/fuzzing.md)")]
struct Args {
    /// Executions to run (the campaign also stops at --seconds).
    #[arg(long, default_value_t = 100_000)]
    execs: u64,
    /// Seed of the mutations: same seed, same corpus, same inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds.
    #[arg(long)]
    seconds: Option<f64>,
    /// How far each input is driven: import, analyse, candidates, plan.
    #[arg(long, default_value = "candidates")]
    depth: Depth,
    /// The main job's time limit per input at `--depth plan`, in seconds.
    #[arg(long = "plan-time-limit", default_value_t = 0.05)]
    plan_time_limit: f64,
    /// Where crashing inputs are written.
    #[arg(long = "crash-dir")]
    crash_dir: Option<PathBuf>,
}

/// The input running now (its bytes live until `exercise` returns) and where an abort saves it.
static CURRENT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static CURRENT_LEN: AtomicUsize = AtomicUsize::new(0);
static ABORT_PATH: OnceLock<CString> = OnceLock::new();

fn keep_current(input: &[u8]) {
    CURRENT_PTR.store(input.as_ptr().cast_mut(), Ordering::SeqCst);
    CURRENT_LEN.store(input.len(), Ordering::SeqCst);
}

/// SIGABRT: write the running input with async-signal-safe calls only, then die as before.
extern "C" fn on_abort(_: libc::c_int) {
    let (p, n) = (
        CURRENT_PTR.load(Ordering::SeqCst),
        CURRENT_LEN.load(Ordering::SeqCst),
    );
    if let (Some(path), false) = (ABORT_PATH.get(), p.is_null()) {
        // SAFETY: `p..p+n` is the input `fuzz` is running (alive until the exec returns);
        // open/write/close/signal/raise are async-signal-safe.
        unsafe {
            let fd = libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o644,
            );
            if fd >= 0 {
                libc::write(fd, p.cast(), n);
                libc::close(fd);
            }
        }
    }
    // SAFETY: restores the default action and re-raises, so the process still aborts.
    unsafe {
        libc::signal(libc::SIGABRT, libc::SIG_DFL);
        libc::raise(libc::SIGABRT);
    }
}

fn save_aborts_to(dir: &Path) {
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let Ok(path) = CString::new(dir.join("abort.onnx").display().to_string()) else {
        return;
    };
    let _ = ABORT_PATH.set(path);
    // SAFETY: installs a handler that only uses async-signal-safe calls (see `on_abort`).
    unsafe {
        libc::signal(
            libc::SIGABRT,
            on_abort as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    // The workspace root: this crate is its `fuzz/` folder.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let seeds = match corpus(&[&root.join("tests/fixtures"), &root.join("examples")]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: reading the seed corpus: {e}");
            return ExitCode::from(1);
        }
    };
    let seconds = |s: f64| Duration::try_from_secs_f64(s).ok().filter(|d| !d.is_zero());
    let (Some(plan_time_limit), Some(time)) = (
        seconds(a.plan_time_limit),
        a.seconds.map(seconds).unwrap_or(Some(Duration::MAX)),
    ) else {
        eprintln!("error: --seconds and --plan-time-limit are positive numbers of seconds");
        return ExitCode::from(1);
    };
    let crash_dir = a
        .crash_dir
        .unwrap_or_else(|| root.join("target/fuzz-crashes"));
    save_aborts_to(&crash_dir);
    let opts = FuzzOptions {
        seed: a.seed,
        execs: a.execs,
        time: Some(time),
        depth: a.depth,
        plan_time_limit,
        crash_dir: Some(crash_dir),
        before_exec: Some(keep_current),
        ..FuzzOptions::default()
    };
    eprintln!(
        "fuzz: {} seed models, seed {}, depth {:?}, up to {} execs",
        seeds.len(),
        opts.seed,
        opts.depth,
        opts.execs
    );
    // Panics are caught and reported below; the default hook would print each one (and the
    // minimizer's reruns) in full.
    std::panic::set_hook(Box::new(|_| {}));
    let r = fuzz(&seeds, &opts);
    let _ = std::panic::take_hook();
    println!(
        "fuzz: {} execs in {:.1} s ({:.0} execs/s): {} refused at import, {} at analysis, {} through; {} panics",
        r.execs,
        r.elapsed.as_secs_f64(),
        r.execs_per_second(),
        r.refused_at_import,
        r.refused_at_analysis,
        r.through,
        r.crashes.len()
    );
    for c in &r.crashes {
        println!(
            "  exec {}: {} ({} -> {} bytes minimized{})",
            c.exec,
            c.message,
            c.input.len(),
            c.minimized.len(),
            c.written
                .as_ref()
                .map(|p| format!(", {}", p.display()))
                .unwrap_or_default()
        );
    }
    if r.crashes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
