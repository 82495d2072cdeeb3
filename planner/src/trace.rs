//! The planner's trace: typed [`Event`]s, sent to the [`Trace`] sink of the options
//! ([`crate::PlanOptions::trace`], [`crate::SearchOptions::trace`]) as the planner runs.
//!
//! Invariants: the planner does no I/O of its own; an event is made only where a sink is
//! installed (events that cost a simulation, [`PeakHeld`], included), and sending one never
//! changes a plan. Each event's `Display` is its line (or lines) of the debug trace the CLI
//! prints under `CKPT_OPT_DEBUG`. Events may come from several threads at once.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ckpt_passes::recompute::Granularity;
use ckpt_solver::{Fallback, Status};

use crate::options::OUTCLASSED_FACTOR;

/// Where trace events go: a function called with each event, from any thread.
#[derive(Clone)]
pub struct Trace(Arc<dyn Fn(&Event) + Send + Sync>);

impl Trace {
    /// A sink that calls `f` with each event.
    pub fn new(f: impl Fn(&Event) + Send + Sync + 'static) -> Trace {
        Trace(Arc::new(f))
    }

    /// Send `event` to the sink.
    pub fn emit(&self, event: &Event) {
        (self.0)(event)
    }
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Trace(..)")
    }
}

/// One thing the planner did, with its numbers. `at` is the time since the options'
/// `started`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// [`crate::plan`] ended: the schedule steps its searches simulated, of the pass's budget.
    StepsSpent { spent: usize, of: usize },
    /// Block checkpointing's starts were simulated on every base.
    BlockStartsSimulated { at: Duration },
    /// The block plan's cut, run beside a variant's search, was taken into account.
    BlockCutSettled { at: Duration },
    /// A rung of the ladder below the ceiling was planned: its effective ceiling, the plan's
    /// added cost (FLOPs, or the costs' unit), and whether the plan was kept (cheaper than the
    /// plan in hand and run in the arena the ceiling records).
    RungPlanned {
        ceiling: u64,
        added: Option<u64>,
        kept: bool,
        at: Duration,
    },
    /// A zero-FLOP variant's candidate search starts.
    VariantSearched { variant: VariantKind },
    /// A zero-FLOP variant was planned.
    VariantPlanned { result: VariantResult, at: Duration },
    /// The leaves' order climbs have simulated `trials` trials so far.
    LeafTrials { trials: usize },
    /// A refusal or a dear plan is planned again ([`crate::again`]): a first plan was made real at
    /// `first_bytes`, adding `first_added` FLOPs, and its output is planned at the ceiling.
    PlannedAgain { first_bytes: u64, first_added: u64 },
    /// `folds` copies were folded away (transposed operands into their readers, scattered
    /// slices into Pads), and that graph is planned first, then the given one: the device
    /// total before and after.
    Folded {
        folds: usize,
        total_bytes: u64,
        folded_bytes: u64,
    },
    /// The loss head was written in chunks of rows ([`crate::head::with_head_chunked`]): how many,
    /// and the device total before and after.
    LossHeadChunked {
        chunks: u64,
        total_bytes: u64,
        chunked_bytes: u64,
    },
    /// A leaf order searched for the arena was kept: the base's arena, the arena the climb
    /// found, and the arena of the graph written in that order, analysed afresh.
    LeafOrderSearched {
        arena_bytes: u64,
        climbed_bytes: u64,
        replayed_bytes: u64,
    },
    /// A leaf climb kept a move: `leaf` to `place` of `of`, needing `arena_bytes`.
    LeafMoved {
        leaf: String,
        place: usize,
        of: usize,
        arena_bytes: u64,
        trial: usize,
    },
    /// An ILP round proved no plan of the model costs at most `cutoff`.
    Outclassed {
        round: usize,
        cutoff: u64,
        at: Duration,
    },
    /// An ILP round's plan, its cost re-evaluated, is over `cutoff`.
    OutclassedCost {
        round: usize,
        cost: u64,
        cutoff: u64,
        at: Duration,
    },
    /// An ILP round ended with a plan of no proven quality.
    RoundUnproven {
        round: usize,
        status: Status,
        fallback: Option<Fallback>,
        cost: u64,
        bound: f64,
        wall: Duration,
        at: Duration,
        beat: Option<u64>,
    },
    /// An ILP round found no plan.
    RoundNoPlan {
        round: usize,
        error: String,
        at: Duration,
    },
    /// An ILP round's plan, simulated.
    RoundSimulated {
        round: usize,
        cost: u64,
        model_peak_bytes: u64,
        simulated_bytes: u64,
        status: Status,
        wall: Duration,
        at: Duration,
    },
    /// An ILP round simulated no lower than an earlier one.
    RoundNoLower { round: usize },
    /// Where a recomputed candidate's buffer was really released in a round's run.
    Released {
        candidate: usize,
        label: String,
        bytes: u64,
        cost: u64,
        free_from: usize,
        needed_at: usize,
        released_at: Option<usize>,
    },
    /// An ILP round learnt nothing new.
    NothingLearnt { round: usize },
    /// A tightened-budget solve, simulated.
    Tightened {
        step: usize,
        budget: u64,
        cost: u64,
        simulated_bytes: u64,
        at: Duration,
    },
    /// The ILP at `factor` of the budget, solved as a climb's start: its status, fallback
    /// and time, or its error.
    TighterStart {
        factor: f64,
        solved: Result<(Status, Option<Fallback>, Duration), String>,
        at: Duration,
    },
    /// A climb's move found a flip that fits.
    FlipFits { candidate: usize, cost: u64 },
    /// A climb kept a flip.
    Flip {
        candidate: usize,
        total_bytes: u64,
        peak_step: usize,
    },
    /// The search found a plan that fits (before the cut).
    SearchFits {
        at: Duration,
        trials: usize,
        cost: u64,
    },
    /// The cut's drops are done.
    DropsDone {
        at: Duration,
        trials: usize,
        cost: u64,
    },
    /// The cut's swaps are done.
    SwapsDone {
        at: Duration,
        trials: usize,
        cost: u64,
    },
    /// A block plan with its cheap extras rebuilt too, simulated.
    BlockExtras {
        base: usize,
        granularity: Granularity,
        extras: usize,
        from_bytes: u64,
        to_bytes: u64,
    },
    /// Block checkpointing on a base at a granularity, simulated.
    BlockSeed {
        base: usize,
        granularity: Granularity,
        blocks: usize,
        total_bytes: u64,
    },
    /// A block plan cut.
    BlockCut {
        base: usize,
        granularity: Granularity,
        flops: u64,
    },
    /// A block plan's cut judged whole blocks.
    BlocksJudged {
        judged: usize,
        blocks: usize,
        rebuilt: usize,
        at: Duration,
    },
    /// A block plan's cut judged single recomputes.
    SinglesJudged {
        judged: usize,
        singles: usize,
        left: usize,
        at: Duration,
    },
    /// A block plan's cut kept swaps.
    SwapsKept { kept: usize, at: Duration },
    /// A trial's recompute patch did not apply: the patch as text.
    PatchRefused { patch: String },
    /// What a run holds at its peak.
    PeakHeld(PeakHeld),
}

