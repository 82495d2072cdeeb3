//! The planner's only view of the truth: an [`Oracle`] answers what a recompute set really
//! costs in device bytes. The ILP rounds and the search ask it and nothing else, so they run
//! the same on a graph ([`Simulator`]: rewrite, apply, ORT's order, the simulated arena under
//! the deployment profile) as on plain numbers ([`TableOracle`]: a [`Problem`] evaluated by
//! [`ckpt_solver::evaluate`], for tests that compare the planner with brute force).
//!
//! Steps are always the original schedule's steps (those of the linear model the rounds
//! solve): a rewritten run's recompute steps count as the original step they precede.

use std::collections::BTreeSet;

use ckpt_ir::{Graph, TensorId};
use ckpt_passes::classify;
use ckpt_passes::device::{device_need, device_need_below, device_need_within};
use ckpt_passes::ledger::{ledger, Ledger};
use ckpt_passes::memory::{schedule, simulate_resolved, Simulation};
use ckpt_passes::ort_view::resolved_shapes_after;
use ckpt_passes::recompute::{rewrite, Candidates};
use ckpt_solver::{evaluate, Method, Plan, Problem};

use crate::analysis::{analyse, Analysis};
use crate::options::{PlanOptions, Progress};
use crate::outcome::RewriteCounts;
use crate::trace::{Event, IdleBuffer, PeakHeld, Span};
use crate::PlanError;

/// What one recompute set's run says, in the original schedule's steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunTrace {
    /// The device total: fixed bytes plus what the arena needs.
    pub total: u64,
    /// The original step the run peaks at.
    pub peak_step: usize,
    /// Live bytes at each original step: that node's step together with the recompute steps
    /// that run just before it (where the linear model puts their transient bytes).
    pub seen: Vec<u64>,
    /// For each recomputed candidate: the first original step at which the buffer of its
    /// (dropped) activation is no longer allocated (`None`: held to the end of the run).
    /// Kept candidates: `Some(1)` (never read).
    pub released_at: Vec<Option<usize>>,
}

/// The truth about recompute sets. `set[i]`: candidate `i` of the planner's problem is
/// recomputed. Every answer depends on the set only (never on time or threads).
pub trait Oracle: Sync {
    /// A plan made real: what the planner hands back when it fits.
    type Realised: Send;

    /// The device total of recomputing `set`.
    fn total(&self, set: &[bool]) -> Result<u64, PlanError> {
        Ok(self.trace(set)?.total)
    }

    /// The device total and the original step the run peaks at.
    fn peak(&self, set: &[bool]) -> Result<(u64, usize), PlanError> {
        let t = self.trace(set)?;
        Ok((t.total, t.peak_step))
    }

    /// [`Oracle::peak`] when the total is below `bound`, `None` when it is not: an oracle
    /// that can tell the total is at least `bound` without finding it may stop there.
    fn peak_below(&self, set: &[bool], bound: u64) -> Result<Option<(u64, usize)>, PlanError> {
        let (total, peak) = self.peak(set)?;
        Ok((total < bound).then_some((total, peak)))
    }

    /// Whether the device total of recomputing `set` is within `effective`.
    fn fits(&self, set: &[bool], effective: u64) -> Result<bool, PlanError> {
        Ok(self.total(set)? <= effective)
    }

    /// The whole run of `set`, in the original schedule's steps.
    fn trace(&self, set: &[bool]) -> Result<RunTrace, PlanError>;

    /// Make `plan` real (the final, verified rewrite) and return its device total with it.
    fn realise(&self, plan: &Plan) -> Result<(u64, Self::Realised), PlanError>;

    /// What the run of `set` holds at its peak, for the trace; `None` where the oracle cannot
    /// say.
    fn peak_held(&self, _set: &[bool]) -> Result<Option<PeakHeld>, PlanError> {
        Ok(None)
    }
}

