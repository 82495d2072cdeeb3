//! What a plan is asked for: [`PlanOptions`] (the ceiling, the analysis options every rewrite
//! is analysed with, the costs, the threads, the trace sink, the progress callback and the
//! limits), the [`SearchOptions`] one search runs with, and the [`Deadline`] every search reads.
//!
//! Invariants: the limits are counts (trials, schedule steps), never times, so the plan is the
//! same on any machine; the time limit is the one exception, and every place that reads the
//! [`Deadline`] records whether it stopped anything. Costs are a field of the options: every
//! function that ranks recomputes reads them from there.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ckpt_ir::{NodeId, Profile};
use ckpt_passes::recompute::Candidates;
use ckpt_solver::{Fallback, Plan, SolveError, Status};

use crate::analysis::AnalyseOptions;
use crate::trace::{Event, Trace};

/// Per-node recompute costs, as plain numbers (measured kernel times, say): a candidate costs
/// the sum over the nodes its recompute clones (a moved node runs once and is free), at
/// least 1; `step` is one step's cost, the unit of the search's floor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    /// Missing nodes cost 0.
    pub per_node: BTreeMap<NodeId, u64>,
    pub step: u64,
}

impl Costs {
    /// The cost of one node.
    pub fn of(&self, n: NodeId) -> u64 {
        self.per_node.get(&n).copied().unwrap_or(0)
    }

    /// Cost every candidate by these costs.
    pub fn apply(&self, cands: &mut Candidates) {
        for c in &mut cands.list {
            c.model.cost = c
                .nodes
                .iter()
                .filter(|n| !c.moved.contains(n))
                .map(|&n| self.of(n))
                .sum::<u64>()
                .max(1);
        }
    }

    /// What a recompute patch adds: the cost of every node it clones, each once (moves add
    /// nothing).
    pub fn of_patch(&self, patch: &ckpt_ir::Patch) -> u64 {
        patch.nodes.iter().map(|n| self.of(n.copy_of)).sum()
    }
}

/// What the planner reports while it runs (for a progress line; never changes a plan).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A graph (a rewrite) is being analysed.
    Analysing,
    /// The search has simulated `count` trials; the best simulated total so far.
    Trials { count: usize, best_total_bytes: u64 },
}

/// What a plan needs besides the analysis of the graph.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// How every rewrite is analysed: the bindings, loss, optimizer and deployment profile
    /// the given analysis was made with.
    pub analysis: AnalyseOptions,
    /// The device ceiling, in bytes.
    pub ceiling: u64,
    /// The ceiling the plan's model records (its profile's arena, its deployment's byte
    /// counts, its patch's label) where that is not `ceiling`: a rung of the ladder is planned
    /// under a tighter ceiling than the one its plan is for ([`crate::plan`]). `None`:
    /// `ceiling`.
    pub recorded_ceiling: Option<u64>,
    /// Percent of the ceiling kept free.
    pub reserve_pct: f64,
    /// The search's clock: counted from `started`.
    pub time_limit: Duration,
    pub started: Instant,
    /// Time kept back from `time_limit` for the work after the plan (the caller's write and
    /// checks): every search and probe ends by [`PlanOptions::deadline`].
    pub reserve: Duration,
    /// Threads trials are simulated on: the plan is the same on any number.
    pub threads: usize,
    /// Recompute costs in place of FLOPs; `None`: the op registry's FLOPs.
    pub costs: Option<Costs>,
    /// Where the planner's trace events go ([`Event`]); `None`: no trace.
    pub trace: Option<Trace>,
    pub progress: Option<fn(Progress)>,
    /// On a refusal, how many ceilings between the ceiling and the lowest total found are
    /// planned (bisection), so that the lowest reachable total reported is no higher than a
    /// plan found at a ceiling in between: the search is not monotone in the ceiling.
    pub refusal_probes: usize,
    /// On a refusal, make plans at and just above the lowest total found real and plan their
    /// outputs again at the ceiling, as graphs of their own; where a plan found adds more than
    /// a twentieth of a step, do so from plans at looser ceilings, keeping the cheaper plan
    /// ([`crate::plan`]; off in [`PlanOptions::new`], on in the main job by default:
    /// `--plan-again on|off`).
    pub plan_again: bool,
    /// Rungs of the ladder: at most how many tighter ceilings (whole percents of the given
    /// graph's device total, below the ceiling) are planned in turn below a plan that adds
    /// anything, or below a refusal, the cheapest plan kept ([`LADDER_RUNGS`] by default;
    /// [`crate::plan`]). A plan that fits a tighter ceiling fits this one: the search alone
    /// is not monotone in the ceiling.
    pub ladder_rungs: usize,
    /// Where a plan is needed, plan the graph with its copies folded away (transposed operands
    /// into their readers, scattered slices into Pads) when that lowers the device total
    /// ([`ckpt_passes::fold`]; off in [`PlanOptions::new`], on in the main job by default:
    /// `--fold on|off`).
    pub fold: bool,
    /// Where the plan found adds anything or none fits, also plan the graph with its loss
    /// head in chunks of rows ([`ckpt_passes::loss_head`]: no logits-sized value exists whole)
    /// and keep that plan where it adds fewer FLOPs or fits where none did
    /// ([`crate::head::with_head_chunked`]). The chunks sum in another order, so the outputs match
    /// within rounding, not bit for bit (off in [`PlanOptions::new`] and in the main job by
    /// default: `--chunk-loss-head on|off`).
    pub chunk_loss_head: bool,
    /// Where a plan is needed, also fold each shared weight's gradient summed from a table of
    /// zeros ([`ckpt_passes::fold::fold_tied_gradients`]): the embedding's rows scattered into
    /// the product's gradient, with the other folds (planned as [`PlanOptions::fold`]'s
    /// variant, whether or not `fold` is on). The sum is in another order, so that gradient
    /// matches within rounding, not bit for bit (off in [`PlanOptions::new`] and in the main
    /// job by default: `--fold-tied on|off`).
    pub fold_tied: bool,
    /// Simulations one search may run ([`MAX_TRIALS`] by default; a variant planned after a
    /// plan is in hand gets [`variant_trials`]).
    pub max_trials: usize,
    /// Schedule steps the candidate searches of one [`crate::plan`] call (its variants, its
    /// rungs and its refusal probes together) may simulate, trials times the graph's steps
    /// ([`PASS_STEPS`] by default): each search gets at most the trials the steps left pay
    /// for. A count, so that a refusal ends at the same place on any machine, not at the time
    /// limit.
    pub pass_steps: usize,
}

