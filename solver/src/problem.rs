//! The data the caller hands in ([`Problem`], [`Candidate`]) and the one
//! function that says what a recompute set costs and peaks at ([`evaluate`]).
//!
//! Every solver in this crate is checked against [`evaluate`]: it is the
//! ground truth, written once.

use crate::SolveError;

/// One activation that may be dropped after its last forward use and
/// recomputed just before its first backward use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Candidate {
    /// A name for reports (the caller's tensor name); never interpreted.
    pub label: String,
    /// Size of the activation in bytes.
    pub bytes: u64,
    /// FLOPs to recompute it (its producer plus any non-kept intermediates).
    pub cost: u64,
    /// First step at which it could be absent (after its last forward use).
    pub free_from: usize,
    /// Step of its first backward use: if recomputed it is rematerialised at
    /// this step at the latest and stays live from then on.
    pub needed_at: usize,
    /// Indices of other candidates that its recompute reads. Acyclic.
    pub deps: Vec<usize>,
    /// Extra bytes live at the rematerialisation step while recomputing.
    pub transient: u64,
    /// Block (layer) it belongs to, for the per-block baseline.
    pub block: Option<u32>,
}

/// A fixed schedule of `base_live.len()` steps, the activations that may be
/// recomputed, and the memory ceiling.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Problem {
    /// Bytes live at each step `t` in `0..T` with no recompute.
    pub base_live: Vec<u64>,
    pub candidates: Vec<Candidate>,
    /// Peak bytes allowed.
    pub ceiling: u64,
}

/// What a recompute set does to the schedule, per [`evaluate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// Bytes live at each step with this recompute set.
    pub live: Vec<u64>,
    /// `max(live)` (0 for an empty schedule).
    pub peak: u64,
    /// First step where `peak` is reached.
    pub peak_step: usize,
    /// Sum of the recomputed candidates' costs.
    pub cost: u64,
    /// Rematerialisation step of each recomputed candidate, `None` if kept.
    pub remat_at: Vec<Option<usize>>,
}

impl Evaluation {
    pub fn fits(&self, ceiling: u64) -> bool {
        self.peak <= ceiling
    }
}

impl Problem {
    pub fn steps(&self) -> usize {
        self.base_live.len()
    }

    /// Checks the invariants every solver relies on: `free_from <= needed_at <
    /// T`, deps in range, not self-referential, and acyclic.
    pub fn validate(&self) -> Result<(), SolveError> {
        let n = self.candidates.len();
        let t = self.steps();
        for (i, c) in self.candidates.iter().enumerate() {
            let bad = |reason: String| SolveError::InvalidProblem {
                candidate: i,
                label: c.label.clone(),
                reason,
            };
            if c.needed_at >= t {
                return Err(bad(format!(
                    "needed_at {} is not a step of the {t}-step schedule",
                    c.needed_at
                )));
            }
            if c.free_from > c.needed_at {
                return Err(bad(format!(
                    "free_from {} is after needed_at {}",
                    c.free_from, c.needed_at
                )));
            }
            for &d in &c.deps {
                if d >= n {
                    return Err(bad(format!("dep {d} is not a candidate (there are {n})")));
                }
                if d == i {
                    return Err(bad("depends on itself".into()));
                }
            }
        }
        let order = topological_order(&self.candidates);
        if order.len() < n {
            let mut on_cycle = vec![true; n];
            for &i in &order {
                on_cycle[i] = false;
            }
            let i = on_cycle.iter().position(|&c| c).unwrap_or(0);
            return Err(SolveError::InvalidProblem {
                candidate: i,
                label: self.candidates[i].label.clone(),
                reason: "its deps form a cycle".into(),
            });
        }
        Ok(())
    }
}

/// `dependents[i]` = candidates whose recompute reads `i` (deduplicated,
/// out-of-range deps ignored).
pub(crate) fn dependents(cands: &[Candidate]) -> Vec<Vec<usize>> {
    let n = cands.len();
    let mut out = vec![Vec::new(); n];
    for (k, c) in cands.iter().enumerate() {
        for &d in &c.deps {
            if d < n && d != k && !out[d].contains(&k) {
                out[d].push(k);
            }
        }
    }
    out
}

/// Candidates ordered deps-first (Kahn). Shorter than `cands` iff there is a
/// cycle; candidates on or behind a cycle are left out.
pub(crate) fn topological_order(cands: &[Candidate]) -> Vec<usize> {
    let n = cands.len();
    let deps_of = |k: usize| clean_deps(cands, k);
    let mut indegree: Vec<usize> = (0..n).map(|k| deps_of(k).len()).collect();
    let dependents = dependents(cands);
    let mut ready: Vec<usize> = (0..n).filter(|&k| indegree[k] == 0).rev().collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &k in &dependents[i] {
            indegree[k] -= 1;
            if indegree[k] == 0 {
                ready.push(k);
            }
        }
    }
    order
}

