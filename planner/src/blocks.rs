//! Block checkpointing as a start, cut with the simulator in the loop.
//!
//! Deep ceilings are where the candidate search is weakest: its moves flip one candidate at
//! a time, each rebuilt on its own, and a transformer layer has dozens of them. Block
//! checkpointing ([`ckpt_passes::recompute::per_block`]) keeps each block's input and rebuilds
//! the whole block once, as one shared copy, just before its first backward reader: far
//! deeper, at about a fifth of a step. Here it is a start: each granularity's plan is run
//! under the profile, and one that fits is cut, (1) whole blocks first, the first rebuilt
//! first (the last forward block, rebuilt just after it ran, rarely saves anything), then (2)
//! single candidates, the most expensive first (a matmul's output is kept, the pointwise
//! chains around it are rebuilt), each drop kept when the run still fits. Every answer is a
//! simulation; drops are judged in order, a core's worth at a time, so the plan does not
//! depend on the number of threads.

use ckpt_passes::recompute::{candidates, per_block, problem, Candidates, Granularity};
use ckpt_solver::{Method, Plan, Problem};

use crate::analysis::Analysis;
use crate::options::{variant_trials, Deadline, PlanOptions};
use crate::oracle::{patch_flops, Oracle, Simulator};
use crate::outcome::Rewritten;
use crate::par::{par_map, Budget};
use crate::search::swap_candidates;
use crate::trace::Event;
use crate::PlanError;

/// Block checkpointing's plans of some zero-FLOP variants of a graph, each granularity's run
/// under the profile: the start the planner cuts when the candidate search finds nothing
/// cheaper.
pub(crate) struct BlockStart {
    starts: Vec<Start>,
}

/// What [`BlockStart::cut_best`] returns: the base's index and the cut plan, if one fits.
pub(crate) type CutResult = Result<Option<(usize, Box<Rewritten>)>, PlanError>;

/// One base graph's candidates and block plans.
struct Start {
    /// Index into the bases [`BlockStart::new`] was given.
    base: usize,
    cands: Candidates,
    prob: Problem,
    /// Each granularity's plan and its simulated device total, and whether it has cheap
    /// extras (cut only where no plain block plan fits).
    seeds: Vec<(Granularity, Plan, u64, bool)>,
}

impl Start {
    fn oracle<'a>(&'a self, base: &'a Analysis, o: &'a PlanOptions) -> Simulator<'a> {
        Simulator {
            before: base,
            cands: &self.cands,
            prob: &self.prob,
            options: o,
        }
    }

    /// Block checkpointing on `base` (the `k`th) at `granularity`, simulated: its plan and,
    /// where rebuilding the cheap candidates outside the blocks lowers the total, that plan
    /// too (none where the graph has no blocks of that granularity).
    fn seeds_at(
        &self,
        k: usize,
        base: &Analysis,
        granularity: Granularity,
        o: &PlanOptions,
    ) -> Result<Vec<(Granularity, Plan, u64, bool)>, PlanError> {
        let Some(pb) = per_block(
            &base.graph,
            &base.class,
            &base.sim,
            &self.cands,
            granularity,
        ) else {
            return Ok(Vec::new());
        };
        if !pb.recompute.iter().any(|&r| r) {
            return Ok(Vec::new());
        }
        let mut plan = Plan::for_set(&self.prob, pb.recompute, Method::PerBlock);
        plan.remat_at = pb.remat_at;
        let (total, mut live) = self.oracle(base, o).total_and_live(&plan)?;
        // The blocks' plan with the cheap candidates outside them rebuilt too (a weight's
        // transpose, a mask every layer's backward reads) where they are live at the run's
        // peak, while that lowers the total: one simulation a round. A seed of its own, cut
        // only where no plain block plan fits (the cut of a lower start is not always
        // cheaper).
        let (mut deep, mut deep_total) = (plan.clone(), total);
        for _ in 0..EXTRA_ROUNDS {
            let add: Vec<usize> = cheap_extras(&self.prob, &deep)
                .into_iter()
                .filter(|&i| live.contains(&self.prob.candidates[i].label))
                .collect();
            if add.is_empty() {
                break;
            }
            let mut deeper = deep.clone();
            for &i in &add {
                deeper.recompute[i] = true;
            }
            let (t, deeper_live) = self.oracle(base, o).total_and_live(&deeper)?;
            o.emit(|| Event::BlockExtras {
                base: k,
                granularity,
                extras: add.len(),
                from_bytes: deep_total,
                to_bytes: t,
            });
            if t >= deep_total {
                break;
            }
            (deep, deep_total, live) = (deeper, t, deeper_live);
        }
        if o.tracing() {
            o.emit(|| Event::BlockSeed {
                base: k,
                granularity,
                blocks: pb.blocks,
                total_bytes: total,
            });
            let held = self.oracle(base, o).plan_peak_held(&plan)?;
            o.emit(|| Event::PeakHeld(held));
        }
        let mut seeds = vec![(granularity, plan, total, false)];
        if deep_total < total {
            seeds.push((granularity, deep, deep_total, true));
        }
        Ok(seeds)
    }
}

