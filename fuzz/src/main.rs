//! The fuzzer's command line: a seeded mutation campaign over every model in the
//! workspace's `tests/fixtures/` and `examples/` through import → analyse → candidates (and,
//! with `--depth`, an exported rewrite, the whole main job, its written output), catching
//! panics. Findings' inputs and their minimized forms go to `target/fuzz-crashes/`; an input
//! that aborts the process (a failed allocation, a stack overflow) is saved by a SIGABRT
//! handler as `target/fuzz-crashes/abort.onnx`. A sample of the written outputs is judged at
//! the end by ONNX's checker and ONNX Runtime (`--python`). Exit status 1 if there was any
//! finding. See `docs/fuzzing.md`.
//!
//!     cargo run --release -p ckpt-fuzz -- --execs 1000000 --seed 1
//!     cargo run --release -p ckpt-fuzz -- --seconds 600 --depth write

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;

use ckpt_fuzz::campaign::{corpus, fuzz, FindingKind, FuzzOptions, FuzzReport};
use ckpt_fuzz::exec::{Depth, Reached, Sandbox};
use ckpt_fuzz::external::judge_samples;

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
    /// How far each input is driven: import, analyse, candidates, export, plan, write.
    #[arg(long, default_value = "candidates")]
    depth: Depth,
    /// The main job's time limit per input at `--depth plan` and `write`, in seconds.
    #[arg(long = "plan-time-limit", default_value_t = 0.05)]
    plan_time_limit: f64,
    /// Cut the chains structural mutations splice in to this many links (100000 by default).
    #[arg(long = "longest-chain", default_value_t = ckpt_fuzz::mutate::LONGEST_CHAIN)]
    longest_chain: usize,
    /// Trial runs allowed to minimize each finding.
    #[arg(long = "minimize-budget", default_value_t = 2000)]
    minimize_budget: usize,
    /// Where findings' inputs are written.
    #[arg(long = "crash-dir")]
    crash_dir: Option<PathBuf>,
    /// Keep every N-th written output (with its input) for ONNX's checker and ONNX Runtime.
    #[arg(long = "sample-every", default_value_t = 1000)]
    sample_every: u64,
    /// Where the sampled outputs are kept (emptied first).
    #[arg(long = "sample-dir")]
    sample_dir: Option<PathBuf>,
    /// The Python with `onnx` and `onnxruntime` that judges the samples; `none`: not judged.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Run these model files once each at `--depth` (from a sandbox, as the campaign does) and
    /// print how far each got and how long it took, instead of a campaign.
    #[arg(long, num_args = 1..)]
    replay: Vec<PathBuf>,
}

/// The input running now (its bytes live until `exercise` returns) and where an abort saves it.
static CURRENT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static CURRENT_LEN: AtomicUsize = AtomicUsize::new(0);
static ABORT_PATH: OnceLock<CString> = OnceLock::new();

/// The input running now and when it started, for the hang watchdog.
static RUNNING: Mutex<Option<(Instant, Vec<u8>)>> = Mutex::new(None);

/// An execution running longer than this is a hang: its input is saved and the campaign ends.
const HANG: Duration = Duration::from_secs(120);

fn keep_current(input: &[u8]) {
    CURRENT_PTR.store(input.as_ptr().cast_mut(), Ordering::SeqCst);
    CURRENT_LEN.store(input.len(), Ordering::SeqCst);
    if let Ok(mut r) = RUNNING.lock() {
        *r = Some((Instant::now(), input.to_vec()));
    }
}

fn done_current() {
    if let Ok(mut r) = RUNNING.lock() {
        *r = None;
    }
}

