//! A plan made again from its own output ([`again`], [`dearer_again`]): plans one pass
//! makes at ceilings at or above the ceiling are made real, and their outputs planned at the
//! ceiling as graphs of their own.
//!
//! One pass plans the given graph's values only. Its output has more: the values its clones
//! read are candidates in turn (nested recompute), and the zero-FLOP variants of the output
//! guard the clones' reshape targets and reorder their leaves, which moves what the arena
//! places where. So a second pass reaches totals the first does not (the 8-layer Llama:
//! 376.73 MiB one pass, 351.67 MiB on a plan's output, BENCHMARKS.md), and from a looser
//! first plan it can reach the ceiling for less than one pass adds (the Llama's 55% plan
//! planned again at 50%: +16.44% of a step, one pass +21.91%).
//!
//! Invariants: the plan returned is against the given graph ([`chain`]): its patch is the
//! first plan's followed by the second's, its added FLOPs and clones both plans', and its
//! first plan is kept ([`Rewritten::earlier`]) so the receipt lists both plans' recomputes.
//! It runs where [`PlanOptions::plan_again`] is on, no measured costs are given (they belong
//! to the given graph's nodes), and each start begins only while the time left is at least
//! the longest of the time spent before it and any start so far (its passes have none of the
//! refusal probes the first had); the plan depends on the input and the options only, as each
//! pass does, the clock being a safety stop that the refusal or plan then records.

use std::time::{Duration, Instant};

use crate::analysis::{step_flops, Analysis};
use crate::options::PlanOptions;
use crate::outcome::{Diagnosis, DiagnosisKind, Outcome, Rewritten};
use crate::plan::whole_percents;
use crate::trace::Event;
use crate::variants::fits_as_recorded;
use crate::PlanError;

/// First plans tried: the plan at the lowest total found, then at the next whole percents of
/// the given graph's total above it. A cheaper first plan can leave the second pass more to
/// recompute (the 8-layer Llama's 50% plan, 382.42 MiB, planned again by hand reached
/// 351.67 MiB, under one pass's 376.73 MiB floor; BENCHMARKS.md).
pub(crate) const STARTS: usize = 3;

/// A plan one pass finds is planned again where it adds more than 1/`DEAR_SHARE` of a
/// step's FLOPs: below that a second pass has little to win, and each start costs two passes.
pub(crate) const DEAR_SHARE: u64 = 20;

/// The whole percents of the given graph's total above the ceiling that a plan found is
/// planned again from: the 2nd, 4th and 6th above it ([`fit_starts`]).
const FIT_STARTS: [usize; STARTS] = [2, 4, 6];

/// `d`, a refusal of `before` at `o.ceiling` that took `took`, planned again where
/// [`PlanOptions::plan_again`] is on: for each of the first plans ([`starts`]), that plan's
/// output at the ceiling. The plan found adding the fewest FLOPs (the lower total, then the
/// earlier start on a tie) is returned against the given graph ([`chain`]); else the refusal,
/// lowered to the second passes' lowest total where that is lower. A start begins only while
/// the time left is at least the longest of `took` and the starts so far.
pub(crate) fn again(
    before: &Analysis,
    mut d: Diagnosis,
    o: &PlanOptions,
    took: Duration,
) -> Result<Outcome, PlanError> {
    if !o.plan_again || o.costs.is_some() || d.kind != DiagnosisKind::NoPlanFound {
        return Ok(Outcome::CannotFit(d));
    }
    let starts = starts(before.ledger.total_bytes, d.lowest_reachable_total_bytes);
    let (found, clock_hit) = cheapest(before, &starts, o, took, |second| {
        crate::plan::lower_to(&mut d, second)
    })?;
    Ok(match found {
        Some(mut r) => {
            r.time_limit_hit |= clock_hit;
            Outcome::Rewritten(r)
        }
        None => {
            d.timed_out |= clock_hit;
            Outcome::CannotFit(d)
        }
    })
}