impl BlockStart {
    /// Block checkpointing on each of `bases` at each granularity, simulated (two runs a
    /// base; none where the graph has no residual stream). The bases' candidates, then each
    /// base and granularity's plans, are found in parallel (each on its own: the result does
    /// not depend on the number of threads).
    pub(crate) fn new(bases: &[&Analysis], o: &PlanOptions) -> Result<BlockStart, PlanError> {
        let mut starts: Vec<Start> = par_map(o.threads, bases, |base| {
            let cands = candidates(&base.graph, &base.sim, &base.types, &o.analysis.bindings);
            let arena_ceiling = o
                .effective_ceiling()
                .saturating_sub(base.ledger.fixed_bytes)
                .max(1);
            let prob = problem(&base.sim, &cands, arena_ceiling);
            (cands, prob)
        })
        .into_iter()
        .enumerate()
        .map(|(k, (cands, prob))| Start {
            base: k,
            cands,
            prob,
            seeds: Vec::new(),
        })
        .collect();
        let jobs: Vec<(usize, Granularity)> = (0..bases.len())
            .flat_map(|k| [(k, Granularity::Sublayer), (k, Granularity::Layer)])
            .collect();
        let seeds = par_map(o.threads, &jobs, |&(k, granularity)| {
            starts[k].seeds_at(k, bases[k], granularity, o)
        });
        for ((k, _), found) in jobs.iter().zip(seeds) {
            starts[*k].seeds.extend(found?);
        }
        Ok(BlockStart { starts })
    }

    /// Whether some base's block plan fits the ceiling as it is.
    pub(crate) fn fits(&self, o: &PlanOptions) -> bool {
        self.lowest().is_some_and(|t| t <= o.effective_ceiling())
    }

    /// The lowest device total of the block plans (a total a rewrite really reaches).
    pub(crate) fn lowest(&self) -> Option<u64> {
        self.starts
            .iter()
            .flat_map(|s| s.seeds.iter().map(|x| x.2))
            .min()
    }

    /// [`BlockStart::lowest`] with the dominant line of that plan's ledger (one trial of its
    /// rewrite of its base, one of `bases`, the bases [`BlockStart::new`] was given).
    pub(crate) fn lowest_plan(
        &self,
        bases: &[&Analysis],
        o: &PlanOptions,
    ) -> Result<Option<(u64, &'static str)>, PlanError> {
        let lowest = self
            .starts
            .iter()
            .flat_map(|s| s.seeds.iter().map(move |x| (x.2, s, &x.1)))
            .min_by_key(|x| x.0);
        let Some((total, start, plan)) = lowest else {
            return Ok(None);
        };
        let ledger = start.oracle(bases[start.base], o).ledger_of(plan)?;
        Ok(Some((total, ledger.dominant())))
    }

