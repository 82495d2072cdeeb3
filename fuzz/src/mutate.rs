//! Mutation fuzzing of the pipeline: never panic on user input.
//!
//! A model file is mutated as bytes (bits flipped, bytes set, inserted, cut) or, decoded, as
//! structure (inputs rewired, nodes dropped, ops swapped, dims, dtypes and attributes broken,
//! initializers and outputs removed), then driven through the pipeline to a [`Depth`]:
//! import → analyse → candidates and a greedy plan → the whole main job. Every stage must
//! return `Ok` or a typed error; a panic is a crash. [`fuzz`] runs a seeded campaign (same
//! seed and corpus, same inputs), catching panics with `catch_unwind`, writing each crashing
//! input to a folder and [`minimize`]-ing it. The `ckpt-fuzz` binary (`src/main.rs`) is the
//! command line; the CLI crate's `tests/fuzz_slice.rs` runs a short slice in CI.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ckpt_ir::onnx::{self, ModelProto};
use ckpt_ir::{Bindings, Message};

/// A xorshift64 generator: the fuzzer's only source of randomness.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced: xorshift stays at 0).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `0..n` (0 for `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// One to four byte-level mutations: flip a bit, set a byte, insert a byte, cut the tail.
pub fn mutate_bytes(bytes: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..1 + rng.below(4) {
        if bytes.is_empty() {
            bytes.push(rng.next_u64() as u8);
            continue;
        }
        let at = rng.below(bytes.len());
        match rng.below(4) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes[at] = rng.next_u64() as u8,
            2 => bytes.insert(at, rng.next_u64() as u8),
            _ => bytes.truncate(at.max(1)),
        }
    }
}

/// One structural mutation: the model still decodes, but its graph is wrong in one of many ways.
pub fn mutate_structure(model: &mut ModelProto, rng: &mut Rng) {
    let Some(g) = model.graph.as_mut() else {
        return;
    };
    let names: Vec<String> = g
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(g.input.iter().filter_map(|v| v.name.clone()))
        .collect();
    match rng.below(12) {
        9 => mutate_opsets(model, rng),
        10 => mutate_external_length(g, rng),
        11 => lengthen_chain(g, rng),
        0 if !g.node.is_empty() => {
            let k = rng.below(g.node.len());
            let n = &mut g.node[k];
            if !n.input.is_empty() {
                let slot = rng.below(n.input.len());
                n.input[slot] = if rng.below(3) == 0 || names.is_empty() {
                    "nonexistent".into()
                } else {
                    names[rng.below(names.len())].clone()
                };
            }
        }
        1 if !g.node.is_empty() => {
            let k = rng.below(g.node.len());
            g.node.remove(k);
        }
        2 if !g.node.is_empty() => {
            const OPS: [&str; 10] = [
                "MatMul",
                "Add",
                "Relu",
                "Reshape",
                "Gather",
                "Softmax",
                "Transpose",
                "Concat",
                "Where",
                "NoSuchOp",
            ];
            let k = rng.below(g.node.len());
            g.node[k].op_type = Some(OPS[rng.below(OPS.len())].into());
        }
        3 => {
            let vis: Vec<&mut onnx::ValueInfoProto> = g
                .value_info
                .iter_mut()
                .chain(g.input.iter_mut())
                .chain(g.output.iter_mut())
                .collect();
            let n = vis.len();
            let k = rng.below(n);
            if let Some(vi) = vis.into_iter().nth(k) {
                if let Some(onnx::type_proto::Value::TensorType(t)) =
                    vi.r#type.as_mut().and_then(|t| t.value.as_mut())
                {
                    if let Some(shape) = t.shape.as_mut() {
                        if !shape.dim.is_empty() {
                            let d = rng.below(shape.dim.len());
                            let v = [0i64, 1, -3, 1 << 40, 7][rng.below(5)];
                            shape.dim[d].value =
                                Some(onnx::tensor_shape_proto::dimension::Value::DimValue(v));
                        }
                    }
                    if rng.below(4) == 0 {
                        t.elem_type = Some([0, 7, 9, 16, 99][rng.below(5)]);
                    }
                }
            }
        }
        4 if !g.initializer.is_empty() => {
            let k = rng.below(g.initializer.len());
            g.initializer.remove(k);
        }
        5 => {
            let attrs: Vec<&mut onnx::AttributeProto> = g
                .node
                .iter_mut()
                .flat_map(|n| n.attribute.iter_mut())
                .collect();
            let n = attrs.len();
            let k = rng.below(n);
            if let Some(a) = attrs.into_iter().nth(k) {
                a.i = Some([-9i64, 0, 5, 1 << 40][rng.below(4)]);
                if !a.ints.is_empty() {
                    let k = rng.below(a.ints.len());
                    a.ints[k] = [-9i64, 0, 99][rng.below(3)];
                }
            }
        }
        6 if g.node.len() > 1 => {
            let (a, b) = (rng.below(g.node.len()), rng.below(g.node.len()));
            if let (Some(o), true) = (
                g.node[a].output.first().cloned(),
                !g.node[b].output.is_empty(),
            ) {
                g.node[b].output[0] = o;
            }
        }
        7 if !g.initializer.is_empty() => {
            let k = rng.below(g.initializer.len());
            let t = &mut g.initializer[k];
            match rng.below(3) {
                0 => t.raw_data = Some(Vec::new().into()),
                1 => t.dims.push(3),
                _ => t.data_type = Some(99),
            }
        }
        _ => {
            if !g.output.is_empty() {
                let k = rng.below(g.output.len());
                g.output.remove(k);
            }
        }
    }
}

