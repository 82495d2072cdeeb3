//! The zero-FLOP variant race: the given graph and the graphs zero-FLOP moves make of it
//! (its leaves in the order their inputs become ready, its leaves in an order searched for
//! the arena, its backward-only terms lowered, its constant reshape targets guarded, and
//! combinations), each verified and simulated under the profile, planned in turn, and the
//! block plan's cut beside them ([`race`]).
//!
//! Invariants: the plan that adds the fewest FLOPs wins (the earlier on a tie); a variant
//! that fits as it is, is a plan that recomputes nothing and ends the race; a variant's plan
//! is reported against the graph as given, its patch the variant's followed by the
//! recompute; of the refusals, the one with the lowest reachable total is kept ([`Tried`]).
//! Every search is bounded by counts, so the winner does not depend on which thread ends
//! first.

use std::cell::RefCell;

use ckpt_passes::recompute::{candidates, problem};

use crate::analysis::{analyse, Analysis};
use crate::blocks::{BlockStart, CutResult};
use crate::leaves::Climbs;
use crate::options::{variant_trials, PlanOptions, Progress};
use crate::oracle::{plan_from_set, Oracle, Simulator};
use crate::outcome::{Diagnosis, Outcome, Rewritten, TiedGradients};
use crate::par::Pool;
use crate::search::search_graph;
use crate::trace::{Event, VariantKind, VariantResult};
use crate::PlanError;

mod folded;
pub(crate) use folded::folded;

/// The block plan is cut when the candidate search finds nothing adding at most
/// `BLOCK_CUT_SHARE` thousandths of a step (5%). No block cut measured went under 6.7% of a
/// step (GPT-2 at 48 layers: 6.73% at 80%, 10% at 70%, 15.5% at 60%; the Llama at 60%:
/// 12.83%; the example at 45%: 18.12%), and on 48 layers at 70% it judged ~700 single
/// recomputes to the 30 s limit to end at 10% beside the search's 1.64%.
const BLOCK_CUT_SHARE: u64 = 50;

/// A zero-FLOP variant of the given graph: its analysis, the patches that made it (as text,
/// against the given graph's numbering), and which moves it has.
pub(crate) struct Variant {
    analysis: Analysis,
    patch_text: String,
    lowered: bool,
    guarded: bool,
    /// The shared weights' gradients the variant folds ([`folded`]).
    tied: Option<TiedGradients>,
}

impl Variant {
    /// `r`, a plan of this variant, reported against the given graph: its patch is the
    /// variant's followed by the recompute, and it records the moves and the graph planned.
    fn report(&self, r: &mut Rewritten) {
        r.patch_text = format!("{}\n{}", self.patch_text, r.patch_text);
        r.lowered = self.lowered;
        r.guarded = self.guarded;
        r.planned_graph = Some(self.analysis.graph.clone());
    }
}

/// The zero-FLOP variants built before the searches: the leaves in readiness order, in an
/// order searched for the arena, and the reordered graph's two guard sets.
pub(crate) struct Variants {
    ordered: Option<Variant>,
    climbed: Option<Variant>,
    guarded: Option<Variant>,
    other_guards: Option<Variant>,
}

impl Variants {
    /// The variants of `before` built before the searches, or a variant that fits as it is
    /// (and runs in the arena the written model records), as a plan that recomputes
    /// nothing: no plan that recomputes anything beats it. The leaves in the order their
    /// inputs become ready, when that lowers the total, are the base every other variant
    /// builds on (it is the easier graph); the leaves' order searched for the arena (kept in
    /// `climbs` for the whole [`crate::plan`] call) is not.
    pub(crate) fn build(
        before: &Analysis,
        o: &PlanOptions,
        climbs: &RefCell<Option<Climbs>>,
    ) -> Result<Result<Variants, Box<Rewritten>>, PlanError> {
        let ordered = ordered_leaves(before, o)?;
        if let Some(v) = ordered
            .as_ref()
            .filter(|v| fits_as_recorded(&v.analysis, o))
        {
            return Ok(Err(as_is(v, o)?));
        }
        let climbed = climbed_leaves(before, ordered.as_ref(), o, climbs)?;
        if let Some(v) = climbed
            .as_ref()
            .filter(|v| fits_as_recorded(&v.analysis, o))
        {
            return Ok(Err(as_is(v, o)?));
        }
        let base = ordered.as_ref().map_or(before, |v| &v.analysis);
        // The base with its constant shapes guarded: ORT's planner then reuses none of the
        // buffers computed from them, so a rebuilt block's buffers go back to the arena
        // instead of being held for a later value of the same size.
        let mut guards = guarded(base, ordered.as_ref(), o)?.into_iter();
        let guarded = guards.next();
        let other_guards = guards.next();
        if let Some(v) = guarded
            .as_ref()
            .filter(|v| fits_as_recorded(&v.analysis, o))
        {
            return Ok(Err(as_is(v, o)?));
        }
        Ok(Ok(Variants {
            ordered,
            climbed,
            guarded,
            other_guards,
        }))
    }