/// The zero-FLOP variants whose candidate searches [`Event::VariantSearched`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariantKind {
    LeavesSearched,
    LoweredTerms,
    Guarded,
    GuardedLowered,
    OtherGuards,
}

/// How a variant's planning ended ([`Event::VariantPlanned`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariantResult {
    NoPlan,
    FitsAsItIs,
    /// A plan adding these FLOPs.
    Added(u64),
}

/// What a run holds at its in-use peak: the idle buffers and the values in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeakHeld {
    pub peak_step: usize,
    pub steps: usize,
    /// The node run at the peak.
    pub node: String,
    /// Bytes held idle at the peak, and in how many buffers.
    pub idle_bytes: u64,
    pub idle_buffers: usize,
    /// The largest idle buffers (at most 12).
    pub idle: Vec<IdleBuffer>,
    /// Bytes in use at the peak, in how many values, and how many of them graph outputs.
    pub live_bytes: u64,
    pub live_values: usize,
    pub output_bytes: u64,
    /// The largest values in use that are not graph outputs (at most 16), with their bytes.
    pub largest: Vec<(u64, Span)>,
}

/// An idle buffer of [`PeakHeld`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleBuffer {
    pub bytes: u64,
    pub alloc_step: usize,
    pub free_after: Option<usize>,
    pub values: usize,
    /// Its last values (at most 6), the last first.
    pub last: Vec<Span>,
}

/// A value and the steps it is made and last read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub tensor: String,
    pub made: usize,
    pub last: usize,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}..{}]", self.tensor, self.made, self.last)
    }
}

