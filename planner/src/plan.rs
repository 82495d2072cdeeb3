//! `plan(&Analysis, &PlanOptions) -> Outcome`: the recompute set (and, where the graph as
//! given has no plan, the zero-FLOP order moves) that fits the ceiling at the fewest added
//! FLOPs this planner finds. A first pass races the given graph's zero-FLOP variants
//! ([`crate::variants`]) and block checkpointing's cut ([`crate::blocks`]); a plan that adds
//! anything is then planned again on the ladder of tighter ceilings below it, and a refusal is
//! probed at ceilings in between it and the lowest total found.
//!
//! The ladder: a plan that fits a tighter ceiling fits this one too, so the plan at a ceiling
//! is the cheapest of the first pass's and the plans found at the ladder's rungs, the whole
//! percents of the given graph's device total below the ceiling (the unit a `90%` ceiling is
//! written in), the highest first. A rung is planned with the plan in hand to beat, as a
//! variant of the first pass is: its searches get a variant's simulations, and one whose
//! linear model's optimum costs over [`crate::OUTCLASSED_FACTOR`] times the plan in hand is
//! outclassed at the ILP's root. The ladder stops at the first rung with no plan (the model's
//! optimum only grows as the ceiling falls, so below a rung where every search is outclassed
//! they are too; where the first pass refused, the first rung is planned with nothing in
//! hand, and finding no plan either ends it), after [`LADDER_PATIENCE`] rungs in a row that
//! find nothing cheaper, or after [`PlanOptions::ladder_rungs`]: counts, not the clock. A
//! rung's plan is kept only where it also runs in the arena the ceiling records. So the plan
//! at a ceiling adds no more than the plan of any rung the ladder reaches, and a sweep at
//! whole percents, two apart, plans below each ceiling the next one among its rungs.
//!
//! Invariants: the plan depends on the input and the options only (every search counts its
//! trials against the pass's schedule steps, shared by the first pass, the rungs and the
//! probes; the time limit is a safety stop): a rung starts before the limit with at least the
//! longest rung so far left, a probe with twice the longest pass so far, and a plan or a
//! refusal says when the clock stopped one or kept one from starting. A refusal names the
//! dominant ledger line of the lowest plan found.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use crate::analysis::{step_flops, Analysis};
use crate::blocks::BlockStart;
use crate::leaves::Climbs;
use crate::options::{variant_trials, Deadline, PlanOptions};
use crate::outcome::{Diagnosis, DiagnosisKind, Outcome, Rewritten};
use crate::par::Pool;
use crate::search::search_graph;
use crate::trace::Event;
use crate::variants::{fits_as_recorded, race, Tried, Variants};
use crate::PlanError;

/// A first plan adding at most 1/`NEGLIGIBLE_SHARE` of a step's FLOPs is not
/// planned again on the variants.
const NEGLIGIBLE_SHARE: u64 = 1000;

/// The ladder stops after this many rungs in a row that find nothing cheaper than the plan in
/// hand: each cheaper plan found buys as many rungs below it. The search is not monotone in
/// the ceiling, so a dearer rung does not end the ladder (the example at 70% of its total:
/// +1.54% of a step; its rungs at 69% and 68% +2.14% and +2.16%, at 67% +1.54% again, at 64%
/// +0.34%); the plans the ladder kept on the fixtures were found within three rungs of the
/// last one kept, and deep rungs of the 2-layer Llama each spend seconds in CBC for nothing.
const LADDER_PATIENCE: usize = 3;