/// `r`, the plan one pass found for `before` at `o.ceiling` in `took`, planned again where
/// [`PlanOptions::plan_again`] is on and it adds more than 1/[`DEAR_SHARE`] of a step: for
/// each of the first plans at looser ceilings ([`fit_starts`]), that plan's output at the
/// ceiling. The plan adding the fewest FLOPs is returned, `r` where none adds less.
pub(crate) fn dearer_again(
    before: &Analysis,
    r: Box<Rewritten>,
    o: &PlanOptions,
    took: Duration,
) -> Result<Box<Rewritten>, PlanError> {
    if !o.plan_again
        || o.costs.is_some()
        || r.counts.added_flops <= step_flops(before, &o.analysis.bindings) / DEAR_SHARE
    {
        return Ok(r);
    }
    let starts = fit_starts(before.ledger.total_bytes, o.effective_ceiling());
    let (found, clock_hit) = cheapest(before, &starts, o, took, |_| {})?;
    let mut kept = match found {
        Some(again) if again.counts.added_flops < r.counts.added_flops => again,
        _ => r,
    };
    kept.time_limit_hit |= clock_hit;
    Ok(kept)
}

/// The cheapest plan (the fewest added FLOPs, then the lower total, then the earlier start)
/// of `before`'s plans at `starts` planned again at the ceiling ([`planned_from`]), each
/// second pass's refusal given to `refused`; and whether the clock kept a start from
/// beginning. A start begins only while the time left is at least the longest of `took` and
/// the starts so far.
fn cheapest(
    before: &Analysis,
    starts: &[u64],
    o: &PlanOptions,
    took: Duration,
    mut refused: impl FnMut(Diagnosis),
) -> Result<(Option<Box<Rewritten>>, bool), PlanError> {
    // The loss head is chunked, where at all, on the plan `crate::plan` keeps last: never
    // inside a chain of plans.
    let inner = PlanOptions {
        plan_again: false,
        refusal_probes: 0,
        chunk_loss_head: false,
        ..o.clone()
    };
    let deadline = o.deadline();
    let mut longest = took;
    let mut found: Option<Box<Rewritten>> = None;
    for &start in starts {
        if deadline.passed() || deadline.left() < longest {
            return Ok((found, true));
        }
        let began = Instant::now();
        let planned = planned_from(before, start, o, &inner)?;
        longest = longest.max(began.elapsed());
        match planned {
            Some(Ok(r)) => {
                let key = |r: &Rewritten| (r.counts.added_flops, r.after.ledger.total_bytes);
                if found.as_ref().is_none_or(|f| key(&r) < key(f)) {
                    found = Some(r);
                }
            }
            Some(Err(second)) => refused(second),
            None => {}
        }
    }
    Ok((found, false))
}

/// The ceilings first plans are made at: `lowest`, the lowest total one pass found, then the
/// whole percents of `total` (the given graph's) above it, ascending, [`STARTS`] in all.
fn starts(total: u64, lowest: u64) -> Vec<u64> {
    let above = whole_percents(total).filter(|&c| c > lowest);
    let mut starts: Vec<u64> = std::iter::once(lowest).chain(above).collect();
    starts.dedup();
    starts.truncate(STARTS);
    starts
}

/// The ceilings a plan found at `ceiling` is planned again from: the [`FIT_STARTS`]th whole
/// percents of `total` (the given graph's) above it, ascending, those under `total`.
fn fit_starts(total: u64, ceiling: u64) -> Vec<u64> {
    let mut above: Vec<u64> = whole_percents(total).filter(|&c| c > ceiling).collect();
    above.dedup();
    FIT_STARTS
        .iter()
        .filter_map(|&k| above.get(k - 1).copied())
        .collect()
}