    /// The [`CUTS`] fitting block plans of the lowest totals cut to what the ceiling needs
    /// (while the clock allows: past the time limit, the lowest is taken as it is); the one
    /// adding the fewest FLOPs, made real against its base (whose candidates it indexes), with
    /// the base's index in `bases`. `None` when none fits.
    pub(crate) fn cut_best(
        &self,
        bases: &[&Analysis],
        o: &PlanOptions,
        clock: &Deadline,
    ) -> CutResult {
        let started = std::time::Instant::now();
        let effective = o.effective_ceiling();
        let seeds = |extras: bool| -> Vec<(&Start, &Granularity, &Plan, u64)> {
            self.starts
                .iter()
                .flat_map(|s| {
                    s.seeds
                        .iter()
                        .filter(move |x| x.3 == extras)
                        .map(move |(g, p, t, _)| (s, g, p, *t))
                })
                .filter(|x| x.3 <= effective)
                .collect()
        };
        let mut fitting = seeds(false);
        if fitting.is_empty() {
            fitting = seeds(true);
        }
        fitting.sort_by_key(|x| x.3);
        fitting.truncate(CUTS);
        let mut best: Option<(u64, &Start, Plan)> = None; // (added FLOPs, start, plan)
        for (start, granularity, plan, _) in fitting {
            // Past the time limit the first (lowest) plan is still taken, uncut: it fits, and
            // a refusal whose lowest total fits the ceiling would say otherwise.
            if clock.passed() && best.is_some() {
                break;
            }
            let base = bases[start.base];
            let oracle = start.oracle(base, o);
            let budget = variant_trials(base.sim.schedule.len()) / CUTS;
            let cutter = Cutter {
                oracle: &oracle,
                start,
                effective,
                o,
                clock,
            };
            let cut = cutter.cut(plan.clone(), budget)?;
            let flops = added_flops(base, &start.cands, &cut, o);
            o.emit(|| Event::BlockCut {
                base: start.base,
                granularity: *granularity,
                flops,
            });
            if best.as_ref().is_none_or(|b| flops < b.0) {
                best = Some((flops, start, cut));
            }
        }
        let Some((_, start, mut plan)) = best else {
            return Ok(None);
        };
        let base = bases[start.base];
        plan.info.method = Method::BlockCut;
        plan.info.wall = started.elapsed();
        plan.cost = set_cost(&start.prob, &plan);
        let (total, realised) = start.oracle(base, o).realise(&plan)?;
        if total > effective {
            return Ok(None);
        }
        let mut r = Rewritten::new(
            realised,
            start.cands.clone(),
            plan,
            start.prob.ceiling,
            effective,
        );
        r.time_limit_hit = clock.hit();
        Ok(Some((start.base, Box::new(r))))
    }
}

/// The candidates `plan` keeps whose rebuild costs at most one operation per element
/// ([`CHEAP_FLOPS_PER_BYTE`]): a transpose, a cast, a mask.
fn cheap_extras(prob: &Problem, plan: &Plan) -> Vec<usize> {
    prob.candidates
        .iter()
        .enumerate()
        .filter(|&(i, c)| {
            !plan.recompute[i]
                && c.cost * CHEAP_FLOPS_PER_BYTE.1 <= c.bytes * CHEAP_FLOPS_PER_BYTE.0
        })
        .map(|(i, _)| i)
        .collect()
}

/// What a cheap extra may cost, as FLOPs per byte of what it frees (numerator, denominator):
/// one per 4-byte element.
const CHEAP_FLOPS_PER_BYTE: (u64, u64) = (1, 4);

/// How many rounds of cheap extras a block plan gets.
const EXTRA_ROUNDS: usize = 4;

/// How many block plans are cut. Each cut judges at most `variant_trials / CUTS` drops (a
/// count, so the plan does not depend on the clock): together one variant's worth.
const CUTS: usize = 2;

/// What `plan` recomputes costs under `prob`'s linear model.
fn set_cost(prob: &Problem, plan: &Plan) -> u64 {
    plan.recompute
        .iter()
        .zip(&prob.candidates)
        .filter(|(r, _)| **r)
        .map(|(_, c)| c.cost)
        .sum()
}

/// `plan` with `drop` (candidate indices) kept instead of recomputed.
fn without(plan: &Plan, drop: &[usize]) -> Plan {
    let mut p = plan.clone();
    for &i in drop {
        p.recompute[i] = false;
        p.remat_at[i] = None;
    }
    p
}

/// What cutting one block plan works with: the simulator of its base, the base's start, the
/// effective ceiling, the options and the clock.
struct Cutter<'a> {
    oracle: &'a Simulator<'a>,
    start: &'a Start,
    effective: u64,
    o: &'a PlanOptions,
    clock: &'a Deadline,
}

