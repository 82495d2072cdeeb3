//! What [`crate::plan`] returns: an [`Outcome`] (already fits, a [`Diagnosis`] of why no plan
//! fits, or a [`Rewritten`] plan made real), with what the ILP rounds did ([`IlpReport`]) and
//! what the rewrite adds ([`RewriteCounts`]).
//!
//! Invariants: every type here is `Serialize`, with the field names and values the receipt
//! records (kinds in `snake_case`, a solver status by its name); analyses, candidates, plans
//! and graphs are the caller's to print and are skipped. A [`Diagnosis`] names the dominant
//! ledger line of the lowest plan found (the rewrite whose total is its
//! `lowest_reachable_total_bytes`), and is worded ([`Diagnosis::message`]) with the given
//! graph's fixed bytes and the options it was planned with.

use schemars::JsonSchema;
use serde::{Serialize, Serializer};

use ckpt_passes::ledger::Ledger;
use ckpt_passes::recompute::{rewrite, Candidates};
use ckpt_solver::{Plan, Problem, Status};

use crate::analysis::Analysis;
use crate::options::PlanOptions;

/// Why no plan fits: `fixed_exceeds_ceiling`, what the caller feeds alone is over the
/// ceiling; `no_plan_found`, the lowest total found under the profile is over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosisKind {
    /// What the caller feeds alone (parameters, optimizer state, data) is over the ceiling.
    FixedExceedsCeiling,
    /// The lowest total found under the profile is over it.
    NoPlanFound,
}

/// Why no plan fits, as data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Diagnosis {
    pub kind: DiagnosisKind,
    /// The ceiling after the reserve.
    pub effective_ceiling_bytes: u64,
    pub fixed_bytes: u64,
    /// The lowest device total the oracle gave any set the planner tried (recomputing every
    /// candidate, the search's best, or no recompute): a total some set reaches, not a bound.
    pub lowest_reachable_total_bytes: u64,
    /// The largest line of the ledger of the lowest plan found: the rewrite (or the graph as
    /// given, or a zero-FLOP variant of it, where recomputing nothing is the lowest) whose
    /// total is `lowest_reachable_total_bytes`. Where the fixed bytes exceed the ceiling, the
    /// given graph's.
    pub dominant_ledger_line: String,
    /// The time limit stopped the search (a longer one may find a plan).
    pub timed_out: bool,
    /// The steps the pass's searches may simulate ([`PlanOptions::pass_steps`]) ran out and
    /// stopped a search (a larger budget may find a plan).
    pub steps_spent: bool,
    /// Ceilings between this one and the lowest total found that were planned again to lower
    /// that total ([`PlanOptions::refusal_probes`]; none is started once the time left is
    /// less than twice the longest planning pass so far).
    pub ceilings_probed: usize,
    /// Rungs of the ladder below the ceiling that were planned ([`PlanOptions::ladder_rungs`]:
    /// at most one where the first rung has no plan either).
    pub rungs_planned: usize,
    /// The same in one sentence (empty until [`crate::plan`] words it).
    pub message: String,
}

impl Diagnosis {
    /// A refusal of a graph whose ledger is `ledger`, not yet worded; `ledger` is also the
    /// lowest plan's (its dominant line is named) until [`Diagnosis::lowest_at`] says
    /// otherwise.
    pub(crate) fn new(
        kind: DiagnosisKind,
        effective: u64,
        lowest_reachable_total_bytes: u64,
        ledger: &Ledger,
    ) -> Diagnosis {
        Diagnosis {
            kind,
            effective_ceiling_bytes: effective,
            fixed_bytes: ledger.fixed_bytes,
            lowest_reachable_total_bytes,
            dominant_ledger_line: ledger.dominant().to_string(),
            timed_out: false,
            steps_spent: false,
            ceilings_probed: 0,
            rungs_planned: 0,
            message: String::new(),
        }
    }

    /// This refusal with `total` as its lowest reachable total, reached by a plan whose
    /// ledger's dominant line is `dominant`.
    pub(crate) fn lowest_at(self, total: u64, dominant: &str) -> Diagnosis {
        Diagnosis {
            lowest_reachable_total_bytes: total,
            dominant_ledger_line: dominant.to_string(),
            ..self
        }
    }