/// The FLOPs a recompute patch of `before`'s graph adds: each clone once, at its original's
/// count (moved nodes run once and are free; an op without a count adds 0).
pub fn patch_flops(before: &Analysis, patch: &ckpt_ir::Patch, b: &ckpt_ir::Bindings) -> u64 {
    patch
        .nodes
        .iter()
        .map(|n| ckpt_ir::ops::flops(&before.graph, n.copy_of, &before.types, b).unwrap_or(0))
        .sum()
}

/// The plan of a recompute set under the linear model, labelled [`Method::Search`].
pub fn plan_from_set(prob: &Problem, set: Vec<bool>) -> Plan {
    Plan::for_set(prob, set, Method::Search)
}

/// The oracle of a graph: rewrite for the set, apply (unverified: a trial), ORT's order, the
/// simulation and the device need under the profile. [`Oracle::realise`] applies with the
/// verifier and analyses the result in full.
pub struct Simulator<'a> {
    pub before: &'a Analysis,
    pub cands: &'a Candidates,
    /// The linear model the sets index (it places each clone: its rematerialisation steps).
    pub prob: &'a Problem,
    pub options: &'a PlanOptions,
}

impl Simulator<'_> {
    /// The device total of `plan` (its set with its own rebuild steps, which may differ from
    /// the linear model's: a block rebuilt as one shared copy), a trial like [`Oracle::total`].
    pub fn plan_total(&self, plan: &Plan) -> Result<u64, PlanError> {
        Ok(self.run(plan)?.0)
    }

    /// Whether `plan` (with its own rebuild steps, as [`Simulator::plan_total`]) fits
    /// `effective`.
    /// Within the deployment's effective ceiling the question is settled by the bisection's
    /// first fitting cap at or under the room left (`device_need_within`) and the run in the
    /// recorded arena ([`Simulator::held_total`]'s check), without finding the need itself.
    pub fn plan_fits(&self, plan: &Plan, effective: u64) -> Result<bool, PlanError> {
        let fixed = self.before.ledger.fixed_bytes;
        if effective > self.options.effective_ceiling() || effective < fixed {
            return Ok(self
                .run_below(plan, Some(effective.saturating_add(1)))?
                .is_some());
        }
        let (_, sim) = self.rewritten_run(plan)?;
        let profile = &self.options.analysis.profile;
        Ok(device_need_within(&sim, profile, effective - fixed) && self.runs_as_recorded(&sim))
    }

    fn run(&self, plan: &Plan) -> Result<(u64, Simulation), PlanError> {
        let (_, sim) = self.rewritten_run(plan)?;
        Ok((self.total_of(&sim), sim))
    }

    /// The device total of the run `sim` of a rewrite.
    fn total_of(&self, sim: &Simulation) -> u64 {
        let need = device_need(sim, &self.options.analysis.profile).arena_bytes;
        self.held_total(sim, self.before.ledger.fixed_bytes + need)
    }

    /// [`Simulator::run`] when the total is below `bound` (`None`: no bound), else `None`.
    /// The bisection for the arena need stops as soon as it shows the need puts the total
    /// at `bound` or more (`device_need_below`); where it answers, the total is `run`'s.
    fn run_below(
        &self,
        plan: &Plan,
        bound: Option<u64>,
    ) -> Result<Option<(u64, Simulation)>, PlanError> {
        let Some(bound) = bound else {
            return self.run(plan).map(Some);
        };
        let (_, sim) = self.rewritten_run(plan)?;
        let fixed = self.before.ledger.fixed_bytes;
        let profile = &self.options.analysis.profile;
        let Some(need) = device_need_below(&sim, profile, bound.saturating_sub(fixed)) else {
            return Ok(None);
        };
        // The held total never lowers a total, so it is checked against the bound again.
        let total = self.held_total(&sim, fixed + need.arena_bytes);
        Ok((total < bound).then_some((total, sim)))
    }

    /// The original step the run `sim` peaks at.
    fn peak_step(&self, sim: &Simulation) -> usize {
        let original = &self.before.sim.schedule;
        sim.schedule.order[sim.peak_step.min(sim.schedule.len().saturating_sub(1))..]
            .iter()
            .find_map(|&n| original.step_of(n))
            .unwrap_or(original.len().saturating_sub(1))
    }

    /// `total` (fixed bytes plus the smallest arena the steps run in), or, where that is
    /// within the ceiling but the steps do not run in the arena the written model records (a
    /// first region of the budget, capped at it: the BFC arena is not monotone in its cap,
    /// a larger first region can place chunks worse), just above the ceiling: the plan does
    /// not fit as deployed.
    fn held_total(&self, sim: &Simulation, total: u64) -> u64 {
        let o = self.options;
        let effective = o.effective_ceiling();
        if total > effective {
            return total;
        }
        if self.runs_as_recorded(sim) {
            total
        } else {
            effective + ckpt_passes::arena::ALIGN
        }
    }

    /// Whether the steps of `sim` run in the arena the written model records: a first region
    /// of the budget (the ceiling less what the caller feeds), capped at it.
    fn runs_as_recorded(&self, sim: &Simulation) -> bool {
        self.options
            .runs_as_recorded(sim, self.before.ledger.fixed_bytes)
    }

    /// [`Simulator::plan_total`], with the values in use at the run's in-use peak, by name:
    /// one simulation.
    pub fn total_and_live(&self, plan: &Plan) -> Result<(u64, BTreeSet<String>), PlanError> {
        let (g, sim) = self.rewritten_run(plan)?;
        let live = sim
            .in_use_at(&g, sim.peak_step)
            .into_iter()
            .map(|(_, t)| g.tensor(t).name.clone())
            .collect();
        Ok((self.total_of(&sim), live))
    }

    /// The ledger of `plan`'s rewrite, from a trial's run (one simulation): what
    /// [`crate::analyse`] finds for the verified rewrite ([`Oracle::realise`]'s), at a trial's
    /// cost. A refusal names its lowest plan's dominant line from it.
    pub fn ledger_of(&self, plan: &Plan) -> Result<Ledger, PlanError> {
        let (g, sim) = self.rewritten_run(plan)?;
        let a = &self.options.analysis;
        let class = classify(&g, a.loss.as_deref())?;
        let need = device_need(&sim, &a.profile).arena_bytes;
        Ok(ledger(
            &g,
            &class,
            &sim,
            need,
            &a.bindings,
            a.optimizer,
            a.optimizer_bits,
            a.profile.ort_version,
        ))
    }

    /// `plan`'s rewrite of the graph (unverified: a trial) and its simulated run.
    fn rewritten_run(&self, plan: &Plan) -> Result<(Graph, Simulation), PlanError> {
        let patch = rewrite(&self.before.graph, self.cands, plan, "trial");
        let mut g2 = self.before.graph.clone();
        if let Err(e) = patch.apply_unverified(&mut g2) {
            self.options.emit(|| Event::PatchRefused {
                patch: patch.to_string(),
            });
            return Err(PlanError::Patch(e));
        }
        // Only the nodes the patch added or rewired are resolved again.
        let ort = resolved_shapes_after(&g2, &self.before.graph, &self.before.ort);
        let sim = simulate_resolved(
            &g2,
            &schedule(&g2)?,
            &self.options.analysis.bindings,
            self.options.analysis.profile.intra_op_num_threads,
            &ort,
        )?;
        Ok((g2, sim))
    }
}