/// An opset import's version set outside the registry's range or to its edge (0, -1, 1, 26,
/// 27, 2^40, `i64::MAX`), a domain imported twice, or the IR version set below 3.
fn mutate_opsets(model: &mut ModelProto, rng: &mut Rng) {
    match rng.below(4) {
        0 => model.ir_version = Some([0i64, 1, 2][rng.below(3)]),
        1 if !model.opset_import.is_empty() => {
            let k = rng.below(model.opset_import.len());
            let twin = model.opset_import[k].clone();
            model.opset_import.push(twin);
        }
        _ if !model.opset_import.is_empty() => {
            let k = rng.below(model.opset_import.len());
            let v = [0i64, -1, 1, 26, 27, 1 << 40, i64::MAX][rng.below(7)];
            model.opset_import[k].version = Some(v);
        }
        _ => {}
    }
}

/// An initializer's external-data `length` removed, or set to a wrong, negative, huge or
/// malformed value (an embedded one is made external first).
fn mutate_external_length(g: &mut onnx::GraphProto, rng: &mut Rng) {
    if g.initializer.is_empty() {
        return;
    }
    let k = rng.below(g.initializer.len());
    let t = &mut g.initializer[k];
    if t.data_location != Some(onnx::tensor_proto::DataLocation::External as i32) {
        t.raw_data = None;
        t.data_location = Some(onnx::tensor_proto::DataLocation::External as i32);
        t.external_data = vec![onnx::StringStringEntryProto {
            key: Some("location".into()),
            value: Some("w.data".into()),
        }];
    }
    t.external_data
        .retain(|e| e.key.as_deref() != Some("length"));
    let value = ["0", "100", "-1", "18446744073709551615", "abc"][rng.below(5)];
    if rng.below(6) != 0 {
        t.external_data.push(onnx::StringStringEntryProto {
            key: Some("length".into()),
            value: Some(value.into()),
        });
    }
}

/// A chain of `Neg` nodes spliced in front of one node input: 10 to 1,000 nodes, and 1 time
/// in 256 a chain of 100,000 (deeper than any recursive walk survives).
fn lengthen_chain(g: &mut onnx::GraphProto, rng: &mut Rng) {
    let Some(k) = (!g.node.is_empty()).then(|| rng.below(g.node.len())) else {
        return;
    };
    if g.node[k].input.is_empty() {
        return;
    }
    let slot = rng.below(g.node[k].input.len());
    let links = if rng.below(256) == 0 {
        100_000
    } else {
        [10, 100, 1000][rng.below(3)]
    };
    let mut prev = g.node[k].input[slot].clone();
    let mut chain = Vec::with_capacity(links);
    for i in 0..links {
        let next = format!("fuzz_chain_{i}");
        chain.push(onnx::NodeProto {
            input: vec![prev],
            output: vec![next.clone()],
            op_type: Some("Neg".into()),
            ..Default::default()
        });
        prev = next;
    }
    g.node[k].input[slot] = prev;
    g.node.splice(k..k, chain);
}

/// How far [`exercise`] drives an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Depth {
    /// Import only.
    Import,
    /// Import and the whole analysis (inference, phases, schedule, simulation, ledger).
    Analyse,
    /// And recompute candidates, the solver's problem and a greedy plan.
    Candidates,
    /// And the whole main job (ILP rounds, search, rewrite, verify) at 90% of the total.
    Plan,
}

impl std::str::FromStr for Depth {
    type Err = String;
    fn from_str(s: &str) -> Result<Depth, String> {
        match s {
            "import" => Ok(Depth::Import),
            "analyse" => Ok(Depth::Analyse),
            "candidates" => Ok(Depth::Candidates),
            "plan" => Ok(Depth::Plan),
            _ => Err(format!(
                "`{s}`: depth is import, analyse, candidates or plan"
            )),
        }
    }
}

