//! A refusal planned again ([`again`]): the plan at the lowest total one pass reached is made
//! real, and its output is planned at the ceiling as a graph of its own.
//!
//! One pass plans the given graph's values only. Its output has more: the values its clones
//! read are candidates in turn (nested recompute), and the zero-FLOP variants of the output
//! guard the clones' reshape targets and reorder their leaves, which moves what the arena
//! places where. So a second pass reaches totals the first does not (the 8-layer Llama:
//! 376.73 MiB one pass, 351.67 MiB on a plan's output, BENCHMARKS.md).
//!
//! Invariants: the plan returned is against the given graph ([`chain`]): its patch is the
//! first plan's followed by the second's, its added FLOPs and clones both plans', and its
//! first plan is kept ([`Rewritten::earlier`]) so the receipt lists both plans' recomputes.
//! It runs where [`PlanOptions::plan_again`] is on, no measured costs are given (they belong
//! to the given graph's nodes), and the time left is at least the time spent so far (its two
//! passes have none of the refusal probes the first had); the plan depends on the input and
//! the options only, as each pass does, the clock being a safety stop.

use std::time::Duration;

use crate::analysis::Analysis;
use crate::options::PlanOptions;
use crate::outcome::{Diagnosis, DiagnosisKind, Outcome, Rewritten};
use crate::trace::Event;
use crate::variants::fits_as_recorded;
use crate::PlanError;

/// `d`, a refusal of `before` at `o.ceiling` that took `took`, planned again where
/// [`PlanOptions::plan_again`] is on: the plan at `d`'s lowest total, then that plan's output
/// at the ceiling. A plan found is returned against the given graph ([`chain`]); else the
/// refusal, lowered to the second pass's lowest total where that is lower.
pub(crate) fn again(
    before: &Analysis,
    mut d: Diagnosis,
    o: &PlanOptions,
    took: Duration,
) -> Result<Outcome, PlanError> {
    if !o.plan_again || o.costs.is_some() || d.kind != DiagnosisKind::NoPlanFound {
        return Ok(Outcome::CannotFit(d));
    }
    let deadline = o.deadline();
    if deadline.passed() || deadline.left() < took {
        d.timed_out = true;
        return Ok(Outcome::CannotFit(d));
    }
    let inner = PlanOptions {
        plan_again: false,
        refusal_probes: 0,
        ..o.clone()
    };
    // The first plan is planned and recorded at the lowest total: its output is not written,
    // only planned again under the ceiling's record.
    let at_lowest = PlanOptions {
        ceiling: d.lowest_reachable_total_bytes,
        recorded_ceiling: None,
        reserve_pct: 0.0,
        ..inner.clone()
    };
    let first = match crate::plan(before, &at_lowest)? {
        Outcome::Rewritten(r) => r,
        // The search is not monotone in the ceiling: the lowest total is not always found
        // again at its own ceiling.
        _ => return Ok(Outcome::CannotFit(d)),
    };
    o.emit(|| Event::PlannedAgain {
        first_bytes: first.after.ledger.total_bytes,
        first_added: first.counts.added_flops,
    });
    Ok(match crate::plan(&first.after, &inner)? {
        Outcome::Rewritten(r) => Outcome::Rewritten(chain(first, r)),
        Outcome::AlreadyFits if fits_as_recorded(&first.after, o) => {
            Outcome::Rewritten(recorded(first, o)?)
        }
        Outcome::AlreadyFits => Outcome::CannotFit(d),
        Outcome::CannotFit(second) => {
            d.timed_out |= second.timed_out;
            d.steps_spent |= second.steps_spent;
            if second.lowest_reachable_total_bytes < d.lowest_reachable_total_bytes {
                d = d.lowest_at(
                    second.lowest_reachable_total_bytes,
                    &second.dominant_ledger_line,
                );
            }
            Outcome::CannotFit(d)
        }
    })
}

/// `second`, a plan of `first`'s output, against the graph `first` planned: its patch is
/// `first`'s followed by its own, its added FLOPs, clones and moves both plans', and `first`
/// is kept as its [`Rewritten::earlier`]. Its candidates index `first`'s output where
/// `second` planned no variant of it.
pub(crate) fn chain(first: Box<Rewritten>, mut second: Box<Rewritten>) -> Box<Rewritten> {
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
