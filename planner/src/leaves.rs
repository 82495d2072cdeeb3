//! The leaves' file order, searched (zero FLOPs).
//!
//! ORT's walk expands the leaves (the loss, each parameter's gradient) highest file index
//! first, so the order the leaves are written in decides when each gradient is computed, and
//! so where the BFC arena places it. The gradients are graph outputs, held to the end of the
//! run: placed one by one into the holes backward leaves, they can split the arena so that a
//! late large request (an embedding's gradient and its zeros table) finds no room, though
//! far less is in use than the arena holds (`docs/design/planner.md`, "What the BERT's
//! floor is made of"). [`ckpt_passes::order::order_leaves`] writes them in the order their
//! inputs become ready, which frees what each reads soonest; it knows nothing of the arena.
//!
//! [`Climbs`] starts there (and from the leaves as written) and moves one leaf at a time to
//! another place in the order, keeping a move where the profile's arena need, replayed, drops:
//! a hill-climb, the moves of one leaf judged together (in parallel) and the one that lowers
//! the need most kept (the first in scan order on a tie), so the result is the same on any
//! number of threads. Each trial is a schedule of the graph as the moved file would list it
//! (no rewrite), its simulation and the need's bisection, stopped as soon as it shows the need
//! is not below the best so far; the trials are counted against a budget of schedule steps,
//! never timed.

use ckpt_ir::NodeId;
use ckpt_passes::device::{device_need, device_need_below};
use ckpt_passes::memory::{schedule_of_sequence, simulate_resolved};
use ckpt_passes::order::sequence_with_leaves;

use crate::analysis::Analysis;
use crate::options::PlanOptions;
use crate::par::par_map;
use crate::trace::Event;
use crate::PlanError;

/// Schedule steps each climb may simulate (trials times the graph's steps): about 3,500
/// trials of the 2-layer BERT of the scale bench (420 steps), 800 of GPT-2 small.
pub(crate) const CLIMB_STEPS: usize = 1_500_000;

/// Graphs of at most this many leaves also get a climb that tries every place of every leaf
/// from the start (41 trials a leaf on the BERT). The climb is a local search on a rugged
/// landscape: near places first finds lower orders on some graphs (ResNet-18: 105 against
/// 127 MiB), every place first on others (the BERT from the readiness order: 272 against
/// 304 MiB), and so does the start (the BERT from its file order: 392 MiB either way).
pub(crate) const WIDE_CLIMB_LEAVES: usize = 64;

/// One climb: the order after each move it kept, with the arena it needs (each lower than the
/// one before), and where it is (`None` once it has ended).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Climb {
    points: Vec<(Vec<NodeId>, u64)>,
    trials: usize,
    at: Option<At>,
}

/// Where a climb that has not ended is.
#[derive(Clone, Debug, PartialEq, Eq)]
struct At {
    order: Vec<NodeId>,
    /// The arena `order` needs (`None` before the first trial).
    best: Option<u64>,
    /// The place of the leaf moved next.
    next: usize,
    /// Every place is tried (else the near and far ones).
    every_place: bool,
    /// A move was kept in this sweep.
    improved: bool,
}

/// The climbs over one graph's leaves ([`Climbs::new`]), advanced only as far as a ceiling
/// asks ([`Climbs::pick`]) and kept for the next: a refusal's probes ask again at other
/// ceilings, and each answer is what climbs run to that ceiling from the start would give.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Climbs {
    climbs: Vec<Climb>,
}

impl Climbs {
    /// Climbs from each of `starts` (orders of the same leaves; a repeated one is climbed
    /// once): near places first, and where the leaves are at most [`WIDE_CLIMB_LEAVES`], every
    /// place first too. None where a climb could not try each leaf at its near places once
    /// within [`CLIMB_STEPS`] (it would judge the first leaves only: GPT-2 small's 148 leaves
    /// take 2,300 trials, 4.4 million steps), or where there are fewer than two leaves.
    pub fn new(a: &Analysis, starts: &[Vec<NodeId>]) -> Climbs {
        let mut climbs = Vec::new();
        let n = starts.first().map_or(0, Vec::len);
        if !Climbs::worth(a, n) {
            return Climbs { climbs };
        }
        for (k, start) in starts.iter().enumerate() {
            if starts[..k].contains(start) {
                continue;
            }
            let wide: &[bool] = if n <= WIDE_CLIMB_LEAVES {
                &[false, true]
            } else {
                &[false]
            };
            for &every_place in wide {
                climbs.push(Climb {
                    points: Vec::new(),
                    trials: 0,
                    at: Some(At {
                        order: start.clone(),
                        best: None,
                        next: 0,
                        every_place,
                        improved: false,
                    }),
                });
            }
        }
        Climbs { climbs }
    }