impl Oracle for Simulator<'_> {
    /// The rewritten graph's analysis, the patch as text, and what it adds.
    type Realised = (Analysis, String, RewriteCounts);

    fn total(&self, set: &[bool]) -> Result<u64, PlanError> {
        Ok(self.run(&plan_from_set(self.prob, set.to_vec()))?.0)
    }

    fn peak(&self, set: &[bool]) -> Result<(u64, usize), PlanError> {
        let (total, sim) = self.run(&plan_from_set(self.prob, set.to_vec()))?;
        Ok((total, self.peak_step(&sim)))
    }

    fn peak_below(&self, set: &[bool], bound: u64) -> Result<Option<(u64, usize)>, PlanError> {
        Ok(self
            .run_below(&plan_from_set(self.prob, set.to_vec()), Some(bound))?
            .map(|(total, sim)| (total, self.peak_step(&sim))))
    }

    fn fits(&self, set: &[bool], effective: u64) -> Result<bool, PlanError> {
        self.plan_fits(&plan_from_set(self.prob, set.to_vec()), effective)
    }

    fn trace(&self, set: &[bool]) -> Result<RunTrace, PlanError> {
        let plan = plan_from_set(self.prob, set.to_vec());
        let (total, sim) = self.run(&plan)?;
        let original = &self.before.sim.schedule;
        let mut seen = vec![0u64; original.len()];
        // The original step at or before each rewritten step.
        let mut at_or_before = vec![0usize; sim.schedule.len()];
        let mut pending = 0u64;
        let mut last = 0usize;
        for (k, &n) in sim.schedule.order.iter().enumerate() {
            pending = pending.max(sim.live[k]);
            if let Some(s) = original.step_of(n) {
                seen[s] = seen[s].max(pending);
                pending = 0;
                last = s;
            }
            at_or_before[k] = last;
        }
        if let Some(end) = seen.last_mut() {
            *end = (*end).max(pending);
        }
        let released_at = self
            .cands
            .list
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if !plan.recompute.get(i).copied().unwrap_or(false) {
                    return Some(1);
                }
                let b = c
                    .saved
                    .first()
                    .and_then(|&v| sim.buffer_of.get(v.index()).copied().flatten());
                match b.map(|b| sim.buffers[b].free_after) {
                    Some(Some(f)) => Some(at_or_before[f] + 1),
                    Some(None) => None,
                    None => Some(1),
                }
            })
            .collect();
        let peak_step = self.peak_step(&sim);
        Ok(RunTrace {
            total,
            peak_step,
            seen,
            released_at,
        })
    }

    fn realise(&self, plan: &Plan) -> Result<(u64, Self::Realised), PlanError> {
        let o = self.options;
        let before = self.before;
        let mut patch = rewrite(
            &before.graph,
            self.cands,
            plan,
            &format!("recompute for ceiling {}", o.recorded()),
        );
        // The deployment profile the plan holds under, for runners to read.
        patch.metadata.extend(o.recorded_metadata(&before.ledger));
        let text = patch.to_string();
        let counts = RewriteCounts {
            added_flops: patch_flops(before, &patch, &o.analysis.bindings),
            cloned: patch.nodes.len(),
            moved: patch.moves.len(),
        };
        let mut g2 = before.graph.clone();
        patch.apply(&mut g2).map_err(PlanError::Patch)?;
        o.report(Progress::Analysing);
        let after = analyse(g2, &o.analysis)?;
        let total = self.held_total(&after.sim, after.ledger.total_bytes);
        Ok((total, (after, text, counts)))
    }

    fn peak_held(&self, set: &[bool]) -> Result<Option<PeakHeld>, PlanError> {
        self.plan_peak_held(&plan_from_set(self.prob, set.to_vec()))
            .map(Some)
    }
}