    /// The graphs block checkpointing starts from: the base (the reordered graph, else
    /// `before`) and its guarded variants.
    pub(crate) fn bases<'a>(&'a self, before: &'a Analysis) -> Vec<&'a Analysis> {
        std::iter::once(self.base(before))
            .chain(self.guarded.as_ref().map(|g| &g.analysis))
            .chain(self.other_guards.as_ref().map(|g| &g.analysis))
            .collect()
    }

    fn base<'a>(&'a self, before: &'a Analysis) -> &'a Analysis {
        self.ordered.as_ref().map_or(before, |v| &v.analysis)
    }

    /// The first candidate search: of the reordered graph, else of `before`. `None`: `before`
    /// already fits. When a block plan fits (`blocks_fit`), it gets a variant's simulations
    /// ([`variant_trials`]): a deep ceiling it cannot meet must not take the time the block
    /// plan's cut needs. A count, so the plan does not depend on the clock. So does it with a
    /// plan in hand from a higher ceiling (`in_hand`, its added FLOPs), which it is asked to
    /// beat ([`crate::SearchOptions::beat`]).
    pub(crate) fn first(
        &self,
        before: &Analysis,
        blocks_fit: bool,
        in_hand: Option<u64>,
        o: &PlanOptions,
        pool: &Pool,
    ) -> Result<Option<Result<Box<Rewritten>, Diagnosis>>, PlanError> {
        let bounded;
        let first_o = if blocks_fit || in_hand.is_some() {
            bounded = PlanOptions {
                max_trials: o.max_trials.min(variant_trials(before.sim.schedule.len())),
                ..o.clone()
            };
            &bounded
        } else {
            o
        };
        Ok(Some(match self.ordered.as_ref() {
            Some(v) => plan_variant(v, first_o, in_hand, pool)?,
            None => match search_graph(before, first_o, in_hand, pool)? {
                Outcome::AlreadyFits => return Ok(None),
                Outcome::Rewritten(r) => Ok(r),
                Outcome::CannotFit(d) => Err(d),
            },
        }))
    }
}

/// What the planner has so far: the plan adding the fewest FLOPs (the earlier on a tie), and
/// the refusal with the lowest total.
#[derive(Default)]
pub(crate) struct Tried {
    found: Option<Box<Rewritten>>,
    /// The added FLOPs of a plan in hand from a higher ceiling's pass, which every search here
    /// is asked to beat.
    in_hand: Option<u64>,
    refused: Option<Diagnosis>,
    /// The clock stopped some variant's search: what is kept may not be what a faster
    /// machine keeps (a stopped variant might have found a cheaper plan).
    clock_hit: bool,
    /// The pass's steps ran out in some variant's search.
    steps_spent: bool,
}

impl Tried {
    /// Nothing tried yet, with the added FLOPs of a plan in hand from a higher ceiling's pass,
    /// if any.
    pub(crate) fn beating(in_hand: Option<u64>) -> Tried {
        Tried {
            in_hand,
            ..Tried::default()
        }
    }

