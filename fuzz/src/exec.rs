//! One execution of the fuzzer: a model file driven through the pipeline to a [`Depth`] —
//! import → analyse → candidates and a greedy plan → an export of that plan's rewrite → the
//! main job's plan → its written output — and what came of it ([`Reached`]). Every stage
//! returns `Ok` or a typed error; a panic, an `Ok` that is wrong, an output that breaks
//! ONNX's rules ([`ckpt_ir::check_model_rules`]) or does not import again, and an input file
//! the execution changed are findings.
//!
//! [`Sandbox`] runs inputs from files, as the CLI reads them: the model in a folder of its
//! own beside a data file its external initializers may name, both compared byte for byte
//! after every execution. [`minimize`] shrinks an input while it still gives a finding.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ckpt_ir::onnx::{self, ModelProto};
use ckpt_ir::{Bindings, Graph, Message};

/// How far [`exercise`] drives an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Depth {
    /// Import only.
    Import,
    /// Import and the whole analysis (inference, phases, schedule, simulation, ledger).
    Analyse,
    /// And recompute candidates, the solver's problem and a greedy plan.
    Candidates,
    /// And the greedy plan's rewrite (or the graph as imported, when it recomputes nothing)
    /// with the profile recorded, exported, checked against ONNX's rules and imported again.
    Export,
    /// And the whole main job (ILP rounds, search, rewrite, verify) at 90% of the total.
    Plan,
    /// And the main job's output (the rewrite, or the graph as imported when it already
    /// fits) exported, checked against ONNX's rules and imported again.
    Write,
}

impl std::str::FromStr for Depth {
    type Err = String;
    fn from_str(s: &str) -> Result<Depth, String> {
        match s {
            "import" => Ok(Depth::Import),
            "analyse" => Ok(Depth::Analyse),
            "candidates" => Ok(Depth::Candidates),
            "export" => Ok(Depth::Export),
            "plan" => Ok(Depth::Plan),
            "write" => Ok(Depth::Write),
            _ => Err(format!(
                "`{s}`: depth is import, analyse, candidates, export, plan or write"
            )),
        }
    }
}

/// How far an input got: refused at import, refused by the analysis, or through to the depth;
/// or a finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reached {
    RefusedAtImport,
    RefusedAtAnalysis,
    Through,
    /// An answer that came back `Ok` but is wrong: a greedy plan over its ceiling, or a
    /// rewrite whose predicted device total is over the job's ceiling.
    WrongAnswer(String),
    /// An output that breaks an ONNX rule or does not import again.
    RuleBroken(String),
    /// The execution changed its input model or data file.
    InputChanged(String),
}

/// Where the execution's model came from: its name in messages and its folder (`None`: a
/// model without a folder, whose external data is refused).
struct Source<'a> {
    path: &'a Path,
    dir: Option<&'a Path>,
}

/// Drive one model file's bytes through the pipeline to `depth` (no folder: external data is
/// refused); the main job (at [`Depth::Plan`] and beyond) gets `plan_time_limit`. Panics are
/// the caller's to catch.
pub fn exercise(bytes: &[u8], depth: Depth, plan_time_limit: Duration) -> Reached {
    let path = Path::new("mutated.onnx");
    let Ok(g) = ckpt_ir::import_bytes(bytes.to_vec().into(), path, None) else {
        return Reached::RefusedAtImport;
    };
    let source = Source { path, dir: None };
    drive(g, &source, depth, plan_time_limit).0
}