    /// Whether climbs over `n` leaves of `a`'s graph run ([`Climbs::new`]): at least two, and
    /// one sweep of near places within [`CLIMB_STEPS`].
    pub fn worth(a: &Analysis, n: usize) -> bool {
        let sweep: usize = (0..n).map(|i| near_and_far(i, n).len()).sum();
        n >= 2 && sweep.saturating_mul(a.sim.schedule.len().max(1)) <= CLIMB_STEPS
    }

    /// The order climbs stopped at `stop_at` keep: the first climb's first order needing at
    /// most `stop_at` whose steps run in the arena the written model records
    /// ([`PlanOptions::runs_as_recorded`]), else the next one's, and so on, else the lowest
    /// of their ends; with the arena it needs. `None`: none moved anything. Each climb is advanced until it reaches such an
    /// order or ends, only where the ones before it did not reach one.
    pub fn pick(
        &mut self,
        a: &Analysis,
        o: &PlanOptions,
        stop_at: u64,
    ) -> Result<Option<(Vec<NodeId>, u64)>, PlanError> {
        let runs = |order: &[NodeId]| -> Result<bool, PlanError> {
            Ok(o.runs_as_recorded(&simulation(a, o, order)?, a.ledger.fixed_bytes))
        };
        for c in &mut self.climbs {
            let mut seen = 0;
            loop {
                while seen < c.points.len() {
                    let p = &c.points[seen];
                    seen += 1;
                    if p.1 <= stop_at && runs(&p.0)? {
                        return Ok(Some(p.clone()));
                    }
                }
                if c.at.is_none() {
                    break;
                }
                advance(c, a, o)?;
            }
        }
        Ok(self
            .climbs
            .iter()
            .filter_map(|c| c.points.last())
            .min_by_key(|p| p.1)
            .cloned())
    }

    /// Trials the climbs simulated so far.
    pub fn trials(&self) -> usize {
        self.climbs.iter().map(|c| c.trials).sum()
    }
}

/// Judge the moves of one leaf of climb `c` (all at once, in parallel) and keep the one that
/// lowers the profile's arena need most (the first in scan order on a tie), if any; end the
/// climb at its trial budget or after a sweep of every place that kept no move. A sweep of
/// near places that kept none is followed by sweeps of every place.
fn advance(c: &mut Climb, a: &Analysis, o: &PlanOptions) -> Result<(), PlanError> {
    let Some(mut at) = c.at.take() else {
        return Ok(());
    };
    let g = &a.graph;
    let profile = &o.analysis.profile;
    let max_trials = CLIMB_STEPS / a.sim.schedule.len().max(1);
    // The arena the graph with its leaves in `order` needs: exactly, or where it is under
    // `limit` (`None` where it is not).
    let need = |order: &[NodeId], limit: Option<u64>| -> Result<Option<u64>, PlanError> {
        let sim = simulation(a, o, order)?;
        Ok(match limit {
            Some(l) => device_need_below(&sim, profile, l).map(|d| d.arena_bytes),
            None => Some(device_need(&sim, profile).arena_bytes),
        })
    };
    let best = match at.best {
        Some(b) => b,
        None => need(&at.order, None)?.unwrap_or(u64::MAX),
    };
    at.best = Some(best);
    let n = at.order.len();
    let i = at.next;
    if c.trials >= max_trials {
        return Ok(()); // ended: the budget is spent
    }
    let places = if at.every_place {
        (0..n).filter(|&j| j != i).collect()
    } else {
        near_and_far(i, n)
    };
    let targets: Vec<usize> = places.into_iter().take(max_trials - c.trials).collect();
    c.trials += targets.len();
    let moved = |j: &usize| {
        let mut o2 = at.order.clone();
        let leaf = o2.remove(i);
        o2.insert(*j, leaf);
        o2
    };
    let judged = par_map(o.threads, &targets, |j| need(&moved(j), Some(best)));
    let mut pick: Option<(u64, usize)> = None;
    for (k, r) in judged.into_iter().enumerate() {
        // A schedule or simulation error is the graph's, not the move's: report it.
        if let Some(v) = r? {
            if pick.is_none_or(|(b, _)| v < b) {
                pick = Some((v, k));
            }
        }
    }
    if let Some((v, k)) = pick {
        at.order = moved(&targets[k]);
        at.best = Some(v);
        at.improved = true;
        o.emit(|| Event::LeafMoved {
            leaf: g.node(at.order[targets[k]]).name.clone(),
            place: targets[k],
            of: n,
            arena_bytes: v,
            trial: c.trials,
        });
        c.points.push((at.order.clone(), v));
    }
    at.next += 1;
    if at.next == n {
        // A sweep ended: near places that kept nothing give way to every place; every place
        // that kept nothing ends the climb.
        if !at.improved {
            if at.every_place {
                return Ok(());
            }
            at.every_place = true;
        }
        at.next = 0;
        at.improved = false;
    }
    if c.trials < max_trials {
        c.at = Some(at);
    }
    Ok(())
}