/// Plan `before` (the analysis of the graph as given, under `o.analysis`).
///
/// The given graph and its zero-FLOP variants are planned in turn, each variant verified and
/// simulated under the profile: (0) its leaves written in the order their inputs become
/// ready ([`ckpt_passes::order::order_leaves`]: ORT then runs each weight gradient as soon as
/// it can), kept when that lowers the device total, then planned first (before the given
/// graph) and the base of the others; (1) its backward-only terms moved to run just before
/// their backward readers ([`ckpt_passes::recompute::lower_terms`], kept when that lowers the
/// device total); (2) its constant reshape targets guarded ([`ckpt_passes::guards`]: ORT's
/// planner then neither reuses nor shares the buffers computed from them, which go back to
/// the arena); (3) the guarded graph with its terms moved. The plan that adds the fewest
/// FLOPs wins (the earlier on a tie); a variant that fits as it is, is a plan that
/// recomputes nothing and ends the search; a first plan (of the reordered graph, else the
/// given one) adding at most a thousandth of a step is kept without trying the others. A
/// variant's plan is reported against the graph as given, its patch the variant's followed
/// by the recompute; of the refusals, the one with the lowest reachable total is reported.
/// Measured costs belong to the given graph's nodes, so with `o.costs` there are no variants.
/// A plan that adds anything is planned again at `o.ladder_rungs` tighter ceilings (the
/// module doc); a refusal is probed `o.refusal_probes` times ([`PlanOptions::refusal_probes`]).
///
/// With [`PlanOptions::fold`], where a plan is needed and folding the graph's copies away
/// lowers its total ([`crate::variants::folded`]), all of this is done first on the folded
/// graph, then on the given one, and the cheaper plan is kept (the folded one on a tie, and
/// without planning the given graph where it adds nothing). The given graph's passes are
/// asked to beat the folded plan, as a rung is asked to beat the plan in hand (a search whose
/// linear model has no plan within [`crate::OUTCLASSED_FACTOR`] times it is outclassed), and
/// a refusal of theirs is not probed.
///
/// With [`PlanOptions::plan_again`], a refusal is planned again: plans at and just above the
/// lowest total found are made real, and their outputs planned at the ceiling
/// ([`crate::again`]); so is a plan adding more than 1/[`crate::again::DEAR_SHARE`] of a
/// step, from plans at looser ceilings, the cheaper plan kept. A plan found so is reported
/// against the given graph, both plans' recomputes in it.
///
/// Where the profile holds its steps in one region ([`ckpt_ir::Profile::arena_bound`]), the
/// ceiling planned to is at most what the caller feeds plus that region, so the profile the
/// plan records is offered whatever the plan turns out to be.
pub fn plan(before: &Analysis, o: &PlanOptions) -> Result<Outcome, PlanError> {
    let started = Instant::now();
    let bound = before
        .ledger
        .fixed_bytes
        .saturating_add(o.analysis.profile.arena_bound());
    let bounded;
    let o = if bound < o.ceiling {
        bounded = PlanOptions {
            ceiling: bound,
            recorded_ceiling: Some(o.recorded()),
            ..o.clone()
        };
        &bounded
    } else {
        o
    };
    // With `fold`, where a plan is needed, the graph with its copies folded away (zero FLOPs,
    // fewer bytes) is planned first, then the graph as given, each with the steps a pass may
    // simulate: a lower total is not always a cheaper plan, so the cheaper of the two plans
    // wins (the folded one on a tie; a folded plan adding nothing without planning the
    // other). The ladder's rungs are whole percents of the given graph's total whatever
    // graph the passes plan: a sweep at whole percents then meets its own ceilings among the
    // rungs.
    let folded = crate::variants::folded(before, o)?;
    let total = before.ledger.total_bytes;
    let on_folded = match &folded {
        Some(v) => Some(v.based(passes(v.analysis(), total, o, None)?, o)?),
        None => None,
    };
    let outcome = match on_folded {
        Some(Outcome::Rewritten(r)) => match r.added_cost(&before.graph, o) {
            // A folded plan that adds nothing is kept: no plan of the given graph adds less.
            0 => Outcome::Rewritten(r),
            // The given graph's plan is kept only where it adds less than the folded plan, so
            // its passes are asked to beat that plan, as a rung is asked to beat the plan in hand.
            cost => {
                let given = passes(before, total, o, Some(cost))?;
                cheaper(Outcome::Rewritten(r), given, &before.graph, o)
            }
        },
        Some(f) => cheaper(f, passes(before, total, o, None)?, &before.graph, o),
        None => passes(before, total, o, None)?,
    };
    // A refusal is planned again on the outputs of plans at and above its lowest total, a
    // dear plan on the outputs of plans at looser ceilings.
    let outcome = match outcome {
        Outcome::CannotFit(d) => crate::again::again(before, d, o, started.elapsed())?,
        Outcome::Rewritten(r) => {
            Outcome::Rewritten(crate::again::dearer_again(before, r, o, started.elapsed())?)
        }
        planned => planned,
    };
    // With `chunk_loss_head`, where the plan adds anything or none fits, the graph with its
    // loss head in chunks of rows is planned too, and its plan kept where it adds fewer FLOPs
    // or fits where none did: its outputs match within rounding, not bit for bit. It comes
    // last, so that it can only lower what the plan adds.
    let outcome = crate::head::with_head_chunked(before, folded.as_ref(), outcome, o)?;
    Ok(match outcome {
        Outcome::CannotFit(d) => Outcome::CannotFit(d.worded(&before.ledger, o)),
        planned => planned,
    })
}