impl fmt::Display for VariantKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VariantKind::LeavesSearched => "leaves' order searched",
            VariantKind::LoweredTerms => "lowered terms",
            VariantKind::Guarded => "guarded",
            VariantKind::GuardedLowered => "guarded, lowered terms",
            VariantKind::OtherGuards => "the other guard set",
        })
    }
}

impl fmt::Display for VariantResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VariantResult::NoPlan => f.write_str("no plan"),
            VariantResult::FitsAsItIs => f.write_str("fits as it is"),
            VariantResult::Added(flops) => write!(f, "+{flops} FLOPs"),
        }
    }
}

impl fmt::Display for PeakHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "  peak step {} of {} ({}), {} idle in {} buffers:",
            self.peak_step, self.steps, self.node, self.idle_bytes, self.idle_buffers
        )?;
        for b in &self.idle {
            let last: Vec<String> = b.last.iter().map(Span::to_string).collect();
            write!(
                f,
                "\n    {} B, alloc {} free {:?}, {} values, last: {}",
                b.bytes,
                b.alloc_step,
                b.free_after,
                b.values,
                last.join(", ")
            )?;
        }
        write!(
            f,
            "\n  live at the peak: {} B in {} values, {} B of them graph outputs; largest:",
            self.live_bytes, self.live_values, self.output_bytes
        )?;
        for (bytes, span) in &self.largest {
            write!(f, "\n    {bytes} B {span}")?;
        }
        Ok(())
    }
}

/// Seconds, as the trace prints a time.
struct Secs(Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}", self.0.as_secs_f64())
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::StepsSpent { spent, of } => write!(
                f,
                "plan: the searches simulated {spent} of {of} schedule steps"
            ),
            Event::BlockStartsSimulated { at } => {
                write!(f, "blocks: starts simulated (at {} s)", Secs(*at))
            }
            Event::BlockCutSettled { at } => {
                write!(f, "blocks: cut taken into account (at {} s)", Secs(*at))
            }
            Event::VariantSearched { variant } => write!(f, "variant: {variant}"),
            Event::RungPlanned {
                ceiling,
                added,
                kept,
                at,
            } => {
                write!(f, "ladder: rung {ceiling} B: ")?;
                match added {
                    Some(a) => write!(f, "+{a}")?,
                    None => f.write_str("no plan")?,
                }
                let kept = if *kept { ", kept" } else { "" };
                write!(f, "{kept} (at {} s)", Secs(*at))
            }
            Event::VariantPlanned { result, at } => {
                write!(f, "variant planned: {result} (at {} s)", Secs(*at))
            }
            Event::LeafTrials { trials } => write!(f, "leaf order: {trials} trials so far"),
            Event::PlannedAgain {
                first_bytes,
                first_added,
            } => write!(
                f,
                "planned again: a first plan ({first_bytes} B, +{first_added} FLOPs) is planned at the ceiling"
            ),
            Event::Folded {
                folds,
                total_bytes,
                folded_bytes,
            } => write!(
                f,
                "{folds} copies folded away: total {total_bytes} -> {folded_bytes}"
            ),
            Event::LossHeadChunked {
                chunks,
                total_bytes,
                chunked_bytes,
            } => write!(
                f,
                "loss head in {chunks} chunks of rows: total {total_bytes} -> {chunked_bytes}"
            ),
            Event::LeafOrderSearched {
                arena_bytes,
                climbed_bytes,
                replayed_bytes,
            } => write!(
                f,
                "leaf order searched: arena {arena_bytes} -> {climbed_bytes} (replayed {replayed_bytes})"
            ),
            Event::LeafMoved {
                leaf,
                place,
                of,
                arena_bytes,
                trial,
            } => write!(
                f,
                "leaf order: {leaf} to place {place} of {of}: arena {arena_bytes} (trial {trial})"
            ),
            Event::BlockExtras {
                base,
                granularity,
                extras,
                from_bytes,
                to_bytes,
            } => write!(
                f,
                "blocks: base {base}, {granularity:?}, {extras} cheap extras: {from_bytes} -> {to_bytes}"
            ),
            Event::BlockSeed {
                base,
                granularity,
                blocks,
                total_bytes,
            } => write!(
                f,
                "blocks: base {base}, {granularity:?}, {blocks} blocks: simulated total {total_bytes}"
            ),
            Event::BlockCut {
                base,
                granularity,
                flops,
            } => write!(
                f,
                "blocks: base {base}, {granularity:?} cut to {flops} FLOPs"
            ),
            Event::BlocksJudged {
                judged,
                blocks,
                rebuilt,
                at,
            } => write!(
                f,
                "blocks: {judged} of {blocks} blocks judged, {rebuilt} still rebuilt, at {} s",
                Secs(*at)
            ),
            Event::SinglesJudged {
                judged,
                singles,
                left,
                at,
            } => write!(
                f,
                "blocks: {judged} of {singles} single recomputes judged, {left} left, at {} s",
                Secs(*at)
            ),
            Event::SwapsKept { kept, at } => {
                write!(f, "blocks: {kept} swaps kept, at {} s", Secs(*at))
            }
            Event::PatchRefused { patch } => f.write_str(patch),
            Event::PeakHeld(held) => held.fmt(f),
            _ => self.fmt_search(f),
        }
    }
}