impl PlanOptions {
    /// Defaults: no reserve, a 120 s limit from now, every core, FLOPs, no trace.
    pub fn new(ceiling: u64, analysis: AnalyseOptions) -> PlanOptions {
        PlanOptions {
            analysis,
            ceiling,
            recorded_ceiling: None,
            reserve_pct: 0.0,
            time_limit: Duration::from_secs(120),
            started: Instant::now(),
            reserve: Duration::ZERO,
            threads: default_threads(),
            costs: None,
            trace: None,
            progress: None,
            refusal_probes: 0,
            plan_again: false,
            ladder_rungs: LADDER_RUNGS,
            fold: false,
            chunk_loss_head: false,
            fold_tied: false,
            max_trials: MAX_TRIALS,
            pass_steps: PASS_STEPS,
        }
    }

    /// The ceiling after the reserve.
    pub fn effective_ceiling(&self) -> u64 {
        (self.ceiling as f64 * (1.0 - self.reserve_pct / 100.0)).floor() as u64
    }

    /// The ceiling a plan's model records: [`PlanOptions::recorded_ceiling`], else the
    /// ceiling.
    pub fn recorded(&self) -> u64 {
        self.recorded_ceiling.unwrap_or(self.ceiling)
    }

    /// The profile a plan records: an arena sized to the budget becomes the recorded ceiling
    /// less what the caller feeds (`fixed_bytes`), in bytes.
    pub fn recorded_profile(&self, fixed_bytes: u64) -> Profile {
        self.analysis
            .profile
            .resolved(self.recorded().saturating_sub(fixed_bytes))
    }

    /// The `metadata_props` a plan's model records: the profile (its arena sized to the budget
    /// beside `ledger`'s fixed bytes) and the deployment's byte counts, at the recorded
    /// ceiling.
    pub fn recorded_metadata(&self, ledger: &ckpt_passes::ledger::Ledger) -> Vec<(String, String)> {
        recorded_metadata(&self.analysis.profile, self.recorded(), ledger)
    }

    /// Whether the steps of `sim` run in the arena the written model records: a first region
    /// of the budget (the recorded ceiling less `fixed_bytes`, what the caller feeds), capped
    /// at it, and within one region where the profile is offered in one only
    /// ([`ckpt_ir::Profile::arena_bound`]).
    /// The need a bisection finds under the budget does not say so: the BFC arena splits a
    /// chunk only at twice the request, so it is not monotone in its cap, and a larger first
    /// region can place chunks worse.
    pub(crate) fn runs_as_recorded(
        &self,
        sim: &ckpt_passes::memory::Simulation,
        fixed_bytes: u64,
    ) -> bool {
        let profile = &self.analysis.profile;
        let budget = self.recorded().saturating_sub(fixed_bytes);
        ckpt_passes::device::fits(sim, profile, budget.min(profile.arena_bound()))
    }