/// How far an input got: refused at import, refused by the analysis, or through to the depth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reached {
    RefusedAtImport,
    RefusedAtAnalysis,
    Through,
    /// An answer that came back `Ok` but is wrong: a greedy plan over its ceiling, or a
    /// rewrite whose predicted device total is over the job's ceiling.
    WrongAnswer(String),
}

/// Drive one model file through the pipeline to `depth`; the main job (at [`Depth::Plan`])
/// gets `plan_time_limit`. Panics are the caller's to catch.
pub fn exercise(bytes: &[u8], depth: Depth, plan_time_limit: Duration) -> Reached {
    let path = Path::new("mutated.onnx");
    let Ok(g) = ckpt_ir::import_bytes(bytes.to_vec().into(), path, None) else {
        return Reached::RefusedAtImport;
    };
    if depth == Depth::Import {
        return Reached::Through;
    }
    // The ORT training artifacts name their dims `batch` and `seq`.
    let b: Bindings = [("batch".to_string(), 2), ("seq".to_string(), 8)]
        .into_iter()
        .collect();
    let Ok(a) =
        ckpt_opt::pipeline::analyse(g, &ckpt_planner::AnalyseOptions::with_bindings(b.clone()))
    else {
        return Reached::RefusedAtAnalysis;
    };
    if depth == Depth::Analyse {
        return Reached::Through;
    }
    let cands = ckpt_passes::recompute::candidates(&a.graph, &a.sim, &a.types, &b);
    let prob = ckpt_passes::recompute::problem(&a.sim, &cands, a.sim.peak_live / 2);
    // An error is an answer; a panic or an `Ok` that is wrong is a finding.
    if let Ok(p) = ckpt_solver::solve_greedy(&prob) {
        let e = ckpt_solver::evaluate(&prob, &p.recompute);
        if !e.fits(prob.ceiling) {
            return Reached::WrongAnswer(format!(
                "the greedy plan peaks at {} B, over its ceiling of {} B",
                e.peak, prob.ceiling
            ));
        }
    }
    if depth == Depth::Candidates {
        return Reached::Through;
    }
    let job = ckpt_opt::job::Job {
        model: path.to_path_buf(),
        ceiling: a.ledger.total_bytes / 10 * 9,
        output: None,
        analysis: ckpt_planner::AnalyseOptions::with_bindings(b),
        reserve_pct: 0.0,
        time_limit: plan_time_limit,
        refusal_probes: 0,
        search_steps: ckpt_planner::PASS_STEPS,
    };
    let ceiling = job.ceiling;
    // The analysis made above is the job's: plan from it rather than analyse again.
    let planned = job.plan(a);
    if let Some(r) = planned.as_ref().ok().and_then(|p| p.rewritten()) {
        if r.after.ledger.total_bytes > ceiling {
            return Reached::WrongAnswer(format!(
                "the rewrite's predicted device total {} B is over the ceiling of {ceiling} B",
                r.after.ledger.total_bytes
            ));
        }
    }
    Reached::Through
}

/// Whether `bytes` panics at `depth` (the panic message, if so).
pub fn panics(bytes: &[u8], depth: Depth, plan_time_limit: Duration) -> Option<String> {
    catch_unwind(AssertUnwindSafe(|| exercise(bytes, depth, plan_time_limit)))
        .err()
        .map(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into())
        })
}

/// A smaller input that still panics: structural first (drop nodes, initializers, value_info,
/// outputs one at a time while the panic stays), then bytes (drop chunks, halving their size).
/// At most `budget` trial runs.
pub fn minimize(bytes: &[u8], depth: Depth, plan_time_limit: Duration, budget: usize) -> Vec<u8> {
    let mut trials = 0usize;
    let mut still = |b: &[u8]| {
        trials += 1;
        trials <= budget && panics(b, depth, plan_time_limit).is_some()
    };
    let mut best = bytes.to_vec();
    if let Ok(mut m) = ModelProto::decode(bytes) {
        type Field = fn(&mut onnx::GraphProto) -> usize;
        let lens: [Field; 4] = [
            |g| g.node.len(),
            |g| g.initializer.len(),
            |g| g.value_info.len(),
            |g| g.output.len(),
        ];
        for (f, len) in lens.iter().enumerate() {
            let mut i = m.graph.as_mut().map(len).unwrap_or(0);
            while i > 0 {
                i -= 1;
                let mut trial = m.clone();
                if let Some(g) = trial.graph.as_mut() {
                    match f {
                        0 => {
                            g.node.remove(i);
                        }
                        1 => {
                            g.initializer.remove(i);
                        }
                        2 => {
                            g.value_info.remove(i);
                        }
                        _ => {
                            g.output.remove(i);
                        }
                    }
                }
                let enc = trial.encode_to_vec();
                if still(&enc) {
                    m = trial;
                    best = enc;
                }
            }
        }
    }
    let mut chunk = best.len() / 2;
    while chunk > 0 {
        let mut at = 0;
        while at < best.len() {
            let end = (at + chunk).min(best.len());
            let trial: Vec<u8> = best[..at].iter().chain(&best[end..]).copied().collect();
            if still(&trial) {
                best = trial;
            } else {
                at += chunk;
            }
        }
        chunk /= 2;
    }
    best
}