/// The model, and the ground truth every solver is checked against.
///
/// For the recompute set `R = {i : recompute[i]}` (a short slice means the
/// rest are kept):
///
/// ```text
/// r_i     = min(needed_at_i, min { r_k : k in R, i in deps_k })    for i in R (least fixpoint)
/// live(t) = base_live[t] - Σ { bytes_i : i in R, free_from_i <= t < r_i }
///                        + Σ { transient_i : i in R, t == r_i }
/// peak    = max_t live(t),  cost = Σ { cost_i : i in R }
/// ```
///
/// A recomputed dep must be present when its dependent is recomputed.
///
/// Total: out-of-range deps and steps are ignored, a cyclic problem still
/// reaches the fixpoint, and live bytes saturate at 0 (run
/// [`Problem::validate`] to reject such input).
pub fn evaluate(problem: &Problem, recompute: &[bool]) -> Evaluation {
    evaluate_in(problem, &RematOrder::of(problem), recompute)
}

/// The order [`evaluate`] propagates rematerialisation steps in (dependents before their
/// dependencies), computed once for a problem whose sets are evaluated many times.
pub(crate) struct RematOrder(Vec<usize>);

impl RematOrder {
    pub(crate) fn of(problem: &Problem) -> RematOrder {
        let cands = &problem.candidates;
        let n = cands.len();
        let mut order = topological_order(cands);
        let mut seen = vec![false; n];
        for &i in &order {
            seen[i] = true;
        }
        // Candidates on a cycle (invalid input) come last; the fixpoint loop still settles.
        order.extend((0..n).filter(|&i| !seen[i]));
        order.reverse();
        RematOrder(order)
    }
}

/// [`evaluate`] with the problem's [`RematOrder`] given.
pub(crate) fn evaluate_in(problem: &Problem, order: &RematOrder, recompute: &[bool]) -> Evaluation {
    let remat_at = remat_steps(problem, order, recompute);
    let t_len = problem.steps();
    // delta[t] changes live(t) from t on; transient_at[t] applies at t only.
    let mut delta = vec![0i128; t_len + 1];
    let mut transient_at = vec![0i128; t_len];
    let mut cost = 0u64;
    for (i, c) in problem.candidates.iter().enumerate() {
        let Some(r) = remat_at[i] else { continue };
        cost = cost.saturating_add(c.cost);
        let end = r.min(t_len);
        if c.free_from < end {
            delta[c.free_from] -= c.bytes as i128;
            delta[end] += c.bytes as i128;
        }
        if r < t_len {
            transient_at[r] += c.transient as i128;
        }
    }
    let mut live = Vec::with_capacity(t_len);
    let (mut peak, mut peak_step) = (0u64, 0usize);
    let mut saved = 0i128;
    for t in 0..t_len {
        saved += delta[t];
        let v = problem.base_live[t] as i128 + saved + transient_at[t];
        let v = v.clamp(0, u64::MAX as i128) as u64;
        if v > peak {
            peak = v;
            peak_step = t;
        }
        live.push(v);
    }
    Evaluation {
        live,
        peak,
        peak_step,
        cost,
        remat_at,
    }
}

/// `r_i` for every recomputed candidate (the fixpoint in [`evaluate`]).
pub(crate) fn remat_steps(
    problem: &Problem,
    order: &RematOrder,
    recompute: &[bool],
) -> Vec<Option<usize>> {
    let cands = &problem.candidates;
    let n = cands.len();
    let in_r = |i: usize| recompute.get(i).copied().unwrap_or(false);
    let mut r: Vec<Option<usize>> = (0..n)
        .map(|i| in_r(i).then_some(cands[i].needed_at))
        .collect();
    // Dependents before deps: one pass reaches the fixpoint on a DAG; the
    // loop only repeats for cyclic input.
    loop {
        let mut changed = false;
        for &k in &order.0 {
            let Some(rk) = r[k] else { continue };
            for &d in &cands[k].deps {
                if d < n {
                    if let Some(rd) = r[d] {
                        if rk < rd {
                            r[d] = Some(rk);
                            changed = true;
                        }
                    }
                }
            }
        }
        if !changed {
            return r;
        }
    }
}

/// Candidate `k`'s dependencies: in range, not itself, sorted, once each.
pub(crate) fn clean_deps(cands: &[Candidate], k: usize) -> Vec<usize> {
    let mut d: Vec<usize> = cands[k]
        .deps
        .iter()
        .copied()
        .filter(|&d| d < cands.len() && d != k)
        .collect();
    d.sort_unstable();
    d.dedup();
    d
}