    pub(crate) fn report(&self, p: Progress) {
        if let Some(f) = self.progress {
            f(p);
        }
    }

    /// Send the event `event` makes to the trace sink, if there is one (the event is made
    /// only then).
    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        if let Some(t) = &self.trace {
            t.emit(&event());
        }
    }

    /// Whether trace events are sent anywhere (events that cost a simulation are made only
    /// then).
    pub(crate) fn tracing(&self) -> bool {
        self.trace.is_some()
    }

    /// The time since `started`, as trace events stamp it.
    pub(crate) fn at(&self) -> Duration {
        self.started.elapsed()
    }

    /// When every search and probe ends: `started + time_limit - reserve`.
    pub(crate) fn deadline(&self) -> Deadline {
        Deadline::new(self.started + self.search_limit())
    }

    /// The searches' share of the time limit: `time_limit - reserve`.
    fn search_limit(&self) -> Duration {
        self.time_limit.saturating_sub(self.reserve)
    }

    pub(crate) fn search_options(&self) -> SearchOptions {
        SearchOptions {
            time_limit: self.search_limit(),
            started: self.started,
            threads: self.threads,
            trace: self.trace.clone(),
            progress: self.progress,
            max_trials: self.max_trials,
            beat: None,
        }
    }
}

/// Threads the search simulates trials on by default: every available core. The plan does
/// not depend on it (trials are judged in order), only the wall time does.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The `metadata_props` a model planned under `ceiling` records: `profile` resolved to the
/// steps' budget beside `ledger`'s fixed bytes, and the deployment's byte counts
/// ([`ckpt_ir::Deployment`]).
pub fn recorded_metadata(
    profile: &Profile,
    ceiling: u64,
    ledger: &ckpt_passes::ledger::Ledger,
) -> Vec<(String, String)> {
    let mut md = profile
        .resolved(ceiling.saturating_sub(ledger.fixed_bytes))
        .metadata();
    md.extend(
        ckpt_ir::Deployment::under(ceiling, ledger.caller_bytes(), ledger.initializer_bytes)
            .metadata(),
    );
    md.sort();
    md
}

/// The search's clock, threads and trace.
#[derive(Clone, Debug)]
pub struct SearchOptions {
    pub time_limit: Duration,
    pub started: Instant,
    pub threads: usize,
    /// Where the search's trace events go; `None`: no trace.
    pub trace: Option<Trace>,
    pub progress: Option<fn(Progress)>,
    /// Simulations the climb and the swaps may run (a count: the same plan on any machine).
    pub max_trials: usize,
    /// The added cost of a plan already in hand (another variant's, or a higher ceiling's): a
    /// search whose linear model's optimum, the ILP's first round, costs more than
    /// [`OUTCLASSED_FACTOR`] times it stops there ([`crate::Searched::Outclassed`]) without
    /// simulating anything. Every ILP solve of the search (its rounds, its tightened budgets)
    /// is solved with the factor times it as CBC's cutoff
    /// ([`ckpt_solver::IlpOptions::cutoff`]), so CBC prunes on it and proves a model with
    /// nothing under it outclassed at its root; a later round or a tightened budget with
    /// nothing under it (its model is more conservative than the first round's) ends the
    /// rounds or the tightening.
    pub beat: Option<u64>,
}

impl SearchOptions {
    /// One thread, no trace and no progress, the clock started now: what table tests drive
    /// the search with.
    pub fn one_thread(time_limit: Duration) -> SearchOptions {
        SearchOptions {
            time_limit,
            started: Instant::now(),
            threads: 1,
            trace: None,
            progress: None,
            max_trials: MAX_TRIALS,
            beat: None,
        }
    }

    /// Send the event `event` makes to the trace sink, if there is one.
    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        if let Some(t) = &self.trace {
            t.emit(&event());
        }
    }

    /// The time since `started`, as trace events stamp it.
    pub(crate) fn at(&self) -> Duration {
        self.started.elapsed()
    }
}

/// The clock of one search: the only thing besides the input and the flags that can change a
/// plan, so every place that reads it records whether it stopped anything.
pub(crate) struct Deadline {
    at: Instant,
    hit: AtomicBool,
}

impl Deadline {
    pub(crate) fn new(at: Instant) -> Deadline {
        Deadline {
            at,
            hit: AtomicBool::new(false),
        }
    }

