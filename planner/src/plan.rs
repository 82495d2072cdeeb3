//! `plan(&Analysis, &PlanOptions) -> Outcome`: the recompute set (and, where the graph as
//! given has no plan, the zero-FLOP order moves) that fits the ceiling at the fewest added
//! FLOPs this planner finds. A first pass races the given graph's zero-FLOP variants
//! ([`crate::variants`]) and block checkpointing's cut ([`crate::blocks`]); a refusal is then
//! probed at ceilings in between.
//!
//! Invariants: the plan depends on the input and the options only (every search counts its
//! trials against the pass's schedule steps, shared by the first pass and the probes); a
//! probe starts only where the time left pays for it; a refusal is worded from the given
//! graph's ledger.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use crate::analysis::{step_flops, Analysis};
use crate::blocks::BlockStart;
use crate::leaves::Climbs;
use crate::options::{Deadline, PlanOptions};
use crate::outcome::{Diagnosis, DiagnosisKind, Outcome};
use crate::par::Pool;
use crate::search::search_graph;
use crate::trace::Event;
use crate::variants::{race, Tried, Variants};
use crate::PlanError;

/// A first plan adding at most 1/`NEGLIGIBLE_SHARE` of a step's FLOPs is not
/// planned again on the variants.
const NEGLIGIBLE_SHARE: u64 = 1000;

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
/// A refusal is probed `o.refusal_probes` times ([`PlanOptions::refusal_probes`]).
///
/// Where the profile holds its steps in one region ([`ckpt_ir::Profile::arena_bound`]), the
/// ceiling planned to is at most what the caller feeds plus that region, so the profile the
/// plan records is offered whatever the plan turns out to be.
pub fn plan(before: &Analysis, o: &PlanOptions) -> Result<Outcome, PlanError> {
    let bound = before
        .ledger
        .fixed_bytes
        .saturating_add(o.analysis.profile.arena_bound());
    let bounded;
    let o = if bound < o.ceiling {
        bounded = PlanOptions {
            ceiling: bound,
            ..o.clone()
        };
        &bounded
    } else {
        o
    };
    let pass = Pass {
        pool: Pool::new(o.pass_steps),
        climbs: RefCell::new(None),
    };
    let outcome = probed(before, o, &pass);
    o.emit(|| Event::StepsSpent {
        spent: o.pass_steps - pass.pool.left(),
        of: o.pass_steps,
    });
    Ok(match outcome? {
        Outcome::CannotFit(d) => Outcome::CannotFit(d.worded(&before.ledger, o)),
        planned => planned,
    })
}

/// What one [`plan`] call's passes share: the schedule steps its searches may still
/// simulate, and the leaves' order climbs ([`Climbs`]), kept for every probe.
struct Pass {
    pool: Pool,
    climbs: RefCell<Option<Climbs>>,
}

/// [`plan`] with the steps its searches may simulate.
fn probed(before: &Analysis, o: &PlanOptions, pass: &Pass) -> Result<Outcome, PlanError> {
    let started = Instant::now();
    let outcome = plan_once(before, o, pass)?;
    let mut longest = started.elapsed();
    let Outcome::CannotFit(mut d) = outcome else {
        return Ok(outcome);
    };
    if d.kind != DiagnosisKind::NoPlanFound {
        return Ok(Outcome::CannotFit(d));
    }
    // Bisect between the ceiling and the lowest total found: a plan that fits a ceiling in
    // between is reachable, and lowers the reported total to its own.
    // Once the time limit has passed a probe's searches stop before their first trial, and
    // what it would still compute (its variants, their block plans, recomputing every
    // candidate) says nothing the first pass did not: no probe is started then (GPT-2 at 132
    // layers, 70%: three probes took 12 s each after the limit).
    // Nor is one started that the time left may not pay for: twice the longest pass so far
    // (a probe plans as much as the first pass, at another ceiling, which can take longer).
    // It would end past the limit, with what it found cut short (GPT-2 at 96 layers: at 80%
    // passes of 12 s, the second probe ran from 24 s to 33.5 s; at 60% a first pass of 9 s,
    // then probes of up to 15 s).
    let (mut lo, mut hi) = (o.effective_ceiling(), d.lowest_reachable_total_bytes);
    let deadline = Deadline::new(o.started + o.time_limit);
    for _ in 0..o.refusal_probes {
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
        let planned = plan_once(before, &probe, pass)?;
        longest = longest.max(started.elapsed());
        match planned {
            Outcome::Rewritten(r) => hi = hi.min(r.after.ledger.total_bytes),
            Outcome::CannotFit(p) => {
                lo = mid;
                hi = hi.min(p.lowest_reachable_total_bytes);
                d.timed_out |= p.timed_out;
                d.steps_spent |= p.steps_spent;
            }
            Outcome::AlreadyFits => hi = hi.min(before.ledger.total_bytes),
        }
    }
    d.lowest_reachable_total_bytes = hi;
    Ok(Outcome::CannotFit(d))
}