/// [`planned`] on `base` with a pass of its own (`o.pass_steps` schedule steps), and the
/// steps it spent, traced. `in_hand`: the added cost of a plan of another graph that a plan
/// of `base` must beat to be kept.
pub(crate) fn passes(
    base: &Analysis,
    given_total: u64,
    o: &PlanOptions,
    in_hand: Option<u64>,
) -> Result<Outcome, PlanError> {
    let pass = Pass {
        pool: Pool::new(o.pass_steps),
        climbs: RefCell::new(None),
    };
    let outcome = planned(base, given_total, o, &pass, in_hand);
    o.emit(|| Event::StepsSpent {
        spent: o.pass_steps - pass.pool.left(),
        of: o.pass_steps,
    });
    outcome
}

/// The cheaper of two outcomes for the same ceiling (`first` on a tie): a plan over a
/// refusal, of two plans the one adding less (then the lower total), of two refusals the one
/// with the lower reachable total; a graph that fits as it is over either.
fn cheaper(first: Outcome, second: Outcome, given: &ckpt_ir::Graph, o: &PlanOptions) -> Outcome {
    match (first, second) {
        (Outcome::AlreadyFits, _) | (_, Outcome::AlreadyFits) => Outcome::AlreadyFits,
        (Outcome::Rewritten(a), Outcome::Rewritten(b)) => {
            let key = |r: &Rewritten| (r.added_cost(given, o), r.after.ledger.total_bytes);
            if key(&b) < key(&a) {
                Outcome::Rewritten(b)
            } else {
                Outcome::Rewritten(a)
            }
        }
        (Outcome::Rewritten(a), Outcome::CannotFit(_)) => Outcome::Rewritten(a),
        (Outcome::CannotFit(_), Outcome::Rewritten(b)) => Outcome::Rewritten(b),
        (Outcome::CannotFit(a), Outcome::CannotFit(b)) => {
            if b.lowest_reachable_total_bytes < a.lowest_reachable_total_bytes {
                Outcome::CannotFit(b)
            } else {
                Outcome::CannotFit(a)
            }
        }
    }
}

/// What one [`plan`] call's passes share: the schedule steps its searches may still
/// simulate, and the leaves' order climbs ([`Climbs`]), kept for every rung and probe.
struct Pass {
    pool: Pool,
    climbs: RefCell<Option<Climbs>>,
}

/// [`plan`] with the steps its searches may simulate: the first pass, then the ladder below
/// it, then, where there is still no plan, the probes above the refusal. With `in_hand` (a
/// plan of another graph, which this one's must beat) every search is asked to beat it, and a
/// refusal is not probed: the plan in hand is kept over it.
fn planned(
    before: &Analysis,
    given_total: u64,
    o: &PlanOptions,
    pass: &Pass,
    in_hand: Option<u64>,
) -> Result<Outcome, PlanError> {
    let started = Instant::now();
    let first = match plan_once(before, o, pass, in_hand)? {
        Outcome::Rewritten(r) => Ok(r),
        Outcome::CannotFit(d) if d.kind == DiagnosisKind::NoPlanFound => Err(d),
        outcome => return Ok(outcome),
    };
    let first_took = started.elapsed();
    let (found, longest_rung) = laddered(before, given_total, o, pass, first, in_hand)?;
    match found {
        Ok(r) => Ok(Outcome::Rewritten(r)),
        Err(d) if in_hand.is_some() => Ok(Outcome::CannotFit(d)),
        Err(d) => probed(before, o, pass, d, first_took.max(longest_rung)),
    }
}