    /// Whether the deadline has passed; a passed deadline is recorded as hit.
    pub(crate) fn passed(&self) -> bool {
        let passed = Instant::now() >= self.at;
        if passed {
            self.hit.store(true, Ordering::Relaxed);
        }
        passed
    }

    /// The time left (at least a millisecond: CBC's limit must be positive).
    pub(crate) fn left(&self) -> Duration {
        self.at
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    /// Whether the clock stopped anything so far.
    pub(crate) fn hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
    }

    /// Record an ILP answer that a time limit cut short.
    pub(crate) fn note_ilp(&self, solved: &Result<Plan, SolveError>) {
        let stopped = match solved {
            Ok(p) => {
                p.info.status == Status::FeasibleOnTimeout
                    || matches!(
                        p.info.fallback,
                        Some(Fallback::Watchdog | Fallback::TimeLimit)
                    )
            }
            Err(e) => matches!(e, SolveError::NoPlanWithinTimeLimit { .. }),
        };
        if stopped {
            self.hit.store(true, Ordering::Relaxed);
        }
    }
}

/// Simulations one search may run (a count, not a time, so that results are reproducible).
pub const MAX_TRIALS: usize = 4000;
/// Simulations the search of a zero-FLOP variant may run once a plan is in hand: such a
/// search only matters if it beats that plan, and where one did it took 300 (GPT-2 small at
/// 70%: the guarded graph with its terms moved, 299 trials, +0.23% of a step against the
/// first plan's +0.63%); on GPT-2 at 48 layers, 80%, variants without that bound that found
/// nothing better ran to the 30 s limit. A count, so the plan is the same on any machine.
pub const VARIANT_TRIALS: usize = 600;
/// Schedule steps a variant searched once a plan is in hand may simulate in all
/// ([`variant_trials`]): 600 trials of a 2,500-step graph. A trial simulates the whole
/// schedule, so on GPT-2 at 48 layers (7,300 steps) 600 trials took the variant that found
/// nothing better 18 s, where GPT-2 small's winning variant took 299 trials of 2,000 steps.
pub const VARIANT_STEPS: usize = 1_500_000;

/// Schedule steps the candidate searches of one [`crate::plan`] call may simulate in all
/// ([`PlanOptions::pass_steps`]).
pub const PASS_STEPS: usize = 8_000_000;

/// Rungs of the ladder below the ceiling at most ([`PlanOptions::ladder_rungs`]): whole
/// percents of the given graph's device total. A bound, not the ladder's stop: it stops at the
/// first rung with no plan, where the plan in hand outclasses every search.
pub const LADDER_RUNGS: usize = 16;

/// How many unchosen candidates one search move tries adding.
pub(crate) const SEARCH_WIDTH: usize = 32;

/// The simulations a zero-FLOP variant of a graph of `steps` steps gets once a plan is in
/// hand: [`VARIANT_TRIALS`], or fewer on a large graph, so that it simulates at most
/// [`VARIANT_STEPS`] steps; never under two moves' worth (`4 x SEARCH_WIDTH`). A count, so
/// the plan is the same on any machine.
pub fn variant_trials(steps: usize) -> usize {
    (VARIANT_STEPS / steps.max(1)).clamp(4 * SEARCH_WIDTH, VARIANT_TRIALS)
}

/// A search given a plan in hand ([`SearchOptions::beat`]) stops when its linear model's
/// optimum costs more than this many times that plan. The model under-counts what ORT's
/// allocator holds, so the plans the simulator accepts cost more than its optimum, not less:
/// on GPT-2 small at 70% the searched plans cost 0.98x, 0.97x and 4.7x their first round's
/// optimum (a cut can drop what the model thought needed); the factor leaves room for that.
/// GPT-2 small: at 60% a variant whose optimum is 243 GFLOP, against 19 in hand, is not
/// searched; at 70% neither is one at 79 GFLOP against 5.5.
pub const OUTCLASSED_FACTOR: u64 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// Small graphs keep 600 variant trials; large ones simulate at most 1.5M steps, never
    /// fewer than two moves' worth.
    #[test]
    fn the_variant_budget_is_a_count_of_steps_on_large_graphs() {
        assert_eq!(variant_trials(0), VARIANT_TRIALS);
        assert_eq!(variant_trials(400), VARIANT_TRIALS);
        assert_eq!(variant_trials(2_500), VARIANT_TRIALS);
        assert_eq!(variant_trials(7_300), 205);
        assert_eq!(variant_trials(14_000), 128);
        assert_eq!(variant_trials(1_000_000), 4 * SEARCH_WIDTH);
    }
}