/// The run of `a`'s graph with its leaves in `order` (ORT's schedule of the file
/// [`ckpt_passes::order::leaf_order`] would write, computed without writing it).
fn simulation(
    a: &Analysis,
    o: &PlanOptions,
    order: &[NodeId],
) -> Result<ckpt_passes::memory::Simulation, PlanError> {
    let g = &a.graph;
    let seq = sequence_with_leaves(g, order);
    let sched = schedule_of_sequence(g, &seq, ckpt_ir::ort::runtime_version(g))?;
    Ok(simulate_resolved(
        g,
        &sched,
        &o.analysis.bindings,
        o.analysis.profile.intra_op_num_threads,
        &a.ort,
    )?)
}

/// The places the leaf at `i` of `n` is tried at: every place a power of two away, nearest
/// first on each side (i ± 1, 2, 4, …), and the ends: about 2·log2(n) trials a leaf where
/// every place is n − 1.
fn near_and_far(i: usize, n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    let mut d = 1;
    while d < n {
        if i >= d {
            out.push(i - d);
        }
        if i + d < n {
            out.push(i + d);
        }
        d *= 2;
    }
    for end in [0, n - 1] {
        if end != i && !out.contains(&end) {
            out.push(end);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{analyse, AnalyseOptions};

    fn fixture(name: &str) -> Analysis {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name);
        let g = ckpt_ir::import_file(&path).unwrap();
        analyse(g, &AnalyseOptions::default()).unwrap()
    }

    fn starts(a: &Analysis) -> Vec<Vec<NodeId>> {
        let s = &a.sim.schedule;
        vec![
            ckpt_passes::order::leaves_in_file_order(&a.graph, s),
            ckpt_passes::order::ready_leaf_order(&a.graph, s),
        ]
    }

    /// A ceiling is answered as climbs run to it from the start would answer it, whatever was
    /// asked before (a refusal's probes ask lower ceilings first): climbs advanced to their end
    /// give the same order at a high ceiling as fresh ones; every order picked needs what it
    /// says (the arena of the graph written in it, analysed afresh) and is lower than the
    /// start; the threads do not change a thing.
    #[test]
    fn a_ceiling_is_answered_the_same_whatever_was_asked_before() {
        let a = fixture("gpt2_d0_onnxad.onnx");
        // The ceiling of the start's total: the recorded arena is the start's need.
        let o = PlanOptions::new(a.ledger.total_bytes, AnalyseOptions::default());
        let start = a.device.arena_bytes;
        let mut deep = Climbs::new(&a, &starts(&a));
        let lowest = deep.pick(&a, &o, 0).unwrap().expect("a lower order");
        assert!(lowest.1 < start, "{} -> {}", start, lowest.1);
        let high = start - (start - lowest.1) / 4;
        let mut fresh = Climbs::new(&a, &starts(&a));
        let picked = fresh
            .pick(&a, &o, high)
            .unwrap()
            .expect("an order under the ceiling");
        assert!(picked.1 <= high && picked.1 >= lowest.1);
        assert!(
            fresh.trials() < deep.trials(),
            "the fresh climbs stopped early"
        );
        assert_eq!(deep.pick(&a, &o, high).unwrap(), Some(picked.clone()));
        let one = PlanOptions {
            threads: 1,
            ..o.clone()
        };
        let mut single = Climbs::new(&a, &starts(&a));
        assert_eq!(single.pick(&a, &one, high).unwrap(), Some(picked.clone()));
        for (order, need) in [picked, lowest] {
            let patch = ckpt_passes::order::leaf_order(&a.graph, &order, "leaf order");
            let mut g = a.graph.clone();
            patch.apply(&mut g).unwrap();
            let again = analyse(g, &AnalyseOptions::default()).unwrap();
            assert_eq!(again.device.arena_bytes, need);
        }
    }

    /// Too many leaves for one sweep of near places within the budget: no climb; one fewer
    /// sweep's worth: climbs.
    #[test]
    fn no_climb_where_a_sweep_does_not_fit_the_budget() {
        let a = fixture("mlp_d0_onnxad.onnx");
        let steps = a.sim.schedule.len();
        let sweep = |n: usize| (0..n).map(|i| near_and_far(i, n).len()).sum::<usize>();
        let leaves = starts(&a)[0].clone();
        assert!(!Climbs::new(&a, std::slice::from_ref(&leaves))
            .climbs
            .is_empty());
        // The same leaves repeated (a count: `new` judges the sweep, it runs nothing).
        let mut many = leaves.clone();
        while sweep(many.len() + leaves.len()) * steps <= CLIMB_STEPS {
            many.extend_from_slice(&leaves);
        }
        assert!(!Climbs::new(&a, &[many.clone()]).climbs.is_empty());
        many.extend_from_slice(&leaves);
        assert!(Climbs::new(&a, &[many]).climbs.is_empty());
    }
}