impl Simulator<'_> {
    /// [`Oracle::peak_held`] of a plan with its own rebuild steps: the idle buffers and the
    /// values in use at its run's in-use peak.
    pub fn plan_peak_held(&self, plan: &Plan) -> Result<PeakHeld, PlanError> {
        let (g, sim) = self.rewritten_run(plan)?;
        let span = |t: TensorId| {
            let (made, last) = sim.span(&g, t);
            Span {
                tensor: g.tensor(t).name.clone(),
                made,
                last,
            }
        };
        let idle = sim.idle_at(&g, sim.peak_step);
        let idle_buffers: Vec<IdleBuffer> = idle
            .iter()
            .take(12)
            .map(|&(b, bytes)| {
                let buf = &sim.buffers[b];
                IdleBuffer {
                    bytes,
                    alloc_step: buf.alloc_step,
                    free_after: buf.free_after,
                    values: buf.values.len(),
                    last: buf.values.iter().rev().take(6).map(|&t| span(t)).collect(),
                }
            })
            .collect();
        let mut live: Vec<(u64, TensorId)> = sim
            .in_use_at(&g, sim.peak_step)
            .into_iter()
            .map(|(b, t)| (b.bytes, t))
            .collect();
        live.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| g.tensor(a.1).name.cmp(&g.tensor(b.1).name))
        });
        let is_output = |t: TensorId| g.tensor(t).is_output;
        Ok(PeakHeld {
            peak_step: sim.peak_step,
            steps: sim.schedule.len(),
            node: g.node(sim.schedule.order[sim.peak_step]).name.clone(),
            idle_bytes: idle.iter().map(|x| x.1).sum(),
            idle_buffers: idle.len(),
            idle: idle_buffers,
            live_bytes: live.iter().map(|x| x.0).sum(),
            live_values: live.len(),
            output_bytes: live.iter().filter(|x| is_output(x.1)).map(|x| x.0).sum(),
            largest: live
                .iter()
                .filter(|x| !is_output(x.1))
                .take(16)
                .map(|&(bytes, t)| (bytes, span(t)))
                .collect(),
        })
    }
}