    /// This refusal worded for the user: `ledger` is the given graph's, `o` the options it
    /// was planned with.
    pub(crate) fn worded(self, ledger: &Ledger, o: &PlanOptions) -> Diagnosis {
        let message = match self.kind {
            DiagnosisKind::FixedExceedsCeiling => format!(
                "parameters + optimizer state + data inputs = {} ({} + {} + {}) already exceed the ceiling of {} (after {}% reserve); recompute cannot help",
                human(self.fixed_bytes),
                human(ledger.parameters_bytes),
                human(ledger.optimizer_state_bytes),
                human(ledger.data_bytes),
                human(self.effective_ceiling_bytes),
                o.reserve_pct
            ),
            DiagnosisKind::NoPlanFound => format!(
                "no recompute plan fits: the lowest device total found under the deployment profile (recomputing every candidate, the search's best, or a plan found at a ceiling in between) is {} ({} fixed + {} arena), above the ceiling of {}; dominant ledger line: {}{}{}",
                human(self.lowest_reachable_total_bytes),
                human(self.fixed_bytes),
                human(self.lowest_reachable_total_bytes.saturating_sub(self.fixed_bytes)),
                human(self.effective_ceiling_bytes),
                self.dominant_ledger_line,
                if self.timed_out {
                    format!(" (the search stopped at the time limit of {} s; a longer --time-limit may find a plan)", o.time_limit.as_secs_f64())
                } else {
                    String::new()
                },
                if self.steps_spent {
                    format!(" (the searches spent their budget of {} schedule steps; a larger --search-steps may find a plan)", o.pass_steps)
                } else {
                    String::new()
                }
            ),
        };
        Diagnosis { message, ..self }
    }
}

/// `1.50 GiB`, `12.0 MiB`, `512 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// What a rewrite adds to the graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RewriteCounts {
    /// FLOPs the rewritten graph really adds: its clones (a node shared by several recompute
    /// chains is cloned once; moves add nothing). `plan.cost`, the model's sum over
    /// candidates, counts shared nodes once per chain.
    pub added_flops: u64,
    /// Nodes cloned, and nodes moved later instead (they run once).
    pub cloned: usize,
    pub moved: usize,
}

/// One round of the simulator-corrected ILP.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum IlpRound {
    /// The ILP answered with a plan of no proven quality: the rounds stop.
    Unproven {
        round: usize,
        #[serde(serialize_with = "status_name")]
        status: Status,
        seconds: f64,
    },
    /// The ILP found no plan (or proved there is none): the rounds stop.
    NoPlan { round: usize, error: String },
    /// A plan, simulated.
    Simulated {
        round: usize,
        #[serde(serialize_with = "status_name")]
        status: Status,
        objective: u64,
        seconds: f64,
        recomputed: usize,
        linear_model_peak_bytes: u64,
        simulated_peak_bytes: u64,
    },
}

/// A solver status by its name (`Optimal`, `WithinGap`, ...).
fn status_name<S: Serializer>(status: &Status, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{status:?}"))
}

impl IlpRound {
    /// A round's plan, simulated at `total` (`prob` is the uncorrected model the linear peak
    /// is reported in, `fixed` what the caller feeds).
    pub(crate) fn simulated(
        round: usize,
        plan: &Plan,
        prob: &Problem,
        fixed: u64,
        total: u64,
    ) -> IlpRound {
        IlpRound::Simulated {
            round,
            status: plan.info.status,
            objective: plan.info.objective,
            seconds: plan.info.wall.as_secs_f64(),
            recomputed: plan.recompute.iter().filter(|&&r| r).count(),
            linear_model_peak_bytes: ckpt_solver::evaluate(prob, &plan.recompute).peak + fixed,
            simulated_peak_bytes: total,
        }
    }
}

/// What the ILP rounds did, whether or not their plan was used.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IlpReport {
    pub rounds: Vec<IlpRound>,
    /// The plan is a round's.
    pub used: bool,
}