/// [`exercise`] after import: the stages from the analysis on, and the output written, if
/// the depth writes one and it met the rules.
fn drive(
    g: Graph,
    source: &Source<'_>,
    depth: Depth,
    plan_time_limit: Duration,
) -> (Reached, Option<ModelProto>) {
    if depth == Depth::Import {
        return (Reached::Through, None);
    }
    // The ORT training artifacts name their dims `batch` and `seq`.
    let b: Bindings = [("batch".to_string(), 2), ("seq".to_string(), 8)]
        .into_iter()
        .collect();
    let options = ckpt_planner::AnalyseOptions::with_bindings(b.clone());
    let Ok(a) = ckpt_planner::analyse(g, &options) else {
        return (Reached::RefusedAtAnalysis, None);
    };
    if depth == Depth::Analyse {
        return (Reached::Through, None);
    }
    let cands = ckpt_passes::recompute::candidates(&a.graph, &a.sim, &a.types, &b);
    let prob = ckpt_passes::recompute::problem(&a.sim, &cands, a.sim.peak_live / 2);
    // An error is an answer; a panic or an `Ok` that is wrong is a finding.
    let greedy = ckpt_solver::solve_greedy(&prob);
    if let Ok(p) = &greedy {
        let e = ckpt_solver::evaluate(&prob, &p.recompute);
        if !e.fits(prob.ceiling) {
            let m = format!(
                "the greedy plan peaks at {} B, over its ceiling of {} B",
                e.peak, prob.ceiling
            );
            return (Reached::WrongAnswer(m), None);
        }
    }
    let ceiling = a.ledger.total_bytes / 10 * 9;
    match depth {
        Depth::Candidates => (Reached::Through, None),
        Depth::Export => {
            let mut g = a.graph.clone();
            if let Some(p) = greedy.ok().filter(|p| p.recompute.iter().any(|&x| x)) {
                let patch = ckpt_passes::recompute::rewrite(&a.graph, &cands, &p, "greedy");
                if patch.apply(&mut g).is_err() {
                    return (Reached::Through, None);
                }
            }
            let md = ckpt_planner::recorded_metadata(&options.profile, ceiling, &a.ledger);
            written(g, md, source)
        }
        _ => plan_and_write(a, options, ceiling, source, depth, plan_time_limit),
    }
}

/// The main job's plan at `ceiling` ([`Depth::Plan`]), and its output written
/// ([`Depth::Write`]).
fn plan_and_write(
    a: ckpt_planner::Analysis,
    options: ckpt_planner::AnalyseOptions,
    ceiling: u64,
    source: &Source<'_>,
    depth: Depth,
    plan_time_limit: Duration,
) -> (Reached, Option<ModelProto>) {
    let mut o = ckpt_planner::PlanOptions::new(ceiling, options);
    o.time_limit = plan_time_limit;
    o.threads = 1;
    o.refusal_probes = 0;
    match ckpt_planner::plan(&a, &o) {
        Ok(ckpt_planner::Outcome::Rewritten(r)) => {
            if r.after.ledger.total_bytes > ceiling {
                let m = format!(
                    "the rewrite's predicted device total {} B is over the ceiling of {ceiling} B",
                    r.after.ledger.total_bytes
                );
                return (Reached::WrongAnswer(m), None);
            }
            if depth == Depth::Write {
                return written(r.after.graph, Vec::new(), source);
            }
        }
        Ok(ckpt_planner::Outcome::AlreadyFits) if depth == Depth::Write => {
            let md = o.recorded_metadata(&a.ledger);
            return written(a.graph, md, source);
        }
        _ => {}
    }
    (Reached::Through, None)
}

/// `g` with `metadata` recorded, exported as the write stage stages it (small external
/// constants embedded), checked against ONNX's rules and imported again.
fn written(
    mut g: Graph,
    metadata: Vec<(String, String)>,
    source: &Source<'_>,
) -> (Reached, Option<ModelProto>) {
    if !metadata.is_empty() {
        let patch = ckpt_ir::Patch {
            label: "record the deployment profile".into(),
            metadata,
            ..Default::default()
        };
        if let Err(e) = patch.apply(&mut g) {
            return (
                Reached::RuleBroken(format!("recording the profile: {e}")),
                None,
            );
        }
    }
    let mut proto = ckpt_ir::export(&g);
    if let Some(dir) = source.dir {
        ckpt_ir::embed_small_external(&mut proto, dir);
    }
    if let Err(e) = ckpt_ir::check_model_rules(&proto, source.dir) {
        return (
            Reached::RuleBroken(format!("the output breaks a rule: {e}")),
            None,
        );
    }
    if let Err(e) = ckpt_ir::import_model(proto.clone(), source.path, source.dir) {
        let m = format!("the output does not import again: {e}");
        return (Reached::RuleBroken(m), None);
    }
    (Reached::Through, Some(proto))
}

