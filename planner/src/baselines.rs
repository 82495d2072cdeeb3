//! The baselines a plan is compared with, on the same zero-FLOP variants the planner races:
//! no recompute, per-block checkpointing (every residual-stream value kept), per-layer (every
//! other one), recompute-all ([`baselines`]); and the planner's plan at one ceiling as a
//! [`KnownPlan`] on the same axes ([`plan_at`]).
//!
//! Invariants: every [`KnownPlan`] is a rewrite the simulator has analysed, its total the
//! analysis's device total under the deployment profile; its added cost is what the written
//! patch clones (each node once; moves add nothing), in FLOPs and, with
//! [`PlanOptions::costs`], in the costs' unit.

use ckpt_ir::{Graph, Patch};
use ckpt_passes::order::order_leaves;
use ckpt_passes::recompute::{
    backward_only_terms, candidates, lower_terms, per_block, problem, rewrite, Candidates,
    Granularity,
};
use ckpt_solver::{Method, Plan};

use crate::analysis::{analyse, Analysis};
use crate::options::{PlanOptions, Progress};
use crate::oracle::patch_flops;
use crate::outcome::Outcome;
use crate::PlanError;

pub const NO_RECOMPUTE: &str = "no recompute";
pub const PER_BLOCK: &str = "per-block";
pub const PER_LAYER: &str = "per-layer";
pub const RECOMPUTE_ALL: &str = "recompute-all";

/// One plan: a rewrite of the graph (or the graph itself) with its predicted device total.
pub struct KnownPlan {
    /// How it was found: `no recompute`, a baseline's name, or the planner's method.
    pub method: String,
    /// The ceiling the planner found it for (`None`: a baseline).
    pub found_at_ceiling_bytes: Option<u64>,
    /// The predicted device total under the profile.
    pub total_bytes: u64,
    /// FLOPs the clones add (moves add none).
    pub added_flops: u64,
    /// With [`PlanOptions::costs`]: what the clones add in the costs' unit (nanoseconds for
    /// measured kernel times).
    pub added_cost: Option<u64>,
    /// The analysed rewrite.
    pub analysis: Analysis,
}

/// Block checkpointing at the graph's residual-stream boundaries ([`per_block`]) as a plan of
/// `cands`; a graph without a residual stream falls back (at [`Granularity::Sublayer`] only)
/// to the solver's every-⌈√n⌉-th candidate kept, each rebuilt on its own.
pub fn per_block_plan(a: &Analysis, cands: &Candidates, granularity: Granularity) -> Option<Plan> {
    let prob = problem(&a.sim, cands, 0);
    match per_block(&a.graph, &a.class, &a.sim, cands, granularity) {
        Some(pb) => {
            let mut plan = Plan::for_set(&prob, pb.recompute, Method::PerBlock);
            plan.remat_at = pb.remat_at;
            Some(plan)
        }
        None if granularity == Granularity::Sublayer => Some(Plan::for_set(
            &prob,
            ckpt_solver::per_block_set(&prob),
            Method::PerBlock,
        )),
        None => None,
    }
}

/// Rewrite `before` for the recompute set `set` of `cands`, apply, and analyse the result
/// under `o.analysis` ([`evaluate_plan`]).
pub fn evaluate_set(
    before: &Analysis,
    cands: &Candidates,
    set: Vec<bool>,
    o: &PlanOptions,
    method: &str,
) -> Result<KnownPlan, PlanError> {
    let prob = problem(&before.sim, cands, 0);
    let plan = Plan::for_set(&prob, set, Method::RecomputeAll);
    evaluate_plan(before, cands, plan, o, method)
}

/// Rewrite `before` for `plan` (its recompute set and rebuild steps), apply, and analyse the
/// result under `o.analysis`; with the cost the clones add where `o.costs` are given.
pub fn evaluate_plan(
    before: &Analysis,
    cands: &Candidates,
    plan: Plan,
    o: &PlanOptions,
    method: &str,
) -> Result<KnownPlan, PlanError> {
    if !plan.recompute.iter().any(|&x| x) {
        o.report(Progress::Analysing);
        return Ok(KnownPlan {
            method: method.into(),
            found_at_ceiling_bytes: None,
            total_bytes: before.ledger.total_bytes,
            added_flops: 0,
            added_cost: o.costs.as_ref().map(|_| 0),
            analysis: analyse(before.graph.clone(), &o.analysis)?,
        });
    }
    let patch = rewrite(&before.graph, cands, &plan, method);
    let added_flops = patch_flops(before, &patch, &o.analysis.bindings);
    let mut g = before.graph.clone();
    patch.apply(&mut g).map_err(PlanError::Patch)?;
    o.report(Progress::Analysing);
    let analysis = analyse(g, &o.analysis)?;
    Ok(KnownPlan {
        method: method.into(),
        found_at_ceiling_bytes: None,
        total_bytes: analysis.ledger.total_bytes,
        added_flops,
        added_cost: o.costs.as_ref().map(|c| c.of_patch(&patch)),
        analysis,
    })
}