/// A fuzzing campaign's settings.
#[derive(Clone, Debug)]
pub struct FuzzOptions {
    pub seed: u64,
    /// Stop after this many executions…
    pub execs: u64,
    /// …or this long, whichever comes first.
    pub time: Option<Duration>,
    pub depth: Depth,
    /// The main job's time limit at [`Depth::Plan`].
    pub plan_time_limit: Duration,
    /// Where crashing inputs (and their minimized forms) are written; none: not written.
    pub crash_dir: Option<PathBuf>,
    /// Trial runs allowed to minimize each crash.
    pub minimize_budget: usize,
    /// Called with each input just before it runs (the fuzzer binary keeps it, to save it if
    /// the process aborts: an allocation failure or a stack overflow is not a panic).
    pub before_exec: Option<fn(&[u8])>,
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
            before_exec: None,
        }
    }
}

/// One crash: the panic, the input, its minimized form and where they were written.
#[derive(Clone, Debug)]
pub struct Crash {
    pub exec: u64,
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
    pub crashes: Vec<Crash>,
}

impl FuzzReport {
    pub fn execs_per_second(&self) -> f64 {
        self.execs as f64 / self.elapsed.as_secs_f64().max(1e-9)
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

/// Run a seeded campaign over `seeds` (see the module doc). Half the executions mutate bytes,
/// half structure (one to three mutations of a decoded model); inputs that got through join a
/// pool the later executions also draw from.
pub fn fuzz(seeds: &[(String, Vec<u8>)], opts: &FuzzOptions) -> FuzzReport {
    let mut rng = Rng::new(opts.seed);
    let decoded: Vec<ModelProto> = seeds
        .iter()
        .filter_map(|(_, b)| ModelProto::decode(b.as_slice()).ok())
        .collect();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut report = FuzzReport::default();
    let t0 = Instant::now();
    if seeds.is_empty() {
        return report;
    }
    while report.execs < opts.execs && opts.time.is_none_or(|t| t0.elapsed() < t) {
        let input = match rng.below(4) {
            0 | 1 if !decoded.is_empty() => {
                let mut m = decoded[rng.below(decoded.len())].clone();
                for _ in 0..1 + rng.below(3) {
                    mutate_structure(&mut m, &mut rng);
                }
                m.encode_to_vec()
            }
            2 if !pool.is_empty() => {
                let mut b = pool[rng.below(pool.len())].clone();
                mutate_bytes(&mut b, &mut rng);
                b
            }
            _ => {
                let mut b = seeds[rng.below(seeds.len())].1.clone();
                mutate_bytes(&mut b, &mut rng);
                b
            }
        };
        let exec = report.execs;
        report.execs += 1;
        if let Some(f) = opts.before_exec {
            f(&input);
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            exercise(&input, opts.depth, opts.plan_time_limit)
        }));
        match outcome {
            Ok(Reached::RefusedAtImport) => report.refused_at_import += 1,
            Ok(Reached::RefusedAtAnalysis) => report.refused_at_analysis += 1,
            Ok(Reached::Through) => {
                report.through += 1;
                if pool.len() < POOL_LIMIT {
                    pool.push(input);
                } else {
                    let k = rng.below(POOL_LIMIT);
                    pool[k] = input;
                }
            }
            found @ (Ok(Reached::WrongAnswer(_)) | Err(_)) => {
                let message = match found {
                    Ok(Reached::WrongAnswer(m)) => format!("wrong answer: {m}"),
                    _ => panics(&input, opts.depth, opts.plan_time_limit).unwrap_or_else(|| {
                        "panicked once, not on a rerun (state-dependent)".into()
                    }),
                };
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
                report.crashes.push(Crash {
                    exec,
                    message,
                    input,
                    minimized,
                    written,
                });
            }
        }
    }
    report.elapsed = t0.elapsed();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_seeded() {
        let base: Vec<u8> = (0..64).collect();
        let run = |seed| {
            let mut rng = Rng::new(seed);
            let mut b = base.clone();
            mutate_bytes(&mut b, &mut rng);
            b
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), base);
    }

    #[test]
    fn minimize_keeps_the_property() {
        // Nothing here panics, so the minimizer must return the input unchanged.
        let b = vec![1u8, 2, 3];
        assert_eq!(minimize(&b, Depth::Import, Duration::ZERO, 100), b);
    }
}