/// Check every second whether one execution has run past [`HANG`]; if so, write its input to
/// `dir/hang.onnx` and end the process with status 3.
fn watch_for_hangs(dir: PathBuf) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let hung = RUNNING.lock().ok().and_then(|r| {
            r.as_ref()
                .filter(|(t, _)| t.elapsed() > HANG)
                .map(|(_, b)| b.clone())
        });
        if let Some(bytes) = hung {
            let path = dir.join("hang.onnx");
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(&path, bytes);
            println!(
                "fuzz: an execution ran past {} s (a hang): its input is {}",
                HANG.as_secs(),
                path.display()
            );
            std::process::exit(3);
        }
    });
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
    if !a.replay.is_empty() {
        return replay(&a.replay, a.depth, plan_time_limit);
    }
    let crash_dir = a
        .crash_dir
        .unwrap_or_else(|| root.join("target/fuzz-crashes"));
    save_aborts_to(&crash_dir);
    watch_for_hangs(crash_dir.clone());
    let sample_dir = a
        .sample_dir
        .unwrap_or_else(|| root.join(format!("target/fuzz-samples/seed-{}", a.seed)));
    let _ = std::fs::remove_dir_all(&sample_dir);
    let opts = FuzzOptions {
        seed: a.seed,
        execs: a.execs,
        time: Some(time),
        depth: a.depth,
        plan_time_limit,
        crash_dir: Some(crash_dir),
        before_exec: Some(keep_current),
        after_exec: Some(done_current),
        sample_every: Some(a.sample_every),
        longest_chain: a.longest_chain,
        minimize_budget: a.minimize_budget,
        sample_dir: Some(sample_dir.clone()),
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
    let r = match fuzz(&seeds, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: the campaign's folders: {e}");
            return ExitCode::from(1);
        }
    };
    let _ = std::panic::take_hook();
    print_report(&r);
    let python = a.python.unwrap_or_else(|| root.join(".venv/bin/python"));
    let judged_ok = r.sampled == 0 || python == Path::new("none") || judge(&python, &sample_dir);
    if r.crashes.is_empty() && judged_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Run each file once at `depth` and print what came of it.
fn replay(files: &[PathBuf], depth: Depth, plan_time_limit: Duration) -> ExitCode {
    let dir = std::env::temp_dir().join(format!("ckpt-fuzz-replay-{}", std::process::id()));
    let sandbox = match Sandbox::new(&dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}: {e}", dir.display());
            return ExitCode::from(1);
        }
    };
    let mut found = false;
    for f in files {
        let Ok(bytes) = std::fs::read(f) else {
            println!("{}: unreadable", f.display());
            found = true;
            continue;
        };
        let t = Instant::now();
        let e = sandbox.run(&bytes, depth, plan_time_limit);
        found |= matches!(
            e.reached,
            Reached::WrongAnswer(_) | Reached::RuleBroken(_) | Reached::InputChanged(_)
        );
        let why = match e.reached {
            Reached::RefusedAtImport => ckpt_ir::import_bytes(bytes.into(), f, None)
                .err()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        println!(
            "{}: {:?} in {:.2} s{why}",
            f.display(),
            e.reached,
            t.elapsed().as_secs_f64()
        );
    }
    let _ = sandbox.remove();
    if found {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_report(r: &FuzzReport) {
    println!(
        "fuzz: {} execs in {:.1} s ({:.0} execs/s): {} refused at import, {} at analysis, {} through; \
         {} outputs written and checked, {} sampled; slowest exec {:.2} s, {} over 1 s; \
         {} panics, {} wrong answers, {} rule failures, {} inputs changed",
        r.execs,
        r.elapsed.as_secs_f64(),
        r.execs_per_second(),
        r.refused_at_import,
        r.refused_at_analysis,
        r.through,
        r.outputs,
        r.sampled,
        r.slowest.as_secs_f64(),
        r.slow,
        r.count(FindingKind::Panic),
        r.count(FindingKind::WrongAnswer),
        r.count(FindingKind::RuleBroken),
        r.count(FindingKind::InputChanged),
    );
    for c in r.crashes.iter().filter(|c| c.written.is_some()) {
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
}

/// Judge the samples in `dir` with ONNX's checker and ONNX Runtime; whether none was refused.
fn judge(python: &Path, dir: &Path) -> bool {
    let v = match judge_samples(python, dir) {
        Ok(v) => v,
        Err(e) => {
            println!("samples: not judged: {e}");
            return false;
        }
    };
    let (checker, checker_inherited) = v.checker_refused();
    let (ort, ort_inherited) = v.ort_refused();
    println!(
        "samples ({}): {} judged; refused by onnx.checker (full_check): {checker} ({checker_inherited} \
         whose input it refuses too); refused by ORT InferenceSession: {ort} ({ort_inherited} whose \
         input it refuses too)",
        dir.display(),
        v.checked()
    );
    for x in v.all.iter().filter(|x| !x.checker || !x.ort).take(20) {
        println!("  out-{}.onnx: {}", x.exec, x.why);
    }
    checker == 0 && ort == 0
}
