//! The main job's planning, CLI side: the planner ([`ckpt_planner`]) run on a
//! [`crate::job::Job`], and what the CLI writes and prints of the result (files, the
//! diagnosis in words).
//!
//! The planning itself (analysis, ILP rounds, search, cut, lowered terms) is
//! [`ckpt_planner`]'s; this module only turns a job into [`ckpt_planner::PlanOptions`] and the
//! planner's typed outcome into the CLI's.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;

use ckpt_ir::{export_bytes, write_atomic, Graph};
use ckpt_passes::recompute::Candidates;
use ckpt_planner::IlpReport;
use ckpt_solver::Plan;

pub use ckpt_planner::{
    default_threads, step_flops, with_inferred_types, AnalyseOptions, Analysis, RewriteCounts,
};

use crate::job::Job;
use crate::receipt::{Diagnosis, DiagnosisKind};

/// The analysis stage, on the progress line.
pub(crate) fn analysing() {
    crate::progress::stage("analysing: shape inference, ORT's schedule, the simulated arena");
}

/// The analysis of a graph ([`ckpt_planner::analyse`]), shown on the progress line.
pub fn analyse(graph: Graph, o: &AnalyseOptions) -> Result<Analysis> {
    analysing();
    Ok(ckpt_planner::analyse(graph, o)?)
}

/// How the job ended.
pub enum Outcome {
    /// Already under the ceiling; nothing to do.
    AlreadyFits { before: Analysis },
    /// No plan can fit: the diagnosis.
    CannotFit {
        before: Analysis,
        diagnosis: Diagnosis,
    },
    /// Rewritten.
    Rewritten(Box<Rewritten>),
}

pub struct Rewritten {
    pub before: Analysis,
    pub after: Analysis,
    pub cands: Candidates,
    pub plan: Plan,
    pub patch_text: String,
    /// What the written patch does.
    pub counts: RewriteCounts,
    pub arena_ceiling: u64,
    pub solve_attempts: usize,
    /// What the ILP on the linear model gave, whether or not its plan was used.
    pub ilp: IlpReport,
    /// The time limit stopped some part of the search (an ILP round, the climb or the cut):
    /// the plan is the best found by then, and may differ on a faster or less loaded machine.
    pub time_limit_hit: bool,
    /// The plan moves nodes first (zero FLOPs): the leaves into the order their inputs become
    /// ready, the backward-only terms to run in backward.
    pub lowered: bool,
    /// The plan guards the graph's constant reshape targets first (zero FLOPs,
    /// `ckpt_passes::guards`).
    pub guarded: bool,
    /// The graph `cands` and `plan` index when the plan is of a variant (terms moved, targets
    /// guarded); else they index `before.graph`.
    pub planned_graph: Option<Graph>,
}

impl Rewritten {
    /// How the plan was found, as a reader says it: `ILP, proven optimal`, `search with the
    /// simulator in the loop (no optimality bound)`, or `order moves only` for a plan that
    /// recomputes nothing.
    pub fn method_label(&self) -> String {
        ckpt_planner::method_label(&self.plan, self.lowered, self.guarded)
    }

    /// The graph the candidates and the plan index.
    pub fn planned(&self) -> &Graph {
        self.planned_graph.as_ref().unwrap_or(&self.before.graph)
    }
}

/// Run the job up to (not including) writing.
pub fn plan(job: &Job, graph: Graph) -> Result<Outcome> {
    let t0 = Instant::now();
    let before = analyse(graph, &job.analysis)?;
    plan_analysed(job, before, t0)
}

/// [`plan`] from the analysis of the unmodified graph (for a ceiling relative to its
/// footprint); the time limit counts from `t0`.
pub fn plan_analysed(job: &Job, before: Analysis, t0: Instant) -> Result<Outcome> {
    plan_analysed_on(job, before, t0, default_threads())
}

/// [`plan_analysed`] with trials simulated on `threads` threads: the same plan on any number.
pub fn plan_analysed_on(
    job: &Job,
    before: Analysis,
    t0: Instant,
    threads: usize,
) -> Result<Outcome> {
    plan_costed(job, before, t0, threads, None)
}

/// [`plan_analysed_on`] costing recompute by `costs` (measured per-node times of `before`'s
/// graph, see [`ckpt_validate::measured_cost`]) instead of FLOPs; `None`: FLOPs. [`ckpt_planner::plan`] does
/// the work (with measured costs, no lowered-terms pass).
pub fn plan_costed(
    job: &Job,
    before: Analysis,
    t0: Instant,
    threads: usize,
    costs: Option<&ckpt_validate::measured_cost::NodeCosts>,
) -> Result<Outcome> {
    let options = job.plan_options(t0, threads, costs);
    Ok(match ckpt_planner::plan(&before, &options)? {
        ckpt_planner::Outcome::AlreadyFits => Outcome::AlreadyFits { before },
        ckpt_planner::Outcome::CannotFit(d) => {
            let diagnosis = diagnosis(&d);
            Outcome::CannotFit { before, diagnosis }
        }
        ckpt_planner::Outcome::Rewritten(r) => {
            let r = *r;
            Outcome::Rewritten(Box::new(Rewritten {
                before,
                after: r.after,
                cands: r.cands,
                plan: r.plan,
                patch_text: r.patch_text,
                counts: r.counts,
                arena_ceiling: r.arena_ceiling,
                solve_attempts: r.solve_attempts,
                ilp: r.ilp,
                time_limit_hit: r.time_limit_hit,
                lowered: r.lowered,
                guarded: r.guarded,
                planned_graph: r.planned_graph,
            }))
        }
    })
}

/// The planner's diagnosis, for the receipt.
pub fn diagnosis(d: &ckpt_planner::Diagnosis) -> Diagnosis {
    Diagnosis {
        kind: match d.kind {
            ckpt_planner::DiagnosisKind::FixedExceedsCeiling => DiagnosisKind::FixedExceedsCeiling,
            ckpt_planner::DiagnosisKind::NoPlanFound => DiagnosisKind::NoPlanFound,
        },
        effective_ceiling_bytes: d.effective_ceiling_bytes,
        fixed_bytes: d.fixed_bytes,
        lowest_reachable_total_bytes: d.lowest_reachable_total_bytes,
        dominant_ledger_line: d.dominant_ledger_line.clone(),
        timed_out: d.timed_out,
        steps_spent: d.steps_spent,
        ceilings_probed: d.ceilings_probed,
        message: d.message.clone(),
    }
}

/// `model.onnx` → `model.ckpt.onnx` beside it.
pub fn default_output(model: &Path) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    model.with_file_name(format!("{stem}.ckpt.onnx"))
}

/// Write the graph atomically, never over the input.
pub fn write(graph: &Graph, out: &Path, input: &Path) -> Result<Vec<u8>> {
    let bytes = export_bytes(graph);
    write_atomic(out, &bytes, Some(input))?;
    Ok(bytes)
}

/// sha256 of a file, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}
