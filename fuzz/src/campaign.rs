//! The seeded campaign: [`fuzz`] mutates the seed corpus ([`crate::mutate`]) and runs each
//! input from a [`Sandbox`] to a [`Depth`] ([`crate::exec`]), catching panics with
//! `catch_unwind`. Every finding (a panic, a wrong `Ok`, an output that breaks ONNX's rules,
//! an input file changed) is counted, its input written to a folder and [`minimize`]-d. Every
//! `sample_every`-th written output is kept in a folder for ONNX's checker and ONNX Runtime
//! ([`crate::external`]). Same seed and corpus, same inputs.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ckpt_ir::onnx::ModelProto;
use ckpt_ir::Message;

use crate::exec::{minimize, Depth, Reached, Sandbox};
use crate::mutate::{mutate_bytes, mutate_structure_up_to, Rng, LONGEST_CHAIN};

/// A fuzzing campaign's settings.
#[derive(Clone, Debug)]
pub struct FuzzOptions {
    pub seed: u64,
    /// Stop after this many executions…
    pub execs: u64,
    /// …or this long, whichever comes first.
    pub time: Option<Duration>,
    pub depth: Depth,
    /// The main job's time limit at [`Depth::Plan`] and [`Depth::Write`].
    pub plan_time_limit: Duration,
    /// Where findings' inputs (and their minimized forms) are written; none: not written.
    pub crash_dir: Option<PathBuf>,
    /// Trial runs allowed to minimize each finding; only the first [`MINIMIZED_PER_KIND`]
    /// findings of each kind are kept and minimized.
    pub minimize_budget: usize,
    /// The longest chain a structural mutation splices in ([`LONGEST_CHAIN`] by default).
    pub longest_chain: usize,
    /// Called with each input just before it runs (the fuzzer binary keeps it, to save it if
    /// the process aborts: an allocation failure or a stack overflow is not a panic).
    pub before_exec: Option<fn(&[u8])>,
    /// Called when that input's execution returns (before a finding is minimized).
    pub after_exec: Option<fn()>,
    /// The folder the inputs run from (made, and removed at the end); none: one under the
    /// system's temporary folder.
    pub sandbox_dir: Option<PathBuf>,
    /// Every this-many-th written output (the first included) is kept in `sample_dir`, with
    /// its input, as `out-<exec>.onnx` and `in-<exec>.onnx`; none: no sample.
    pub sample_every: Option<u64>,
    pub sample_dir: Option<PathBuf>,
}

impl Default for FuzzOptions {
    fn default() -> FuzzOptions {
        FuzzOptions {
            seed: 1,
            execs: 10_000,
            time: None,
            depth: Depth::Candidates,
            plan_time_limit: Duration::from_millis(50),
            crash_dir: None,
            minimize_budget: 2_000,
            longest_chain: LONGEST_CHAIN,
            before_exec: None,
            after_exec: None,
            sandbox_dir: None,
            sample_every: None,
            sample_dir: None,
        }
    }
}

/// What kind of finding an input gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FindingKind {
    Panic,
    WrongAnswer,
    RuleBroken,
    InputChanged,
}

/// One finding: what happened, the input, its minimized form and where they were written.
#[derive(Clone, Debug)]
pub struct Crash {
    pub exec: u64,
    pub kind: FindingKind,
    pub message: String,
    pub input: Vec<u8>,
    pub minimized: Vec<u8>,
    pub written: Option<PathBuf>,
}

/// What a campaign did.
#[derive(Clone, Debug, Default)]
pub struct FuzzReport {
    pub execs: u64,
    pub elapsed: Duration,
    pub refused_at_import: u64,
    pub refused_at_analysis: u64,
    pub through: u64,
    /// Outputs written (and checked against ONNX's rules, and imported again).
    pub outputs: u64,
    /// Outputs kept for ONNX's checker and ONNX Runtime.
    pub sampled: u64,
    /// The longest execution, and how many took over a second.
    pub slowest: Duration,
    pub slow: u64,
    pub crashes: Vec<Crash>,
}

impl FuzzReport {
    pub fn execs_per_second(&self) -> f64 {
        self.execs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// How many findings of `kind`.
    pub fn count(&self, kind: FindingKind) -> usize {
        self.crashes.iter().filter(|c| c.kind == kind).count()
    }
}

/// The seed corpus: every `.onnx` file in `dirs`, in name order.
pub fn corpus(dirs: &[&Path]) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for d in dirs {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(d)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
            .collect();
        paths.sort();
        for p in paths {
            out.push((p.display().to_string(), std::fs::read(&p)?));
        }
    }
    Ok(out)
}

/// Inputs that got through are kept (up to this many) to be mutated further.
const POOL_LIMIT: usize = 256;

/// The next input: half the executions mutate structure (one to three mutations of a decoded
/// seed), the others bytes, of a seed or of an input that got through before.
fn next_input(
    opts: &FuzzOptions,
    rng: &mut Rng,
    seeds: &[(String, Vec<u8>)],
    decoded: &[ModelProto],
    pool: &[Vec<u8>],
) -> Vec<u8> {
    match rng.below(4) {
        0 | 1 if !decoded.is_empty() => {
            let mut m = decoded[rng.below(decoded.len())].clone();
            for _ in 0..1 + rng.below(3) {
                mutate_structure_up_to(&mut m, rng, opts.longest_chain);
            }
            m.encode_to_vec()
        }
        2 if !pool.is_empty() => {
            let mut b = pool[rng.below(pool.len())].clone();
            mutate_bytes(&mut b, rng);
            b
        }
        _ => {
            let mut b = seeds[rng.below(seeds.len())].1.clone();
            mutate_bytes(&mut b, rng);
            b
        }
    }
}

