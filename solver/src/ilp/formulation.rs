//! One round's depth-limited model: which `p_{i,s}` are variables, which of
//! them are exact and which need upper bounds, and how any `p_{i,s}` reads
//! as a term ([`Remat`]). CBC's model is built from it in `cbc.rs`.

use std::collections::HashMap;

use super::skeleton::Skeleton;
use crate::ModelSize;

/// `p_{i,s}` as a term.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Remat {
    /// Exactly 0 (before `rmin_i`, or `i` is never recomputed).
    Zero,
    /// Equals `x_i` (the segment is at or past `needed_at_i`).
    X(usize),
    Var(usize),
    /// Beyond the segment's depth: taken as 0, which may be too low.
    Truncated,
}

/// The depth-limited model: which `p_{i,s}` are variables.
pub(super) struct Formulation {
    /// `(candidate, segment)` of each continuous variable.
    pub(super) vars: Vec<(usize, usize)>,
    pub(super) var_of: HashMap<(usize, usize), usize>,
    /// Whether each variable's upper bound is exact (no truncated dependent).
    pub(super) exact: Vec<bool>,
    /// Whether it needs upper bounds: it is read as the value before a
    /// transient's segment (a higher value would hide the transient), or
    /// bounds one that is. Elsewhere a higher `p` only costs absence, so
    /// lower bounds suffice.
    pub(super) bounded: Vec<bool>,
}

impl Formulation {
    pub(super) fn build(sk: &Skeleton, depth: &[usize]) -> Formulation {
        let mut f = Formulation {
            vars: Vec::new(),
            var_of: HashMap::new(),
            exact: Vec::new(),
            bounded: Vec::new(),
        };
        let add = |f: &mut Formulation, s: usize, limit: usize| {
            for (i, _) in sk.distances(s, limit) {
                if sk.useful[i] && !f.var_of.contains_key(&(i, s)) {
                    f.var_of.insert((i, s), f.vars.len());
                    f.vars.push((i, s));
                }
            }
        };
        for &s in &sk.kept {
            add(&mut f, s, depth[s]);
            if sk.reads_before[s] {
                add(&mut f, s - 1, depth[s]);
            }
        }
        // Exactness, dependents first.
        let mut order: Vec<usize> = (0..f.vars.len()).collect();
        order.sort_by_key(|&v| std::cmp::Reverse(sk.topo_pos[f.vars[v].0]));
        f.exact = vec![false; f.vars.len()];
        for v in order {
            let (i, s) = f.vars[v];
            f.exact[v] = sk.dependents[i].iter().all(|&k| match f.remat(sk, k, s) {
                Remat::Zero | Remat::X(_) => true,
                Remat::Var(w) => f.exact[w],
                Remat::Truncated => false,
            });
        }
        f.bounded = vec![false; f.vars.len()];
        let mut work: Vec<usize> = Vec::new();
        for row in sk.rows.iter().filter(|r| r.seg > 0) {
            for &i in &row.transients {
                if let Remat::Var(v) = f.remat(sk, i, row.seg - 1) {
                    work.push(v);
                }
            }
        }
        while let Some(v) = work.pop() {
            if f.bounded[v] {
                continue;
            }
            f.bounded[v] = true;
            let (i, s) = f.vars[v];
            for &k in &sk.dependents[i] {
                if let Remat::Var(w) = f.remat(sk, k, s) {
                    work.push(w);
                }
            }
        }
        f
    }

    pub(super) fn remat(&self, sk: &Skeleton, i: usize, s: usize) -> Remat {
        let e = sk.seg_start[s];
        if !sk.useful[i] || e < sk.rmin[i] {
            Remat::Zero
        } else if e >= sk.needed_at[i] {
            Remat::X(i)
        } else {
            self.var_of
                .get(&(i, s))
                .map_or(Remat::Truncated, |&v| Remat::Var(v))
        }
    }

    pub(super) fn size(&self, sk: &Skeleton, rounds: usize) -> ModelSize {
        ModelSize {
            steps: sk.seg_end.last().copied().unwrap_or(0),
            segments: sk.seg_start.len(),
            memory_rows: sk.rows.len(),
            binaries: sk.useful.iter().filter(|&&u| u).count(),
            continuous: self.vars.len(),
            truncated: self.exact.iter().filter(|&&e| !e).count(),
            rounds,
        }
    }
}