    /// The added FLOPs of the cheapest plan in hand, which the next search is asked to beat
    /// ([`crate::SearchOptions::beat`]): the plan kept's, or the higher ceiling's, whichever
    /// is lower; `None` with neither.
    fn in_hand(&self) -> Option<u64> {
        let found = self.found.as_ref().map(|f| f.counts.added_flops);
        match (found, self.in_hand) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Keep `planned` if it is cheaper (or lower); whether it is a plan that adds nothing.
    pub(crate) fn consider(&mut self, planned: Result<Box<Rewritten>, Diagnosis>) -> bool {
        self.clock_hit |= match &planned {
            Ok(r) => r.time_limit_hit,
            Err(d) => d.timed_out,
        };
        self.steps_spent |= planned.as_ref().is_err_and(|d| d.steps_spent);
        match planned {
            Ok(r) => {
                let free = r.counts.added_flops == 0;
                if self
                    .found
                    .as_ref()
                    .is_none_or(|f| r.counts.added_flops < f.counts.added_flops)
                {
                    self.found = Some(r);
                }
                free
            }
            Err(d) => {
                self.refused = Some(match self.refused.take() {
                    Some(a) => lower(a, d),
                    None => d,
                });
                false
            }
        }
    }

    /// The plan and the refusal kept, each saying the time limit was hit where it stopped
    /// any variant's search.
    pub(crate) fn finish(mut self) -> (Option<Box<Rewritten>>, Option<Diagnosis>) {
        if let Some(r) = self.found.as_mut() {
            r.time_limit_hit |= self.clock_hit;
        }
        if let Some(d) = self.refused.as_mut() {
            d.timed_out |= self.clock_hit;
            d.steps_spent |= self.steps_spent;
        }
        (self.found, self.refused)
    }
}

/// Of two refusals, the one with the lower reachable total (the first on a tie).
fn lower(a: Diagnosis, b: Diagnosis) -> Diagnosis {
    if b.lowest_reachable_total_bytes < a.lowest_reachable_total_bytes {
        b
    } else {
        a
    }
}

/// The race after the first plan (kept in `tried`): block checkpointing's cut, where the
/// search found nothing adding under a twentieth of a step (`negligible` is a thousandth),
/// beside the other variants' searches ([`other_variants`]). `true`: the given graph already
/// fits.
///
/// The cut runs on a thread of its own beside the next variant's search, whose ILP rounds
/// leave a core idle (GPT-2 at 48 layers, 60%: 2.5 s of cut beside 2.7 s of CBC), and is
/// taken into account before that variant's plan, as if it had run first. That variant's
/// search is planned as one with a plan in hand ([`variant_trials`] simulations); only its
/// first ILP round's cutoff ([`crate::OUTCLASSED_FACTOR`] times the plan in hand) cannot know
/// the cut's plan. Both are bounded by counts, so the plan does not depend on which ends
/// first.
#[allow(clippy::too_many_arguments)]
pub(crate) fn race(
    before: &Analysis,
    v: &Variants,
    blocks: &BlockStart,
    bases: &[&Analysis],
    negligible: u64,
    o: &PlanOptions,
    tried: &mut Tried,
    pool: &Pool,
) -> Result<bool, PlanError> {
    let cheap = negligible.saturating_mul(BLOCK_CUT_SHARE);
    let run_cut = blocks.fits(o) && tried.in_hand().is_none_or(|flops| flops > cheap);
    let clock = o.deadline();
    std::thread::scope(|s| -> Result<bool, PlanError> {
        let mut cut = PendingCut {
            handle: run_cut.then(|| s.spawn(|| blocks.cut_best(bases, o, &clock))),
            variants: [
                v.ordered.as_ref(),
                v.guarded.as_ref(),
                v.other_guards.as_ref(),
            ],
            o,
        };
        let fits = other_variants(before, v, o, tried, &mut cut, pool)?;
        cut.settle(tried)?;
        Ok(fits)
    })
}

/// Block checkpointing's cut, running on its own thread ([`BlockStart::cut_best`]) until
/// [`PendingCut::settle`] takes its plan into a [`Tried`].
struct PendingCut<'s, 'a> {
    handle: Option<std::thread::ScopedJoinHandle<'s, CutResult>>,
    /// The variants a cut's base index names (0: the base, 1 and 2: its guard sets).
    variants: [Option<&'a Variant>; 3],
    o: &'a PlanOptions,
}

impl PendingCut<'_, '_> {
    /// Whether the cut is still to be taken into account (it will bring a plan in hand).
    fn pending(&self) -> bool {
        self.handle.is_some()
    }