/// How a plan ended.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Already under the ceiling; nothing to do.
    AlreadyFits,
    /// No plan fits.
    CannotFit(Diagnosis),
    Rewritten(Box<Rewritten>),
}

/// A plan that fits, made real: `after` is the analysis of the rewritten graph.
#[derive(Serialize)]
pub struct Rewritten {
    #[serde(skip)]
    pub after: Analysis,
    /// The candidates `plan` indexes (of the lowered graph, when `lowered`).
    #[serde(skip)]
    pub cands: Candidates,
    #[serde(skip)]
    pub plan: Plan,
    /// The patch of the graph given to [`crate::plan`]: the order moves, if any, then the
    /// recompute.
    pub patch_text: String,
    /// What the recompute patch does.
    pub counts: RewriteCounts,
    /// The ILP's arena budget: the ceiling less fixed bytes and the profile's overhead.
    pub arena_ceiling: u64,
    pub solve_attempts: usize,
    pub ilp: IlpReport,
    /// The time limit stopped some part of the search (an ILP round, the climb or the cut):
    /// the plan is the best found by then, and may differ on a faster or less loaded machine.
    pub time_limit_hit: bool,
    /// The plan is of the graph with zero-FLOP order moves first (its leaves in the order
    /// their inputs become ready, [`ckpt_passes::order`]; its backward-only terms lowered).
    pub lowered: bool,
    /// The plan is of the graph with its constant reshape targets guarded
    /// ([`ckpt_passes::guards`]; the guards come before the recompute in the patch).
    pub guarded: bool,
    /// The plan is of the graph with its transposed operands folded into their readers
    /// ([`ckpt_passes::fold`]; the folds come first in the patch).
    pub folded: bool,
    /// The plan is of the graph with its loss head in chunks of rows
    /// ([`PlanOptions::chunk_loss_head`]; the chunks come after the folds in the patch): the
    /// loss and the head's weight gradient are summed in another order.
    pub loss_head: Option<LossHeadChunks>,
    /// The shared weights' gradients the plan's graph scatters into one another
    /// ([`PlanOptions::fold_tied`]; with the folds, first in the patch); see
    /// [`Rewritten::tied_gradients`], which also looks at the plan planned again.
    pub tied_gradients: Option<TiedGradients>,
    /// The effective ceiling of the planning pass that found the plan: the ceiling's own, or a
    /// lower rung's of the ladder ([`crate::plan`]; a plan that fits a lower ceiling fits this
    /// one too).
    pub found_at_ceiling_bytes: u64,
    /// Rungs of the ladder below the ceiling that were planned ([`PlanOptions::ladder_rungs`]).
    pub rungs_planned: usize,
    /// The graph `cands` and `plan` index when it is a variant (terms moved, targets
    /// guarded: it may have nodes the given graph lacks); `None`: the given graph.
    #[serde(skip)]
    pub planned_graph: Option<ckpt_ir::Graph>,
    /// Where this plan is of another plan's output ([`PlanOptions::plan_again`]): that first
    /// plan, against the given graph. This plan's patch and counts then include the first
    /// plan's; its `cands`, `plan` and move flags are its own pass's, of `planned_graph`.
    #[serde(skip)]
    pub earlier: Option<Box<Rewritten>>,
    /// Where this plan is of another plan's output: the ceiling that first plan was planned
    /// at (below a refusal, the lowest total one pass found or a whole percent above it; below
    /// a dear plan, a whole percent above the ceiling).
    pub earlier_ceiling_bytes: Option<u64>,
}

/// The loss head written in chunks of rows ([`ckpt_passes::loss_head`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LossHeadChunks {
    /// The head's logits (the vocabulary projection's output), by name.
    pub logits: String,
    pub chunks: u64,
    pub rows_per_chunk: u64,
    /// The nodes written once per chunk.
    pub region_nodes: usize,
    /// The head weight's gradient is summed chunk by chunk in place, by ONNX Runtime's
    /// `com.microsoft.FusedConv` (a 1×1 convolution overwriting its sum input), where
    /// `false` says a chain of `Gemm`s, two sums live at each link.
    pub summed_in_place: bool,
    /// Always `false`: the chunks sum the loss and the head's weight gradient in another
    /// order, so validation holds those outputs to its tolerances (`validation.outputs`:
    /// `rtol`, `atol`, and the errors measured), not to bitwise equality.
    pub bitwise: bool,
}