/// The ladder below `first`, the first pass's plan or refusal (see the module doc): the
/// cheapest plan found at the ceiling or a rung that runs in the arena the ceiling records,
/// or the refusal (lowered to the first rung's, where that is lower), with the rungs planned
/// and whether the clock stopped one recorded; and the longest rung's time. Where the first
/// pass refused, `in_hand` (a plan of another graph) is the plan the rungs must beat.
fn laddered(
    before: &Analysis,
    given_total: u64,
    o: &PlanOptions,
    pass: &Pass,
    mut found: Result<Box<Rewritten>, Diagnosis>,
    in_hand: Option<u64>,
) -> Result<(Result<Box<Rewritten>, Diagnosis>, Duration), PlanError> {
    let mut best_cost = match found.as_ref() {
        Ok(r) => Some(r.added_cost(&before.graph, o)),
        Err(_) => in_hand,
    };
    let (mut planned, mut clock_hit, mut longest) = (0, false, Duration::ZERO);
    let mut dearer = 0;
    let deadline = o.deadline();
    let (total, fixed) = (given_total, before.ledger.fixed_bytes);
    for rung in rungs(total, o.effective_ceiling(), fixed, o.ladder_rungs) {
        if best_cost == Some(0) || dearer == LADDER_PATIENCE {
            break;
        }
        // The time limit is the ladder's safety stop, not its bound: a rung starts before the
        // limit with at least the longest rung so far left (a rung searched with a plan in
        // hand to beat costs less than the first pass where that plan outclasses its
        // searches).
        if !rung_pays(&deadline, longest) {
            clock_hit = true;
            break;
        }
        // Planned under the rung, recorded under the ceiling: the model written is for it.
        let at = PlanOptions {
            ceiling: rung,
            recorded_ceiling: Some(o.recorded()),
            reserve_pct: 0.0,
            refusal_probes: 0,
            ..o.clone()
        };
        planned += 1;
        let started = Instant::now();
        let outcome = plan_once(before, &at, pass, best_cost)?;
        longest = longest.max(started.elapsed());
        let r = match outcome {
            Outcome::Rewritten(r) => r,
            // No plan here (none, or every search outclassed by the plan in hand): none at
            // the tighter rungs either.
            outcome => {
                o.emit(|| Event::RungPlanned {
                    ceiling: rung,
                    added: None,
                    kept: false,
                    at: o.at(),
                });
                if let Outcome::CannotFit(refused) = outcome {
                    clock_hit |= refused.timed_out;
                    if let Err(d) = found.as_mut() {
                        lower_to(d, refused);
                    }
                }
                break;
            }
        };
        clock_hit |= r.time_limit_hit;
        let cost = r.added_cost(&before.graph, o);
        let kept = best_cost.is_none_or(|b| cost < b) && fits_as_recorded(&r.after, o);
        o.emit(|| Event::RungPlanned {
            ceiling: rung,
            added: Some(cost),
            kept,
            at: o.at(),
        });
        if kept {
            (found, best_cost, dearer) = (Ok(r), Some(cost), 0);
        } else {
            dearer += 1;
        }
    }
    match found.as_mut() {
        Ok(r) => {
            r.rungs_planned = planned;
            r.time_limit_hit |= clock_hit;
        }
        Err(d) => {
            d.rungs_planned = planned;
            d.timed_out |= clock_hit;
        }
    }
    Ok((found, longest))
}

/// `d` lowered to `rung`'s lowest total (and its dominant line) where that is lower, marked
/// with what stopped `rung`'s searches.
pub(crate) fn lower_to(d: &mut Diagnosis, rung: Diagnosis) {
    d.timed_out |= rung.timed_out;
    d.steps_spent |= rung.steps_spent;
    if rung.lowest_reachable_total_bytes < d.lowest_reachable_total_bytes {
        d.lowest_reachable_total_bytes = rung.lowest_reachable_total_bytes;
        d.dominant_ledger_line = rung.dominant_ledger_line;
    }
}

/// The ladder's rungs below the effective ceiling `effective`: the whole percents of `total`
/// (the given graph's device total) under it and over `fixed` (the bytes no recompute
/// changes), the highest first, at most `n`.
fn rungs(total: u64, effective: u64, fixed: u64, n: usize) -> Vec<u64> {
    let mut rungs: Vec<u64> = whole_percents(total)
        .rev()
        .filter(|&r| r < effective && r > fixed)
        .collect();
    rungs.dedup();
    rungs.truncate(n);
    rungs
}