impl Event {
    /// The lines of the search's events: the ILP rounds, the climbs and the cut.
    fn fmt_search(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Outclassed { round, cutoff, at } => write!(
                f,
                "ilp round {round}: no plan of the model costs at most {cutoff} ({OUTCLASSED_FACTOR} x the plan in hand): outclassed (at {} s)",
                Secs(*at)
            ),
            Event::OutclassedCost {
                round,
                cost,
                cutoff,
                at,
            } => write!(
                f,
                "ilp round {round}: cost {cost} is over {OUTCLASSED_FACTOR} x the plan in hand ({cutoff}): outclassed (at {} s)",
                Secs(*at)
            ),
            Event::RoundUnproven {
                round,
                status,
                fallback,
                cost,
                bound,
                wall,
                at,
                beat,
            } => write!(
                f,
                "ilp round {round}: {status:?} {fallback:?}, cost {cost} bound {bound:.0} in {} s (at {} s; plan in hand {beat:?})",
                Secs(*wall),
                Secs(*at)
            ),
            Event::RoundNoPlan { round, error, at } => {
                write!(f, "ilp round {round}: {error} (at {} s)", Secs(*at))
            }
            Event::RoundSimulated {
                round,
                cost,
                model_peak_bytes,
                simulated_bytes,
                status,
                wall,
                at,
            } => write!(
                f,
                "ilp round {round}: cost {cost} corrected model peak {model_peak_bytes} simulated {simulated_bytes} ({status:?} {} s, at {} s)",
                Secs(*wall),
                Secs(*at)
            ),
            Event::RoundNoLower { round } => {
                write!(f, "ilp round {round}: no lower than an earlier round")
            }
            Event::Released {
                candidate,
                label,
                bytes,
                cost,
                free_from,
                needed_at,
                released_at,
            } => write!(
                f,
                "  cand {candidate} {label} {bytes} B cost {cost} window {free_from}..{needed_at} released at {released_at:?}"
            ),
            Event::NothingLearnt { round } => write!(f, "ilp round {round}: nothing new learnt"),
            Event::Tightened {
                step,
                budget,
                cost,
                simulated_bytes,
                at,
            } => write!(
                f,
                "ilp tightened {step}: budget {budget} cost {cost} simulated {simulated_bytes} (at {} s)",
                Secs(*at)
            ),
            Event::TighterStart { factor, solved, at } => {
                write!(f, "search: start from the ILP at {factor} of the budget: ")?;
                match solved {
                    Ok((status, fallback, wall)) => {
                        write!(f, "{status:?} {fallback:?} in {} s", Secs(*wall))?
                    }
                    Err(e) => f.write_str(e)?,
                }
                write!(f, " (at {} s)", Secs(*at))
            }
            Event::FlipFits { candidate, cost } => write!(
                f,
                "search: flip candidate {candidate} -> fits at {cost} FLOPs"
            ),
            Event::Flip {
                candidate,
                total_bytes,
                peak_step,
            } => write!(
                f,
                "search: flip candidate {candidate} -> simulated total {total_bytes}, peak at step {peak_step}"
            ),
            Event::SearchFits { at, trials, cost } => write!(
                f,
                "search: fits at {} s, {trials} trials, cost {cost}",
                Secs(*at)
            ),
            Event::DropsDone { at, trials, cost } => write!(
                f,
                "cut: drops done at {} s, {trials} trials, cost {cost}",
                Secs(*at)
            ),
            Event::SwapsDone { at, trials, cost } => write!(
                f,
                "cut: swaps done at {} s, {trials} trials, cost {cost}",
                Secs(*at)
            ),
            // The other events print in `Event::fmt`, which never hands them here.
            other => write!(f, "{other:?}"),
        }
    }
}