impl Cutter<'_> {
    /// A step's trials: the options' threads, the clock, at most `max_trials`.
    fn budget(&self, max_trials: usize) -> Budget<'_> {
        Budget {
            threads: self.o.threads.max(1),
            clock: self.clock,
            max_trials,
        }
    }

    /// Cut a block plan that fits: whole blocks (candidates sharing a rebuild step), the first
    /// rebuilt first, then single candidates, the most expensive first; each drop is kept when
    /// the plan still fits. At most `budget` drops are judged in all (those not judged are kept).
    fn cut(&self, mut plan: Plan, budget: usize) -> Result<Plan, PlanError> {
        let (start, o) = (self.start, self.o);
        let mut steps: Vec<usize> = plan.remat_at.iter().flatten().copied().collect();
        steps.sort_unstable();
        steps.dedup();
        let groups: Vec<Vec<usize>> = steps
            .iter()
            .map(|&s| {
                (0..plan.recompute.len())
                    .filter(|&i| plan.remat_at[i] == Some(s))
                    .collect()
            })
            .collect();
        let judged;
        (plan, judged) = self.drops(plan, &groups, budget)?;
        o.emit(|| Event::BlocksJudged {
            judged,
            blocks: groups.len(),
            rebuilt: plan
                .remat_at
                .iter()
                .flatten()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            at: o.at(),
        });
        let mut singles: Vec<usize> = (0..plan.recompute.len())
            .filter(|&i| plan.recompute[i])
            .collect();
        singles.sort_by_key(|&i| (std::cmp::Reverse(start.prob.candidates[i].cost), i));
        // A candidate another recomputed one reads is dropped with it only if both go; a single
        // drop keeps its value, and its dependents' copies read the kept value.
        let singles: Vec<Vec<usize>> = singles
            .into_iter()
            .filter(|&i| start.cands.list[i].model.cost > 0)
            .map(|i| vec![i])
            .collect();
        let left = budget.saturating_sub(judged);
        let (plan, single_judged) = self.drops(plan, &singles, left)?;
        o.emit(|| Event::SinglesJudged {
            judged: single_judged,
            singles: singles.len(),
            left: plan.recompute.iter().filter(|&&r| r).count(),
            at: o.at(),
        });
        let left = left.saturating_sub(single_judged);
        let (plan, swapped) = self.swaps(plan, left)?;
        o.emit(|| Event::SwapsKept {
            kept: swapped,
            at: o.at(),
        });
        Ok(plan)
    }

    /// Swap each recompute of `plan` that costs at least 1% of the plan (the most expensive
    /// first) for the first cheaper unchosen candidate (best first, [`swap_candidates`]) with
    /// which the plan still fits, judging at most `budget` swaps in all. Returns the plan and how
    /// many swaps were kept.
    fn swaps(&self, mut plan: Plan, budget: usize) -> Result<(Plan, usize), PlanError> {
        let start = self.start;
        let budget = self.budget(budget);
        let mut chosen: Vec<usize> = (0..plan.recompute.len())
            .filter(|&i| plan.recompute[i] && start.cands.list[i].model.cost > 0)
            .collect();
        chosen.sort_by_key(|&i| (std::cmp::Reverse(start.prob.candidates[i].cost), i));
        let (mut trials, mut kept) = (0, 0);
        for i in chosen {
            if !plan.recompute[i]
                || start.prob.candidates[i].cost.saturating_mul(100) < set_cost(&start.prob, &plan)
            {
                continue;
            }
            let base = without(&plan, &[i]);
            let partners = swap_candidates(&start.prob, &plan.recompute, i);
            let (_, swapped) = budget.first_kept(&partners, &mut trials, |j| {
                let mut trial = base.clone();
                trial.recompute[j] = true;
                self.oracle
                    .plan_fits(&trial, self.effective)
                    .map(|fits| fits.then_some(trial))
            })?;
            if let Some(p) = swapped {
                plan = p;
                kept += 1;
            }
            if trials >= budget.max_trials {
                break;
            }
        }
        Ok((plan, kept))
    }

    /// Try each of the first `budget` of `units` (sets of candidates) in order: drop it when the
    /// plan still fits. A core's worth are simulated at once and judged in order; after a kept
    /// drop the rest are judged again against it, as one thread would. Returns the plan and how
    /// many units were judged (fewer than the budget when the clock stopped it).
    fn drops(
        &self,
        mut plan: Plan,
        units: &[Vec<usize>],
        budget: usize,
    ) -> Result<(Plan, usize), PlanError> {
        let budget = self.budget(budget);
        let all: Vec<usize> = (0..units.len()).collect();
        let (mut next, mut trials) = (0, 0);
        while next < all.len() {
            // A unit not judged (the clock, the budget) stays: the plan still fits.
            let (judged, kept) = budget.first_kept(&all[next..], &mut trials, |u| {
                let trial = without(&plan, &units[u]);
                self.oracle
                    .plan_fits(&trial, self.effective)
                    .map(|fits| fits.then_some(trial))
            })?;
            next += judged;
            match kept {
                Some(p) => plan = p,
                None => break,
            }
        }
        Ok((plan, next))
    }
}

/// The FLOPs `plan`'s rewrite of `base` adds.
fn added_flops(base: &Analysis, cands: &Candidates, plan: &Plan, o: &PlanOptions) -> u64 {
    let patch = ckpt_passes::recompute::rewrite(&base.graph, cands, plan, "trial");
    patch_flops(base, &patch, &o.analysis.bindings)
}
