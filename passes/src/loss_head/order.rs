//! Orders for placing the chunks' nodes: a topological order by priority, and the longest
//! run of nodes that keeps its order.

use std::collections::{BinaryHeap, HashSet};

/// A topological order of `deps.len()` units (`deps[u]`: the units `u` reads), taking the
/// ready unit of the lowest `key` first; `None` on a cycle.
pub(super) fn topological(
    deps: &[Vec<usize>],
    key: impl Fn(usize) -> (u64, u64),
) -> Option<Vec<usize>> {
    let n = deps.len();
    let mut waiting: Vec<usize> = vec![0; n];
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (u, d) in deps.iter().enumerate() {
        let unique: HashSet<usize> = d.iter().copied().filter(|&p| p != u).collect();
        waiting[u] = unique.len();
        for p in unique {
            readers[p].push(u);
        }
    }
    let mut ready: BinaryHeap<std::cmp::Reverse<((u64, u64), usize)>> = (0..n)
        .filter(|&u| waiting[u] == 0)
        .map(|u| std::cmp::Reverse((key(u), u)))
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse((_, u))) = ready.pop() {
        order.push(u);
        for &r in &readers[u] {
            waiting[r] -= 1;
            if waiting[r] == 0 {
                ready.push(std::cmp::Reverse((key(r), r)));
            }
        }
    }
    (order.len() == n).then_some(order)
}

/// The indices of one longest strictly increasing subsequence of `v`.
pub(super) fn longest_increasing(v: &[usize]) -> HashSet<usize> {
    // tails[k]: the index ending the best run of length k + 1 found so far.
    let mut tails: Vec<usize> = Vec::new();
    let mut prev: Vec<Option<usize>> = vec![None; v.len()];
    for i in 0..v.len() {
        let k = tails.partition_point(|&j| v[j] < v[i]);
        prev[i] = k.checked_sub(1).map(|k| tails[k]);
        if k == tails.len() {
            tails.push(i);
        } else {
            tails[k] = i;
        }
    }
    let mut run = HashSet::new();
    let mut at = tails.last().copied();
    while let Some(i) = at {
        run.insert(i);
        at = prev[i];
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_increasing_run_is_found() {
        let run = longest_increasing(&[0, 1, 5, 2, 3, 9, 4]);
        let mut got: Vec<usize> = run.into_iter().collect();
        got.sort();
        assert_eq!(got, vec![0, 1, 3, 4, 6]);
        assert!(longest_increasing(&[]).is_empty());
    }

    #[test]
    fn a_cycle_has_no_order_and_ties_go_by_key() {
        assert_eq!(topological(&[vec![1], vec![0]], |u| (u as u64, 0)), None);
        let order = topological(&[vec![], vec![], vec![0]], |u| ([5, 1, 0][u], 0));
        assert_eq!(order, Some(vec![1, 0, 2]));
    }
}