/// An oracle over plain numbers: the device total of a set is `fixed` plus the peak of
/// `truth` (a [`Problem`]) under [`evaluate`], plus `excess[t]` at each step `t` (bytes the
/// linear model the planner solves does not know about, as an allocator's would be). Each
/// recomputed activation is released where `truth` says it is dropped.
#[derive(Clone, Debug)]
pub struct TableOracle {
    pub truth: Problem,
    pub fixed: u64,
    /// Per step; missing steps add nothing.
    pub excess: Vec<u64>,
}

impl TableOracle {
    /// The oracle of `truth` with `fixed` bytes and no excess.
    pub fn new(truth: Problem, fixed: u64) -> TableOracle {
        TableOracle {
            truth,
            fixed,
            excess: Vec::new(),
        }
    }

    fn check(&self, set: &[bool]) -> Result<(), PlanError> {
        if set.len() != self.truth.candidates.len() {
            return Err(PlanError::SetLength {
                expected: self.truth.candidates.len(),
                got: set.len(),
            });
        }
        Ok(())
    }
}

impl Oracle for TableOracle {
    /// The plan's device total.
    type Realised = u64;

    fn trace(&self, set: &[bool]) -> Result<RunTrace, PlanError> {
        self.check(set)?;
        let e = evaluate(&self.truth, set);
        let seen: Vec<u64> = e
            .live
            .iter()
            .enumerate()
            .map(|(t, &l)| l + self.excess.get(t).copied().unwrap_or(0))
            .collect();
        let (peak_step, peak) =
            seen.iter().enumerate().fold(
                (0, 0),
                |best, (t, &l)| if l > best.1 { (t, l) } else { best },
            );
        let released_at = self
            .truth
            .candidates
            .iter()
            .zip(set)
            .map(|(c, &r)| Some(if r { c.free_from } else { 1 }))
            .collect();
        Ok(RunTrace {
            total: self.fixed + peak,
            peak_step,
            seen,
            released_at,
        })
    }

    fn realise(&self, plan: &Plan) -> Result<(u64, u64), PlanError> {
        let total = self.total(&plan.recompute)?;
        Ok((total, total))
    }
}