/// Shared weights' gradients scattered into one another
/// ([`ckpt_passes::fold::fold_tied_gradients`]): the embedding's rows are added into the
/// product's gradient instead of into a table of zeros that an `Add` then sums.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct TiedGradients {
    /// The gradients (the `Add`s' outputs, by name) now written by the `ScatterND`.
    pub gradients: Vec<String>,
    /// Always `false`: a row that two tokens hit is summed in another order, so validation
    /// holds those gradients to its tolerances, not to bitwise equality.
    pub bitwise: bool,
}

impl Rewritten {
    /// A plan of `cands` made real as `after` (its patch text and counts), found under the
    /// effective ceiling `found_at`, with no ILP rounds and no moves, the clock not hit.
    pub(crate) fn new(
        (after, patch_text, counts): (Analysis, String, RewriteCounts),
        cands: Candidates,
        plan: Plan,
        arena_ceiling: u64,
        found_at: u64,
    ) -> Rewritten {
        Rewritten {
            after,
            cands,
            plan,
            patch_text,
            counts,
            arena_ceiling,
            solve_attempts: 0,
            ilp: IlpReport::default(),
            time_limit_hit: false,
            lowered: false,
            guarded: false,
            folded: false,
            loss_head: None,
            tied_gradients: None,
            found_at_ceiling_bytes: found_at,
            rungs_planned: 0,
            planned_graph: None,
            earlier: None,
            earlier_ceiling_bytes: None,
        }
    }

    /// The passes that made this plan, the first first: this plan alone, or the plan whose
    /// output it planned again ([`Rewritten::earlier`]) and then this one.
    pub fn passes(&self) -> Vec<&Rewritten> {
        let mut passes = match &self.earlier {
            Some(e) => e.passes(),
            None => Vec::new(),
        };
        passes.push(self);
        passes
    }

    /// The candidate activations the plan recomputes, over its passes.
    pub fn recomputed(&self) -> usize {
        self.passes()
            .iter()
            .map(|p| p.plan.recompute.iter().filter(|&&r| r).count())
            .sum()
    }

    /// The candidate activations its passes considered, over its passes.
    pub fn candidate_count(&self) -> usize {
        self.passes().iter().map(|p| p.cands.list.len()).sum()
    }

    /// The linear model's added cost (`plan.cost`), over its passes.
    pub fn model_cost(&self) -> u64 {
        self.passes().iter().map(|p| p.plan.cost).sum()
    }

    /// What the plan adds, in the unit plans are compared in: with [`PlanOptions::costs`],
    /// the cost of every node its recompute patch of `given` (the graph given to
    /// [`crate::plan`]) clones, each once; else the FLOPs its clones add.
    pub fn added_cost(&self, given: &ckpt_ir::Graph, o: &PlanOptions) -> u64 {
        match &o.costs {
            Some(c) => c.of_patch(&rewrite(
                self.planned(given),
                &self.cands,
                &self.plan,
                "cost",
            )),
            None => self.counts.added_flops,
        }
    }

    /// The shared weights' gradients folded in the plan's graph or in the plan it planned
    /// again ([`Rewritten::tied_gradients`] field).
    pub fn tied_gradients(&self) -> Option<&TiedGradients> {
        self.tied_gradients
            .as_ref()
            .or_else(|| self.earlier.as_ref()?.tied_gradients())
    }

    /// How the plan was found, as a reader says it ([`method_label`]); a plan of another
    /// plan's output says both: `block checkpointing cut ..., its output planned again by
    /// reuse guards only`.
    pub fn method_label(&self) -> String {
        let moves = Moves {
            folded: self.folded,
            chunked: self.loss_head.is_some(),
            lowered: self.lowered,
            guarded: self.guarded,
        };
        let own = method_label(&self.plan, moves);
        match &self.earlier {
            Some(e) => format!("{}, its output planned again by {own}", e.method_label()),
            None => own,
        }
    }