/// The plan of `before` at `start` (planned and recorded there: its output is not written),
/// then its output planned at the ceiling under `inner`: the plan against the given graph, or
/// the second pass's refusal; `None` where `start` has no plan (the search is not monotone in
/// the ceiling) or the first plan's output fits as it is without running in the arena the
/// ceiling records.
fn planned_from(
    before: &Analysis,
    start: u64,
    o: &PlanOptions,
    inner: &PlanOptions,
) -> Result<Option<Result<Box<Rewritten>, Diagnosis>>, PlanError> {
    let at_start = PlanOptions {
        ceiling: start,
        recorded_ceiling: None,
        reserve_pct: 0.0,
        ..inner.clone()
    };
    let Outcome::Rewritten(mut first) = crate::plan(before, &at_start)? else {
        return Ok(None);
    };
    o.emit(|| Event::PlannedAgain {
        first_bytes: first.after.ledger.total_bytes,
        first_added: first.counts.added_flops,
    });
    // Planned as written and read back: a plan of the file is the plan two runs make by hand,
    // and the graph as rewritten plans differently (on the 8-layer Llama's 50% plan, read
    // back: 560 candidates and a fit at 370 MiB; as rewritten: no fit).
    let written = read_back(&first.after.graph)?;
    let Ok(output) = crate::analysis::analyse(written, &inner.analysis) else {
        return Ok(None);
    };
    first.after = output;
    Ok(match crate::plan(&first.after, inner)? {
        Outcome::Rewritten(r) => Some(Ok(chain(first, start, r))),
        Outcome::AlreadyFits if fits_as_recorded(&first.after, o) => Some(Ok(recorded(first, o)?)),
        Outcome::AlreadyFits => None,
        Outcome::CannotFit(second) => Some(Err(second)),
    })
}

/// `g` exported and imported again, as the file written from it reads.
fn read_back(g: &ckpt_ir::Graph) -> Result<ckpt_ir::Graph, PlanError> {
    let path = std::path::Path::new("<the first plan's output>");
    ckpt_ir::import_model(ckpt_ir::export(g), path, g.dir()).map_err(PlanError::ReadBack)
}

/// `second`, a plan of `first`'s output (`first` planned at the ceiling `start`), against the
/// graph `first` planned: its patch is `first`'s followed by its own, its added FLOPs, clones
/// and moves both plans', and `first` is kept as its [`Rewritten::earlier`]. Its candidates
/// index `first`'s output where `second` planned no variant of it.
pub(crate) fn chain(
    first: Box<Rewritten>,
    start: u64,
    mut second: Box<Rewritten>,
) -> Box<Rewritten> {
    second.patch_text = format!("{}\n{}", first.patch_text, second.patch_text);
    let (a, b) = (&mut second.counts, &first.counts);
    a.added_flops = a.added_flops.saturating_add(b.added_flops);
    a.cloned += b.cloned;
    a.moved += b.moved;
    second.time_limit_hit |= first.time_limit_hit;
    if second.planned_graph.is_none() {
        second.planned_graph = Some(first.after.graph.clone());
    }
    second.earlier = Some(first);
    second.earlier_ceiling_bytes = Some(start);
    second
}

/// `first`, a plan made at a higher ceiling that fits this one as it is, recording this
/// ceiling's profile and deployment ([`PlanOptions::recorded_metadata`]) in place of its own.
fn recorded(mut first: Box<Rewritten>, o: &PlanOptions) -> Result<Box<Rewritten>, PlanError> {
    let mut patch = ckpt_ir::Patch::new(format!("recorded for ceiling {}", o.recorded()));
    patch.metadata = o.recorded_metadata(&first.after.ledger);
    patch
        .apply(&mut first.after.graph)
        .map_err(PlanError::Patch)?;
    first.patch_text = format!("{}\n{patch}", first.patch_text);
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first plans start at the lowest total, then at the whole percents of the total above
    /// it, ascending, three in all; a lowest total on a whole percent is not tried twice.
    #[test]
    fn the_starts_are_the_lowest_then_the_whole_percents_above_it() {
        assert_eq!(starts(1000, 493), vec![493, 500, 510]);
        assert_eq!(starts(1000, 500), vec![500, 510, 520]);
        assert_eq!(starts(1000, 985), vec![985, 990]);
    }

    /// A plan found is planned again from the 2nd, 4th and 6th whole percents above the
    /// ceiling, those under the total.
    #[test]
    fn a_plan_found_is_planned_again_from_every_other_whole_percent_above_it() {
        assert_eq!(fit_starts(1000, 500), vec![520, 540, 560]);
        assert_eq!(fit_starts(1000, 493), vec![510, 530, 550]);
        assert_eq!(fit_starts(1000, 950), vec![970, 990]);
    }
}