/// The whole percents of `total`, 1% to 99%, ascending (each rounded down to a byte): the
/// ceilings the ladder's rungs and the first plans planned again are made at.
pub(crate) fn whole_percents(total: u64) -> impl DoubleEndedIterator<Item = u64> {
    (1..100u128).map(move |pct| (total as u128 * pct / 100) as u64)
}

/// The refusal probes above `d`, the first pass's refusal, which took `longest`.
fn probed(
    before: &Analysis,
    o: &PlanOptions,
    pass: &Pass,
    mut d: Diagnosis,
    mut longest: Duration,
) -> Result<Outcome, PlanError> {
    // Bisect between the ceiling and the lowest total found: a plan that fits a ceiling in
    // between is reachable, and lowers the reported total to its own (and the dominant line
    // to its ledger's).
    // Once the time limit has passed a probe's searches stop before their first trial, and
    // what it would still compute (its variants, their block plans, recomputing every
    // candidate) says nothing the first pass did not: no probe is started then (GPT-2 at 132
    // layers, 70%: three probes took 12 s each after the limit).
    // Nor is one started that the time left may not pay for: twice the longest pass so far
    // (a probe plans as much as the first pass, at another ceiling, which can take longer).
    // It would end past the limit, with what it found cut short (GPT-2 at 96 layers: at 80%
    // passes of 12 s, the second probe ran from 24 s to 33.5 s; at 60% a first pass of 9 s,
    // then probes of up to 15 s).
    let mut lo = o.effective_ceiling();
    let deadline = o.deadline();
    for _ in 0..o.refusal_probes {
        let hi = d.lowest_reachable_total_bytes;
        if hi <= lo + 1 {
            break;
        }
        if !probe_pays(&deadline, longest) {
            d.timed_out = true;
            break;
        }
        let mid = lo + (hi - lo) / 2;
        let probe = PlanOptions {
            ceiling: mid,
            reserve_pct: 0.0,
            refusal_probes: 0,
            ..o.clone()
        };
        d.ceilings_probed += 1;
        let started = Instant::now();
        let planned = plan_once(before, &probe, pass, None)?;
        longest = longest.max(started.elapsed());
        let (total, dominant) = match planned {
            Outcome::Rewritten(r) => (r.after.ledger.total_bytes, r.after.ledger.dominant().into()),
            Outcome::CannotFit(p) => {
                lo = mid;
                d.timed_out |= p.timed_out;
                d.steps_spent |= p.steps_spent;
                (p.lowest_reachable_total_bytes, p.dominant_ledger_line)
            }
            Outcome::AlreadyFits => (before.ledger.total_bytes, before.ledger.dominant().into()),
        };
        if total < d.lowest_reachable_total_bytes {
            d = d.lowest_at(total, &dominant);
        }
    }
    Ok(Outcome::CannotFit(d))
}
/// Whether a rung of the ladder may start: the time limit has not passed, and the time left
/// is at least `longest`, the longest rung so far.
fn rung_pays(deadline: &Deadline, longest: Duration) -> bool {
    !deadline.passed() && deadline.left() >= longest
}

/// Whether a refusal probe may start: the time limit has not passed, and the time left is at
/// least twice `longest`, the longest planning pass so far.
fn probe_pays(deadline: &Deadline, longest: Duration) -> bool {
    !deadline.passed() && deadline.left() >= longest.saturating_mul(2)
}