    /// The graph the candidates and the plan index: the variant planned, else `given` (the
    /// graph given to [`crate::plan`]).
    pub fn planned<'a>(&'a self, given: &'a ckpt_ir::Graph) -> &'a ckpt_ir::Graph {
        self.planned_graph.as_ref().unwrap_or(given)
    }
}

/// The zero-FLOP moves a plan's graph was made with ([`method_label`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Moves {
    /// Copies folded ([`ckpt_passes::fold`]).
    pub folded: bool,
    /// The loss head in chunks ([`ckpt_passes::loss_head`]).
    pub chunked: bool,
    /// Order moves ([`ckpt_passes::order`], terms lowered).
    pub lowered: bool,
    /// Reuse guards ([`ckpt_passes::guards`]).
    pub guarded: bool,
}

/// How `plan` (of a graph made with the zero-FLOP `moves` first) was found, as a reader
/// says it: `ILP, proven optimal`, `search with the simulator in the loop (no optimality
/// bound)`, or, for a plan that recomputes nothing, its zero-FLOP moves: `order moves only`,
/// `folded copies and reuse guards only`, `loss head in chunks only`.
pub fn method_label(plan: &Plan, moves: Moves) -> String {
    if plan.recompute.iter().any(|&r| r) {
        return plan.info.label();
    }
    let moves: Vec<&str> = [
        (moves.folded, "folded copies"),
        (moves.chunked, "loss head in chunks"),
        (moves.lowered, "order moves"),
        (moves.guarded, "reuse guards"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    match moves.split_last() {
        None => plan.info.label(),
        Some((last, [])) => format!("{last} only"),
        Some((last, rest)) => format!("{} and {last} only", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ILP report serializes as the receipt records it: rounds without a tag, statuses
    /// by name.
    #[test]
    fn the_ilp_report_serializes_as_the_receipt_records_it() {
        let report = IlpReport {
            rounds: vec![
                IlpRound::Simulated {
                    round: 0,
                    status: Status::Optimal,
                    objective: 7,
                    seconds: 0.5,
                    recomputed: 2,
                    linear_model_peak_bytes: 100,
                    simulated_peak_bytes: 120,
                },
                IlpRound::Unproven {
                    round: 1,
                    status: Status::FeasibleOnTimeout,
                    seconds: 1.0,
                },
                IlpRound::NoPlan {
                    round: 2,
                    error: "infeasible".into(),
                },
            ],
            used: false,
        };
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(
            json,
            r#"{"rounds":[{"round":0,"status":"Optimal","objective":7,"seconds":0.5,"recomputed":2,"linear_model_peak_bytes":100,"simulated_peak_bytes":120},{"round":1,"status":"FeasibleOnTimeout","seconds":1.0},{"round":2,"error":"infeasible"}],"used":false}"#
        );
    }

    /// Kinds serialize in `snake_case`; a refusal is worded from the given graph's ledger.
    #[test]
    fn a_diagnosis_serializes_its_kind_and_message() {
        let d = Diagnosis {
            kind: DiagnosisKind::NoPlanFound,
            effective_ceiling_bytes: 3 << 29,
            fixed_bytes: 512,
            lowest_reachable_total_bytes: 2 << 30,
            dominant_ledger_line: "saved activations".into(),
            timed_out: true,
            steps_spent: false,
            ceilings_probed: 1,
            rungs_planned: 0,
            message: String::new(),
        };
        let ledger = Ledger::default();
        let o = PlanOptions::new(3 << 29, Default::default());
        let d = d.worded(&ledger, &o);
        assert!(d.message.starts_with(
            "no recompute plan fits: the lowest device total found under the deployment profile"
        ));
        assert!(d.message.contains("is 2.00 GiB (512 B fixed + 2.00 GiB arena), above the ceiling of 1.50 GiB; dominant ledger line: saved activations (the search stopped at the time limit of 120 s;"));
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["kind"], "no_plan_found");
        assert_eq!(json["message"], d.message.as_str());
    }
}