    /// Wait for the cut, if it is still running, and consider its plan (reported against the
    /// given graph).
    fn settle(&mut self, tried: &mut Tried) -> Result<(), PlanError> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        let cut = handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        self.o.emit(|| Event::BlockCutSettled { at: self.o.at() });
        if let Some((k, mut r)) = cut {
            if let Some(v) = self.variants.get(k).copied().flatten() {
                v.report(&mut r);
            }
            tried.consider(Ok(r));
        }
        Ok(())
    }

    /// Plan the next variant with `plan`, given the budget of a search with (or without) a
    /// plan in hand, and the added FLOPs of the plan in hand; the cut is settled first in
    /// `tried`, so that its plan comes before the variant's.
    fn then<T>(
        &mut self,
        tried: &mut Tried,
        steps: usize,
        plan: impl FnOnce(&PlanOptions, Option<u64>) -> Result<T, PlanError>,
    ) -> Result<T, PlanError> {
        let o = self.o;
        let in_hand = tried.in_hand().is_some() || self.pending();
        let budget = PlanOptions {
            max_trials: if in_hand {
                o.max_trials.min(variant_trials(steps))
            } else {
                o.max_trials
            },
            ..o.clone()
        };
        let planned = plan(&budget, tried.in_hand());
        self.settle(tried)?;
        planned
    }
}

/// The candidate search on the other zero-FLOP variants, after the first: the leaves' order
/// searched for the arena, lowered terms and guards on the reordered base, then the other
/// guard set (the full one or the reshape targets alone, where they differ), then the given
/// graph (when the first was the reordered one); a plan that adds nothing ends it. `true`:
/// the given graph already fits.
fn other_variants(
    before: &Analysis,
    v: &Variants,
    o: &PlanOptions,
    tried: &mut Tried,
    cut: &mut PendingCut,
    pool: &Pool,
) -> Result<bool, PlanError> {
    // Once a plan is in hand (or the block cut is bringing one), a variant's search gets
    // [`variant_trials`] simulations, and a variant whose linear model's optimum is far above
    // the plan in hand is not searched ([`PendingCut::then`]).
    let steps = before.sim.schedule.len();
    let base = v.base(before);
    let say = |variant| o.emit(|| Event::VariantSearched { variant });
    let mut guards_won = false;
    // The leaves' order searched for the arena: where the arena's layout, not what is live,
    // bounds the given order, its recompute search starts lower (ResNet-18 at 70%: +2.09%,
    // no plan from the readiness order). Not the base of the others: where the layout is not
    // the bound, a search from it can end higher (the HF GPT-2 fixture's lowest total, 5%
    // arena saved by the order, rose 5.5% as the base).
    let mut done = false;
    if let Some(c) = v.climbed.as_ref() {
        say(VariantKind::LeavesSearched);
        let planned = cut.then(tried, steps, |b, beat| plan_variant(c, b, beat, pool))?;
        done = tried.consider(planned);
    }
    if !done {
        done = match lowered_terms(base, v.ordered.as_ref(), o)? {
            Some(l) => {
                say(VariantKind::LoweredTerms);
                let planned = cut.then(tried, steps, |b, beat| plan_variant(&l, b, beat, pool))?;
                tried.consider(planned)
            }
            None => false,
        };
    }
    if !done {
        if let Some(g) = v.guarded.as_ref() {
            say(VariantKind::Guarded);
            let planned = cut.then(tried, steps, |b, beat| plan_variant(g, b, beat, pool))?;
            // Its terms lowered only where it found no plan: where it did, the lowered graph
            // searched alike finds the same plan again (GPT-2 small at 60%: 1.2 s each).
            let refused = planned.is_err();
            let before_flops = tried.found.as_ref().map(|f| f.counts.added_flops);
            done = tried.consider(planned);
            guards_won = tried.found.as_ref().map(|f| f.counts.added_flops) != before_flops;
            if !done && refused {
                if let Some(l) = lowered_terms(&g.analysis, Some(g), o)? {
                    say(VariantKind::GuardedLowered);
                    let planned =
                        cut.then(tried, steps, |b, beat| plan_variant(&l, b, beat, pool))?;
                    done = tried.consider(planned);
                }
            }
        }
    }
    // The other guard set, where the first's search did not improve the plan in hand (a
    // guard on a zeros table also takes it out of in-place reuse).
    if !done && !guards_won {
        if let Some(g) = v.other_guards.as_ref() {
            say(VariantKind::OtherGuards);
            let planned = cut.then(tried, steps, |b, beat| plan_variant(g, b, beat, pool))?;
            done = tried.consider(planned);
        }
    }
    if !done && v.ordered.is_some() {
        let planned = cut.then(tried, steps, |b, beat| search_graph(before, b, beat, pool))?;
        tried.consider(match planned {
            Outcome::AlreadyFits => return Ok(true),
            Outcome::Rewritten(r) => Ok(r),
            Outcome::CannotFit(d) => Err(d),
        });
    }
    Ok(false)
}

/// Plan a variant: a plan of it, reported against the given graph, or the refusal.
fn plan_variant(
    v: &Variant,
    o: &PlanOptions,
    beat: Option<u64>,
    pool: &Pool,
) -> Result<Result<Box<Rewritten>, Diagnosis>, PlanError> {
    let planned = search_graph(&v.analysis, o, beat, pool)?;
    o.emit(|| Event::VariantPlanned {
        result: match &planned {
            Outcome::CannotFit(_) => VariantResult::NoPlan,
            Outcome::AlreadyFits => VariantResult::FitsAsItIs,
            Outcome::Rewritten(r) => VariantResult::Added(r.counts.added_flops),
        },
        at: o.at(),
    });
    let mut r = match planned {
        Outcome::CannotFit(d) => return Ok(Err(d)),
        Outcome::AlreadyFits => return Ok(Ok(as_is(v, o)?)),
        Outcome::Rewritten(r) => r,
    };
    v.report(&mut r);
    Ok(Ok(r))
}

/// Whether the graph `a` analyses fits the ceiling as it is and runs in the arena the written
/// model records ([`PlanOptions::runs_as_recorded`]).
pub(crate) fn fits_as_recorded(a: &Analysis, o: &PlanOptions) -> bool {
    a.ledger.total_bytes <= o.effective_ceiling()
        && o.runs_as_recorded(&a.sim, a.ledger.fixed_bytes)
}

/// A variant that fits as it is, as a plan that recomputes nothing.
fn as_is(v: &Variant, o: &PlanOptions) -> Result<Box<Rewritten>, PlanError> {
    let a = &v.analysis;
    let cands = candidates(&a.graph, &a.sim, &a.types, &o.analysis.bindings);
    let arena_ceiling = o
        .effective_ceiling()
        .saturating_sub(a.ledger.fixed_bytes)
        .max(1);
    let prob = problem(&a.sim, &cands, arena_ceiling);
    let oracle = Simulator {
        before: a,
        cands: &cands,
        prob: &prob,
        options: o,
    };
    let plan = plan_from_set(&prob, vec![false; cands.list.len()]);
    let (_, realised) = oracle.realise(&plan)?;
    let mut r = Box::new(Rewritten::new(
        realised,
        cands,
        plan,
        arena_ceiling,
        o.effective_ceiling(),
    ));
    v.report(&mut r);
    Ok(r)
}

/// The graph with its backward-only terms placed where ORT's order runs them just before their
/// consumers ([`ckpt_passes::recompute::lower_terms`]: zero-FLOP moves), when the move set,
/// verified and simulated under the profile, lowers the device total; else `None`.
fn lowered_terms(
    before: &Analysis,
    on: Option<&Variant>,
    o: &PlanOptions,
) -> Result<Option<Variant>, PlanError> {
    let terms = ckpt_passes::recompute::backward_only_terms(&before.graph, &before.class);
    let patch = ckpt_passes::recompute::lower_terms(&before.graph, &terms, "backward-only terms");
    let Some(lowered) = applied(before, &patch, o)? else {
        return Ok(None);
    };
    Ok(
        (lowered.ledger.total_bytes < before.ledger.total_bytes).then(|| Variant {
            analysis: lowered,
            patch_text: chained(on, &patch),
            lowered: true,
            guarded: on.is_some_and(|v| v.guarded),
            tied: None,
        }),
    )
}

/// `before`'s graph with `patch` applied (verified) and analysed; `None` when the patch is
/// empty or does not apply.
pub(crate) fn applied(
    before: &Analysis,
    patch: &ckpt_ir::Patch,
    o: &PlanOptions,
) -> Result<Option<Analysis>, PlanError> {
    if patch.is_empty() {
        return Ok(None);
    }
    let mut g2 = before.graph.clone();
    if patch.apply(&mut g2).is_err() {
        return Ok(None);
    }
    o.report(Progress::Analysing);
    Ok(Some(analyse(g2, &o.analysis)?))
}

/// `before`'s graph (the variant `on`, if any) with its constant shapes guarded
/// ([`ckpt_passes::guards::reuse_guards`]: zero FLOPs), verified and analysed, and, where that
/// guards more than the reshape targets, with those alone ([`ckpt_passes::guards::reshape_guards`]:
/// a guard also takes its values out of ORT's in-place reuse, which can cost more than it
/// frees); the lower total first. Empty when the graph has nothing to guard.
fn guarded(
    before: &Analysis,
    on: Option<&Variant>,
    o: &PlanOptions,
) -> Result<Vec<Variant>, PlanError> {
    let all = ckpt_passes::guards::reuse_guards(&before.graph, "reuse guards");
    let fewer = ckpt_passes::guards::reshape_guards(&before.graph, "reuse guards");
    let patches = if fewer.guards.len() < all.guards.len() {
        vec![all, fewer]
    } else {
        vec![all] // only reshape targets to guard: one variant
    };
    let mut out = Vec::new();
    for patch in patches {
        if let Some(analysis) = applied(before, &patch, o)? {
            out.push(Variant {
                analysis,
                patch_text: chained(on, &patch),
                lowered: on.is_some_and(|v| v.lowered),
                guarded: true,
                tied: None,
            });
        }
    }
    // The lower total first (a stable sort: the full set on a tie).
    out.sort_by_key(|v| v.analysis.ledger.total_bytes);
    Ok(out)
}

impl Variant {
    /// A variant that is `analysis`, made by the patches `patch_text` prints, with no order
    /// moves and no guards.
    pub(crate) fn of_patches(analysis: Analysis, patch_text: String) -> Variant {
        Variant {
            analysis,
            patch_text,
            lowered: false,
            guarded: false,
            tied: None,
        }
    }