/// One planning pass at `o.ceiling`: the variants built, block checkpointing's starts
/// simulated on them, the first candidate search, then the race ([`race`]). `in_hand`: the
/// added cost of a plan in hand from a higher ceiling, which every search is asked to beat.
fn plan_once(
    before: &Analysis,
    o: &PlanOptions,
    pass: &Pass,
    in_hand: Option<u64>,
) -> Result<Outcome, PlanError> {
    if o.costs.is_some() || before.ledger.total_bytes <= o.effective_ceiling() {
        let bounded = PlanOptions {
            max_trials: o.max_trials.min(variant_trials(before.sim.schedule.len())),
            ..o.clone()
        };
        let o = if in_hand.is_some() { &bounded } else { o };
        return search_graph(before, o, in_hand, &pass.pool);
    }
    let variants = match Variants::build(before, o, &pass.climbs)? {
        Ok(v) => v,
        Err(as_is) => return Ok(Outcome::Rewritten(as_is)),
    };
    // Block checkpointing on the base and on its guarded variants, run (two simulations each).
    let bases = variants.bases(before);
    let blocks = BlockStart::new(&bases, o)?;
    o.emit(|| Event::BlockStartsSimulated { at: o.at() });
    let negligible = step_flops(before, &o.analysis.bindings) / NEGLIGIBLE_SHARE;
    let Some(first) = variants.first(before, blocks.fits(o), in_hand, o, &pass.pool)? else {
        return Ok(Outcome::AlreadyFits);
    };
    // A plan adding under a thousandth of a step is kept: no variant can save more than that.
    let mut tried = Tried::beating(in_hand);
    match first {
        Ok(r) if r.counts.added_flops <= negligible => return Ok(Outcome::Rewritten(r)),
        planned => tried.consider(planned),
    };
    let fits_as_given = race(
        before, &variants, &blocks, &bases, negligible, o, &mut tried, &pass.pool,
    )?;
    if fits_as_given {
        return Ok(Outcome::AlreadyFits);
    }
    let (found, refused) = tried.finish();
    Ok(match (found, refused) {
        (Some(r), _) => Outcome::Rewritten(r),
        // A block plan's total is a total a rewrite reaches too: the lower names its ledger.
        (None, Some(d)) => Outcome::CannotFit(match blocks.lowest_plan(&bases, o)? {
            Some((total, dominant)) if total < d.lowest_reachable_total_bytes => {
                d.lowest_at(total, dominant)
            }
            _ => d,
        }),
        (None, None) => Outcome::AlreadyFits,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::analysis::{analyse, AnalyseOptions};
    use crate::trace::Trace;

    /// A refusal probe starts only before the limit and with at least twice the longest pass
    /// so far left; a passed limit is recorded as hit.
    #[test]
    fn a_probe_starts_only_when_the_time_left_pays_for_a_pass() {
        let ahead = Deadline::new(Instant::now() + Duration::from_secs(60));
        assert!(probe_pays(&ahead, Duration::from_secs(20)));
        assert!(!probe_pays(&ahead, Duration::from_secs(40)));
        assert!(!ahead.hit());
        let passed = Deadline::new(Instant::now());
        assert!(!probe_pays(&passed, Duration::ZERO));
        assert!(passed.hit());
    }

    /// A rung starts before the limit with at least the longest rung so far left (the first
    /// one whenever the limit has not passed); a passed limit is recorded as hit.
    #[test]
    fn a_rung_starts_only_when_the_time_left_pays_for_the_longest_rung() {
        let ahead = Deadline::new(Instant::now() + Duration::from_secs(60));
        assert!(rung_pays(&ahead, Duration::ZERO));
        assert!(rung_pays(&ahead, Duration::from_secs(40)));
        assert!(!rung_pays(&ahead, Duration::from_secs(70)));
        assert!(!ahead.hit());
        let passed = Deadline::new(Instant::now());
        assert!(!rung_pays(&passed, Duration::ZERO));
        assert!(passed.hit());
    }

    /// The ladder's rungs are the whole percents of the total under the effective ceiling and
    /// over the fixed bytes, the highest first, at most the number asked for.
    #[test]
    fn the_rungs_are_whole_percents_of_the_total_below_the_ceiling() {
        assert_eq!(rungs(1000, 800, 0, 3), vec![790, 780, 770]);
        // A ceiling between two percents: the first rung is the percent just under it.
        assert_eq!(rungs(1000, 795, 0, 2), vec![790, 780]);
        // Not over the fixed bytes.
        assert_eq!(rungs(1000, 800, 775, 16), vec![790, 780]);
        assert!(rungs(1000, 800, 0, 0).is_empty());
        // A total under 100 bytes: each rung once.
        assert_eq!(rungs(50, 40, 0, 3), vec![39, 38, 37]);
    }

    /// loss = sum(tanh(tanh(x·w1)·w2) ⊙ c), with its backward.
    const MLP2: &str = r#"
ir_version 10
opset ai.onnx 17
input %0 "x": f32[128,128]
input %1 "c": f32[128,128]
input %2 "w1": f32[128,128]
input %3 "w2": f32[128,128]
init %4 "one": f32[] = [1.0]
%5 "h1": ?[?] = MatMul(%0, %2)  # "MatMul_h1"
%6 "t1": ?[?] = Tanh(%5)  # "Tanh_t1"
%7 "h2": ?[?] = MatMul(%6, %3)  # "MatMul_h2"
%8 "a2": ?[?] = Tanh(%7)  # "Tanh_a2"
%9 "m": ?[?] = Mul(%8, %1)  # "Mul_m"
%10 "loss": f32[] = ReduceSum(%9) {keepdims=0}  # "ReduceSum_loss"
%11 "sq2": ?[?] = Mul(%8, %8)  # "Mul_sq2"
%12 "d2": ?[?] = Sub(%4, %11)  # "Sub_d2"
%13 "gh2": ?[?] = Mul(%1, %12)  # "Mul_gh2"
%14 "t1t": ?[?] = Transpose(%6)  # "Transpose_t1t"
%15 "w2_grad": f32[128,128] = MatMul(%14, %13)  # "MatMul_w2_grad"
%16 "w2t": ?[?] = Transpose(%3)  # "Transpose_w2t"
%17 "ga1": ?[?] = MatMul(%13, %16)  # "MatMul_ga1"
%18 "sq1": ?[?] = Mul(%6, %6)  # "Mul_sq1"
%19 "d1": ?[?] = Sub(%4, %18)  # "Sub_d1"
%20 "gh1": ?[?] = Mul(%17, %19)  # "Mul_gh1"
%21 "xt": ?[?] = Transpose(%0)  # "Transpose_xt"
%22 "w1_grad": f32[128,128] = MatMul(%21, %20)  # "MatMul_w1_grad"
output %10 "loss"
output %22 "w1_grad"
output %15 "w2_grad"
"#;

    /// MLP2 planned at 80% of its total on one thread under the options `with` makes of the
    /// defaults: the analysis, the outcome and the trace's events.
    fn traced_mlp2(
        with: impl FnOnce(PlanOptions) -> PlanOptions,
    ) -> (Analysis, Outcome, Vec<Event>) {
        let g = ckpt_ir::parse_graph(MLP2).unwrap();
        let before = analyse(g, &AnalyseOptions::default()).unwrap();
        let events = Arc::new(Mutex::new(Vec::<Event>::new()));
        let sink = Arc::clone(&events);
        let o = with(PlanOptions {
            threads: 1,
            trace: Some(Trace::new(move |e| sink.lock().unwrap().push(e.clone()))),
            ..PlanOptions::new(before.ledger.total_bytes * 80 / 100, Default::default())
        });
        let planned = plan(&before, &o).unwrap();
        let events = events.lock().unwrap().clone();
        (before, planned, events)
    }

    /// With `fold`, where a plan is needed, MLP2's three transposed operands are folded into Gemms first,
    /// said in the trace, and the plan at 80% is the folded graph with its leaves reordered,
    /// nothing recomputed; a plan is not needed at the graph's own total, and nothing is
    /// folded there.
    #[test]
    fn a_plan_folds_transposes_first_where_one_is_needed() {
        let (before, planned, events) = traced_mlp2(|o| PlanOptions { fold: true, ..o });
        let Outcome::Rewritten(r) = planned else {
            panic!("no plan at 80%");
        };
        let first = events[0].clone();
        let Event::Folded {
            folds,
            total_bytes,
            folded_bytes,
        } = first
        else {
            panic!("{first}");
        };
        assert_eq!((folds, total_bytes), (3, before.ledger.total_bytes));
        assert!(folded_bytes < total_bytes);
        assert!(r.folded && r.counts.added_flops == 0);
        assert_eq!(r.method_label(), "folded copies and order moves only");
        assert!(
            r.patch_text.starts_with("patch \"copies folded\""),
            "{}",
            r.patch_text
        );
        assert!(!r
            .after
            .graph
            .nodes()
            .iter()
            .any(|&n| r.after.graph.node(n).op_type == "Transpose"));
        let o = PlanOptions {
            fold: true,
            ..PlanOptions::new(before.ledger.total_bytes, Default::default())
        };
        assert!(matches!(plan(&before, &o).unwrap(), Outcome::AlreadyFits));
    }

    /// A plan on a small text graph (no ladder) sends its trace to the sink, not to stderr, in
    /// the order the planner works: the leaves' order climbed, block checkpointing's starts, the first
    /// search's ILP round with what its run holds at the peak, its fitting plan cut and
    /// challenged by a climb from no recompute (whose plan is cut too), the other variants outclassed
    /// by the plan in hand, and the steps the pass spent, last. Each event prints as one line
    /// (a peak as several).
    #[test]
    fn a_plan_emits_typed_trace_events() {
        let (_, planned, events) = traced_mlp2(|o| PlanOptions {
            ladder_rungs: 0,
            ..o
        });
        assert!(matches!(planned, Outcome::Rewritten(_)));
        let lines: Vec<String> = events.iter().map(Event::to_string).collect();
        let mut kinds: Vec<&str> = events.iter().map(kind).collect();
        kinds.dedup();
        assert_eq!(
            kinds,
            [
                "leaf moved",
                "leaf trials",
                "leaf order searched",
                "block starts",
                "round simulated",
                "peak held",
                "round cut",
                "challenged",
                "round cut",
                "variant planned",
                "variant searched",
                "outclassed",
                "variant planned",
                "outclassed",
                "steps spent"
            ],
            "{lines:#?}"
        );
        assert!(lines[0].starts_with("leaf order: MatMul_w2_grad to place "));
        assert!(lines
            .iter()
            .any(|l| l.starts_with("ilp round 0: cost ") && l.contains(" simulated ")));
        assert_eq!(
            lines.last().map(String::as_str),
            Some("plan: the searches simulated 396 of 8000000 schedule steps")
        );
        for (e, line) in events.iter().zip(&lines) {
            assert!(
                matches!(e, Event::PeakHeld(_)) || !line.contains('\n'),
                "{line}"
            );
        }
    }

    /// A refusal names the dominant ledger line of the lowest plan found, not the given
    /// graph's: on MLP2 one byte over the fixed bytes, the given graph's largest line is the
    /// transient bytes at its peak; the lowest plan recomputes them away, and the outputs the
    /// caller holds are its largest line. A plan at that lowest total says the same.
    #[test]
    fn a_refusal_names_the_lowest_plans_dominant_line() {
        let g = ckpt_ir::parse_graph(MLP2).unwrap();
        let before = analyse(g, &AnalyseOptions::default()).unwrap();
        assert_eq!(before.ledger.dominant(), "transient at peak");
        let at = |ceiling: u64| {
            let o = PlanOptions {
                threads: 1,
                ..PlanOptions::new(ceiling, Default::default())
            };
            plan(&before, &o).unwrap()
        };
        let Outcome::CannotFit(d) = at(before.ledger.fixed_bytes + 1) else {
            panic!("a plan one byte over the fixed bytes");
        };
        assert_eq!(d.kind, DiagnosisKind::NoPlanFound);
        assert_eq!(d.dominant_ledger_line, "outputs held by the caller");
        assert!(
            d.message
                .ends_with("dominant ledger line: outputs held by the caller"),
            "{}",
            d.message
        );
        let Outcome::Rewritten(r) = at(d.lowest_reachable_total_bytes) else {
            panic!("no plan at the lowest total found");
        };
        assert_eq!(r.after.ledger.total_bytes, d.lowest_reachable_total_bytes);
        assert_eq!(r.after.ledger.dominant(), d.dominant_ledger_line);
    }

    /// The kind of an event, for the trace test.
    fn kind(e: &Event) -> &'static str {
        match e {
            Event::Folded { .. } => "copies folded",
            Event::LeafMoved { .. } => "leaf moved",
            Event::LeafTrials { .. } => "leaf trials",
            Event::LeafOrderSearched { .. } => "leaf order searched",
            Event::BlockStartsSimulated { .. } => "block starts",
            Event::RoundSimulated { .. } => "round simulated",
            Event::PeakHeld(_) => "peak held",
            Event::DropsDone { .. } | Event::SwapsDone { .. } => "round cut",
            Event::Flip { .. } | Event::FlipFits { .. } | Event::SearchFits { .. } => "challenged",
            Event::VariantPlanned { .. } => "variant planned",
            Event::VariantSearched { .. } => "variant searched",
            Event::Outclassed { .. } => "outclassed",
            Event::StepsSpent { .. } => "steps spent",
            _ => "other",
        }
    }
}