/// Run a seeded campaign over `seeds` (see the module doc); inputs that got through join a
/// pool the later executions also draw from.
pub fn fuzz(seeds: &[(String, Vec<u8>)], opts: &FuzzOptions) -> std::io::Result<FuzzReport> {
    let mut rng = Rng::new(opts.seed);
    let decoded: Vec<ModelProto> = seeds
        .iter()
        .filter_map(|(_, b)| ModelProto::decode(b.as_slice()).ok())
        .collect();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut report = FuzzReport::default();
    if seeds.is_empty() {
        return Ok(report);
    }
    let sandbox_dir = opts.sandbox_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("ckpt-fuzz-{}-{}", std::process::id(), opts.seed))
    });
    let sandbox = Sandbox::new(&sandbox_dir)?;
    if let Some(d) = &opts.sample_dir {
        // Sampled models name the sandbox's data file as the ones run did.
        std::fs::create_dir_all(d)?;
        std::fs::copy(sandbox_dir.join("w.data"), d.join("w.data"))?;
    }
    let t0 = Instant::now();
    while report.execs < opts.execs && opts.time.is_none_or(|t| t0.elapsed() < t) {
        let input = next_input(opts, &mut rng, seeds, &decoded, &pool);
        let exec = report.execs;
        report.execs += 1;
        if let Some(f) = opts.before_exec {
            f(&input);
        }
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            sandbox.run(&input, opts.depth, opts.plan_time_limit)
        }));
        let took = started.elapsed();
        if let Some(f) = opts.after_exec {
            f();
        }
        report.slowest = report.slowest.max(took);
        report.slow += u64::from(took > Duration::from_secs(1));
        let found = match outcome {
            Ok(e) => match e.reached {
                Reached::RefusedAtImport => {
                    report.refused_at_import += 1;
                    None
                }
                Reached::RefusedAtAnalysis => {
                    report.refused_at_analysis += 1;
                    None
                }
                Reached::Through => {
                    report.through += 1;
                    if let Some(out) = e.output {
                        sample(&mut report, opts, exec, &input, &out)?;
                    }
                    if pool.len() < POOL_LIMIT {
                        pool.push(input);
                    } else {
                        let k = rng.below(POOL_LIMIT);
                        pool[k] = input;
                    }
                    continue;
                }
                Reached::WrongAnswer(m) => Some((FindingKind::WrongAnswer, m)),
                Reached::RuleBroken(m) => Some((FindingKind::RuleBroken, m)),
                Reached::InputChanged(m) => Some((FindingKind::InputChanged, m)),
            },
            Err(p) => Some((FindingKind::Panic, panic_message(p.as_ref()))),
        };
        if let Some((kind, message)) = found {
            let minimize = report.count(kind) < MINIMIZED_PER_KIND;
            let crash = record(opts, exec, kind, message, input, minimize);
            report.crashes.push(crash);
        }
    }
    report.elapsed = t0.elapsed();
    sandbox.remove()?;
    Ok(report)
}

/// Count a written output, and keep it (with its input) if it is one of the sample.
fn sample(
    report: &mut FuzzReport,
    opts: &FuzzOptions,
    exec: u64,
    input: &[u8],
    output: &[u8],
) -> std::io::Result<()> {
    let kept = matches!(opts.sample_every, Some(n) if report.outputs.is_multiple_of(n.max(1)));
    report.outputs += 1;
    if let (true, Some(d)) = (kept, &opts.sample_dir) {
        std::fs::write(d.join(format!("in-{exec}.onnx")), input)?;
        std::fs::write(d.join(format!("out-{exec}.onnx")), output)?;
        report.sampled += 1;
    }
    Ok(())
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// Findings of one kind kept (minimized, written) in a campaign; the others are counted.
pub const MINIMIZED_PER_KIND: usize = 10;

/// A finding; if `minimize_it`, its input and minimized form, written to the crash folder.
fn record(
    opts: &FuzzOptions,
    exec: u64,
    kind: FindingKind,
    message: String,
    input: Vec<u8>,
    minimize_it: bool,
) -> Crash {
    if !minimize_it {
        // Counted only: the first ones of its kind are kept.
        return Crash {
            exec,
            kind,
            message,
            input: Vec::new(),
            minimized: Vec::new(),
            written: None,
        };
    }
    let minimized = minimize(
        &input,
        opts.depth,
        opts.plan_time_limit,
        opts.minimize_budget,
    );
    let written = opts.crash_dir.as_ref().and_then(|d| {
        let name = format!("crash-{:016x}-{exec}", opts.seed);
        std::fs::create_dir_all(d).ok()?;
        std::fs::write(d.join(format!("{name}.onnx")), &input).ok()?;
        std::fs::write(d.join(format!("{name}.min.onnx")), &minimized).ok()?;
        Some(d.join(format!("{name}.min.onnx")))
    });
    Crash {
        exec,
        kind,
        message,
        input,
        minimized,
        written,
    }
}