    /// The shared weights' gradients this variant folds.
    pub(crate) fn tied(&self) -> Option<&TiedGradients> {
        self.tied.as_ref()
    }

    /// The patches that made this variant, as text.
    pub(crate) fn patch_text(&self) -> &str {
        &self.patch_text
    }

    /// The graph every pass plans when this variant is the base ([`folded`]).
    pub(crate) fn analysis(&self) -> &Analysis {
        &self.analysis
    }

    /// `outcome`, planned on this variant as the base of every other, reported against the
    /// given graph: a plan's patch is this variant's followed by the plan's (its moves and
    /// the graph it planned stay the plan's); where the variant fits as it is, it is the
    /// plan, recomputing nothing.
    pub(crate) fn based(&self, outcome: Outcome, o: &PlanOptions) -> Result<Outcome, PlanError> {
        Ok(match outcome {
            Outcome::AlreadyFits => {
                let mut r = as_is(self, o)?;
                r.folded = true;
                r.tied_gradients = self.tied.clone();
                Outcome::Rewritten(r)
            }
            Outcome::Rewritten(mut r) => {
                r.patch_text = format!("{}\n{}", self.patch_text, r.patch_text);
                r.folded = true;
                r.tied_gradients = self.tied.clone();
                if r.planned_graph.is_none() {
                    r.planned_graph = Some(self.analysis.graph.clone());
                }
                Outcome::Rewritten(r)
            }
            refused => refused,
        })
    }
}

/// The given graph with its leaves written in the order their inputs become ready
/// ([`ckpt_passes::order::order_leaves`]: zero-FLOP moves, so that ORT runs each weight
/// gradient as soon as it can), when that, verified and simulated under the profile, lowers
/// the device total; else `None`.
fn ordered_leaves(before: &Analysis, o: &PlanOptions) -> Result<Option<Variant>, PlanError> {
    let patch = ckpt_passes::order::order_leaves(&before.graph, &before.sim.schedule, "leaf order");
    let Some(analysis) = applied(before, &patch, o)? else {
        return Ok(None);
    };
    Ok(
        (analysis.ledger.total_bytes < before.ledger.total_bytes).then(|| Variant {
            analysis,
            patch_text: patch.to_string(),
            lowered: true,
            guarded: false,
            tied: None,
        }),
    )
}

/// The given graph with its leaves in an order searched for the profile's arena
/// ([`Climbs`]: where each gradient is computed decides where the arena places it), from the
/// leaves as `ordered` (else the given graph) writes them and from the order their inputs
/// become ready, when that lowers the device total below `ordered`'s (the given graph's);
/// else `None`. The climbs are kept in `climbs` for the whole [`crate::plan`] call (its
/// probes), and the order kept at a ceiling is the one climbs run to that ceiling from the
/// start keep ([`Climbs::pick`]), so the plan at a ceiling does not depend on the probes
/// before it. Measured costs belong to the given graph's nodes: then `None`.
fn climbed_leaves(
    before: &Analysis,
    ordered: Option<&Variant>,
    o: &PlanOptions,
    climbs: &RefCell<Option<Climbs>>,
) -> Result<Option<Variant>, PlanError> {
    if o.costs.is_some() {
        return Ok(None);
    }
    let base = ordered.map_or(before, |v| &v.analysis);
    let stop_at = o
        .effective_ceiling()
        .saturating_sub(base.ledger.fixed_bytes);
    // Their own budget, not the searches' (`pass_steps`): four climbs of a small graph may
    // take 6M steps.
    let mut climbs = climbs.borrow_mut();
    let climbs = climbs.get_or_insert_with(|| {
        let (g, s) = (&base.graph, &base.sim.schedule);
        let written = ckpt_passes::order::leaves_in_file_order(g, s);
        // (Readiness needs each leaf's tail: not computed where no climb runs.)
        if !Climbs::worth(base, written.len()) {
            return Climbs::default();
        }
        let ready = ckpt_passes::order::ready_leaf_order(g, s);
        Climbs::new(base, &[written, ready])
    });
    let picked = climbs.pick(base, o, stop_at)?;
    o.emit(|| Event::LeafTrials {
        trials: climbs.trials(),
    });
    let Some((leaves, climbed)) = picked else {
        return Ok(None);
    };
    // The climb moved `base`'s leaves; written on the given graph in that order.
    let patch = ckpt_passes::order::leaf_order(&before.graph, &leaves, "leaf order");
    let Some(analysis) = applied(before, &patch, o)? else {
        return Ok(None);
    };
    o.emit(|| Event::LeafOrderSearched {
        arena_bytes: base.device.arena_bytes,
        climbed_bytes: climbed,
        replayed_bytes: analysis.device.arena_bytes,
    });
    Ok(
        (analysis.ledger.total_bytes < base.ledger.total_bytes).then(|| Variant {
            analysis,
            patch_text: patch.to_string(),
            lowered: true,
            guarded: false,
            tied: None,
        }),
    )
}

/// The patch text of `patch` applied on top of the variant `on`.
fn chained(on: Option<&Variant>, patch: &ckpt_ir::Patch) -> String {
    match on {
        Some(v) => format!("{}\n{patch}", v.patch_text),
        None => patch.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::DiagnosisKind;

    fn refusal(lowest: u64, timed_out: bool) -> Diagnosis {
        Diagnosis {
            kind: DiagnosisKind::NoPlanFound,
            effective_ceiling_bytes: 10,
            fixed_bytes: 0,
            lowest_reachable_total_bytes: lowest,
            dominant_ledger_line: String::new(),
            timed_out,
            steps_spent: false,
            ceilings_probed: 0,
            rungs_planned: 0,
            message: String::new(),
        }
    }

    /// The refusal kept is the lowest, and it says the time limit was hit when the clock
    /// stopped any variant, not only the one kept; without a stopped variant it does not.
    #[test]
    fn a_stopped_variant_marks_what_is_kept() {
        let mut tried = Tried::default();
        tried.consider(Err(refusal(100, true)));
        tried.consider(Err(refusal(50, false)));
        let (found, refused) = tried.finish();
        assert!(found.is_none());
        assert_eq!(refused, Some(refusal(50, true)));
        let mut tried = Tried::default();
        tried.consider(Err(refusal(100, false)));
        tried.consider(Err(refusal(50, false)));
        assert_eq!(tried.finish().1, Some(refusal(50, false)));
    }
}