/// The baselines of a graph, in this order: no recompute, per-block (every residual-stream
/// value kept), per-layer (every other one: each transformer layer's input; only where the
/// graph has a residual stream), recompute-all; each analysed under `o.analysis`, with its
/// added cost where `o.costs` are given.
///
/// Block checkpointing runs on the graph as it is and on its zero-FLOP order variants (leaves
/// in the order their inputs become ready, backward-only terms lowered, both): ORT's order
/// decides when a block's rebuilt copy runs and how long it is held (a backward-only term
/// that runs during forward rebuilds the block there; a weight gradient run at the end of
/// backward holds its copy to the end). The lowest device total wins.
pub fn baselines(before: &Analysis, o: &PlanOptions) -> Result<Vec<KnownPlan>, PlanError> {
    let cands = candidates(
        &before.graph,
        &before.sim,
        &before.types,
        &o.analysis.bindings,
    );
    let n = cands.list.len();
    let set = |s: Vec<bool>, m: &str| evaluate_set(before, &cands, s, o, m);
    let mut out = vec![set(vec![false; n], NO_RECOMPUTE)?];
    let mut bases: Vec<(Analysis, Candidates)> = Vec::new();
    let ordered = moved(
        before,
        order_leaves(&before.graph, &before.sim.schedule, "leaf order"),
        o,
    )?;
    for base in [Some(before), ordered.as_ref()].into_iter().flatten() {
        let terms = backward_only_terms(&base.graph, &base.class);
        let lowered = lower_terms(&base.graph, &terms, "backward-only terms");
        if let Some(l) = moved(base, lowered, o)? {
            bases.push(with_candidates(l, o));
        }
    }
    if let Some(ordered) = ordered {
        bases.push(with_candidates(ordered, o));
    }
    for (granularity, name) in [
        (Granularity::Sublayer, PER_BLOCK),
        (Granularity::Layer, PER_LAYER),
    ] {
        let mut best: Option<KnownPlan> = None;
        let all = std::iter::once((before, &cands)).chain(bases.iter().map(|(a, c)| (a, c)));
        for (base, cs) in all {
            if let Some(plan) = per_block_plan(base, cs, granularity) {
                let p = evaluate_plan(base, cs, plan, o, name)?;
                if best.as_ref().is_none_or(|b| p.total_bytes < b.total_bytes) {
                    best = Some(p);
                }
            }
        }
        out.extend(best);
    }
    out.push(set(vec![true; n], RECOMPUTE_ALL)?);
    Ok(out)
}

/// `before` with the zero-FLOP moves of `patch` applied and analysed; `None` when there is
/// nothing to move.
fn moved(before: &Analysis, patch: Patch, o: &PlanOptions) -> Result<Option<Analysis>, PlanError> {
    if patch.is_empty() {
        return Ok(None);
    }
    let mut g = before.graph.clone();
    patch.apply(&mut g).map_err(PlanError::Patch)?;
    o.report(Progress::Analysing);
    Ok(Some(analyse(g, &o.analysis)?))
}

/// An analysis with its candidates.
fn with_candidates(a: Analysis, o: &PlanOptions) -> (Analysis, Candidates) {
    let c = candidates(&a.graph, &a.sim, &a.types, &o.analysis.bindings);
    (a, c)
}

/// What the planner says at one ceiling.
pub enum Planned {
    Plan(Box<KnownPlan>),
    /// No plan: the lowest device total the planner reached.
    CannotFit {
        lowest_reachable_total_bytes: u64,
    },
}

/// `graph` analysed under `o.analysis` and planned at `o.ceiling` ([`crate::plan`]), as a
/// plan on the baselines' axes (found at `o.ceiling`), or the lowest total reached.
pub fn plan_at(graph: &Graph, o: &PlanOptions) -> Result<Planned, PlanError> {
    o.report(Progress::Analysing);
    let before = analyse(graph.clone(), &o.analysis)?;
    Ok(match crate::plan(&before, o)? {
        Outcome::AlreadyFits => Planned::Plan(Box::new(KnownPlan {
            method: NO_RECOMPUTE.into(),
            found_at_ceiling_bytes: Some(o.ceiling),
            total_bytes: before.ledger.total_bytes,
            added_flops: 0,
            added_cost: o.costs.as_ref().map(|_| 0),
            analysis: before,
        })),
        Outcome::CannotFit(d) => Planned::CannotFit {
            lowest_reachable_total_bytes: d.lowest_reachable_total_bytes,
        },
        Outcome::Rewritten(r) => Planned::Plan(Box::new(KnownPlan {
            method: r.method_label(),
            found_at_ceiling_bytes: Some(o.ceiling),
            total_bytes: r.after.ledger.total_bytes,
            added_flops: r.counts.added_flops,
            added_cost: o.costs.as_ref().map(|_| r.added_cost(&before.graph, o)),
            analysis: r.after,
        })),
    })
}