/// Whether a refusal probe may start: the time limit has not passed, and the time left is at
/// least twice `longest`, the longest planning pass so far.
fn probe_pays(deadline: &Deadline, longest: Duration) -> bool {
    !deadline.passed() && deadline.left() >= longest.saturating_mul(2)
}

/// [`plan`] without the refusal probes: the variants built, block checkpointing's starts
/// simulated on them, the first candidate search, then the race ([`race`]).
fn plan_once(before: &Analysis, o: &PlanOptions, pass: &Pass) -> Result<Outcome, PlanError> {
    if o.costs.is_some() || before.ledger.total_bytes <= o.effective_ceiling() {
        return search_graph(before, o, None, &pass.pool);
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
    let Some(first) = variants.first(before, blocks.fits(o), o, &pass.pool)? else {
        return Ok(Outcome::AlreadyFits);
    };
    // A plan adding under a thousandth of a step is kept: no variant can save more than that.
    let mut tried = Tried::default();
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
        // The refusal names the given graph's dominant line, the ledger the user reads beside
        // it (a variant's lowest total may come from a graph whose ledger differs); a block
        // plan's total is a total a rewrite reaches too.
        (None, Some(d)) => Outcome::CannotFit(Diagnosis {
            dominant_ledger_line: before.ledger.dominant().to_string(),
            lowest_reachable_total_bytes: blocks
                .lowest()
                .map_or(d.lowest_reachable_total_bytes, |b| {
                    b.min(d.lowest_reachable_total_bytes)
                }),
            ..d
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

    /// A plan on a small text graph sends its trace to the sink, not to stderr, in the order
    /// the planner works: the leaves' order climbed, block checkpointing's starts, the first
    /// search's ILP round with what its run holds at the peak, the other variants outclassed
    /// by the plan in hand, and the steps the pass spent, last. Each event prints as one line
    /// (a peak as several).
    #[test]
    fn a_plan_emits_typed_trace_events() {
        let g = ckpt_ir::parse_graph(MLP2).unwrap();
        let before = analyse(g, &AnalyseOptions::default()).unwrap();
        let events = Arc::new(Mutex::new(Vec::<Event>::new()));
        let sink = Arc::clone(&events);
        let o = PlanOptions {
            threads: 1,
            trace: Some(Trace::new(move |e| sink.lock().unwrap().push(e.clone()))),
            ..PlanOptions::new(before.ledger.total_bytes * 80 / 100, Default::default())
        };
        let planned = plan(&before, &o).unwrap();
        assert!(matches!(planned, Outcome::Rewritten(_)));
        let events = events.lock().unwrap();
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
            Some("plan: the searches simulated 0 of 8000000 schedule steps")
        );
        for (e, line) in events.iter().zip(&lines) {
            assert!(
                matches!(e, Event::PeakHeld(_)) || !line.contains('\n'),
                "{line}"
            );
        }
    }

    /// The kind of an event, for the test above.
    fn kind(e: &Event) -> &'static str {
        match e {
            Event::LeafMoved { .. } => "leaf moved",
            Event::LeafTrials { .. } => "leaf trials",
            Event::LeafOrderSearched { .. } => "leaf order searched",
            Event::BlockStartsSimulated { .. } => "block starts",
            Event::RoundSimulated { .. } => "round simulated",
            Event::PeakHeld(_) => "peak held",
            Event::VariantPlanned { .. } => "variant planned",
            Event::VariantSearched { .. } => "variant searched",
            Event::Outclassed { .. } => "outclassed",
            Event::StepsSpent { .. } => "steps spent",
            _ => "other",
        }
    }
}