/// The message of a finding on `bytes` at `depth`, if there is one: `panic: `, `wrong
/// answer: `, `rule broken: ` or `input changed: ` and what happened.
pub fn finding(bytes: &[u8], depth: Depth, plan_time_limit: Duration) -> Option<String> {
    match catch_unwind(AssertUnwindSafe(|| exercise(bytes, depth, plan_time_limit))) {
        Ok(Reached::WrongAnswer(m)) => Some(format!("wrong answer: {m}")),
        Ok(Reached::RuleBroken(m)) => Some(format!("rule broken: {m}")),
        Ok(Reached::InputChanged(m)) => Some(format!("input changed: {m}")),
        Ok(_) => None,
        Err(p) => Some(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into())
        )),
    }
}

/// A folder the inputs run from: `m.onnx` (each input in turn) beside `w.data`, the data
/// file external initializers name (4 KiB of a byte pattern, so that small ones resolve).
pub struct Sandbox {
    dir: PathBuf,
    model: PathBuf,
    data: PathBuf,
    data_bytes: Vec<u8>,
}

/// What one sandboxed execution gave: how far it got, and its output if it wrote one.
pub struct Executed {
    pub reached: Reached,
    pub output: Option<Vec<u8>>,
}

impl Sandbox {
    /// A fresh folder `dir` (made; emptied by [`Sandbox::remove`]).
    pub fn new(dir: &Path) -> std::io::Result<Sandbox> {
        std::fs::create_dir_all(dir)?;
        let data_bytes: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let data = dir.join("w.data");
        std::fs::write(&data, &data_bytes)?;
        Ok(Sandbox {
            dir: dir.to_path_buf(),
            model: dir.join("m.onnx"),
            data,
            data_bytes,
        })
    }

    /// Run `input` from `m.onnx` to `depth`, then compare both files with what they held.
    /// Panics are the caller's to catch.
    pub fn run(&self, input: &[u8], depth: Depth, plan_time_limit: Duration) -> Executed {
        if let Err(e) = std::fs::write(&self.model, input) {
            let m = format!("cannot write {}: {e}", self.model.display());
            return Executed {
                reached: Reached::InputChanged(m),
                output: None,
            };
        }
        let (reached, output) = match ckpt_ir::import_file(&self.model) {
            Err(_) => (Reached::RefusedAtImport, None),
            Ok(g) => {
                let source = Source {
                    path: &self.model,
                    dir: Some(&self.dir),
                };
                drive(g, &source, depth, plan_time_limit)
            }
        };
        let changed = [
            (&self.model, input),
            (&self.data, self.data_bytes.as_slice()),
        ]
        .into_iter()
        .find(|(p, bytes)| std::fs::read(p).ok().as_deref() != Some(*bytes));
        if let Some((p, _)) = changed {
            let m = format!("{} differs from what it held before the run", p.display());
            return Executed {
                reached: Reached::InputChanged(m),
                output: None,
            };
        }
        Executed {
            reached,
            output: output.map(|m| m.encode_to_vec()),
        }
    }

    /// Remove the folder and what is in it.
    pub fn remove(self) -> std::io::Result<()> {
        std::fs::remove_dir_all(&self.dir)
    }
}

/// A smaller input that still gives a finding of the same kind: structural first (drop nodes,
/// initializers, value_info, outputs one at a time while the finding stays), then bytes (drop
/// chunks, halving their size). At most `budget` trial runs.
pub fn minimize(bytes: &[u8], depth: Depth, plan_time_limit: Duration, budget: usize) -> Vec<u8> {
    let kind = |m: String| m.split(':').next().map(str::to_string);
    let Some(wanted) = finding(bytes, depth, plan_time_limit).and_then(kind) else {
        return bytes.to_vec();
    };
    let mut trials = 0usize;
    let mut still = |b: &[u8]| {
        trials += 1;
        trials <= budget
            && finding(b, depth, plan_time_limit).and_then(kind).as_ref() == Some(&wanted)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimize_keeps_the_property() {
        // Nothing here is a finding, so the minimizer must return the input unchanged.
        let b = vec![1u8, 2, 3];
        assert_eq!(minimize(&b, Depth::Import, Duration::ZERO, 100), b);
    }
}
