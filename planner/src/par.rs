//! Trials on several threads, judged as one thread would judge them: [`par_map`] (results in
//! the items' order), [`first_in_order`] (the first kept, and how many were judged up to it),
//! the [`Budget`] a batch of trials may spend, and the [`Pool`] of schedule steps one
//! [`crate::plan`] call's searches share.
//!
//! Invariant: which thread judged an item never shows in a result or a count, so the plan and
//! its trial counts are the same on any number of threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use ckpt_solver::Plan;

use crate::options::Deadline;
use crate::PlanError;

/// `f` over `items` on up to `threads` threads, results in order. Each thread takes the next
/// item not yet taken (trials differ in cost: a run over the bound stops early), so no thread
/// idles while another has a queue; which thread judged an item does not show in the result.
pub(crate) fn par_map<T: Sync, R: Send>(
    threads: usize,
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = threads.min(items.len()).max(1);
    if threads == 1 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut judged: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(k) else { break };
                        mine.push((k, f(item)));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    judged.sort_unstable_by_key(|(k, _)| *k);
    judged.into_iter().map(|(_, r)| r).collect()
}

/// `f` over `items` on up to `threads` threads, judged in order: the first `Some` with the
/// number of items judged up to it (all of them when none is `Some`). Only those count: the
/// items after it are judged again by the caller against the change it made, as one thread
/// would, so counts and results do not depend on the threads.
pub(crate) fn first_in_order<T: Sync, R: Send>(
    threads: usize,
    items: &[T],
    f: impl Fn(&T) -> Result<Option<R>, PlanError> + Sync,
) -> Result<(usize, Option<R>), PlanError> {
    for (k, judged) in par_map(threads, items, f).into_iter().enumerate() {
        if let Some(r) = judged? {
            return Ok((k + 1, Some(r)));
        }
    }
    Ok((items.len(), None))
}

/// What a cut's trials may spend: threads, the clock and the trial budget.
pub(crate) struct Budget<'a> {
    pub(crate) threads: usize,
    pub(crate) clock: &'a Deadline,
    pub(crate) max_trials: usize,
}

impl Budget<'_> {
    /// The first of `items` that `judge` keeps (a plan), with the number of items judged up
    /// to it (all judged when none is kept). Judged in order, a core's worth at a time, while
    /// the trial budget and the clock last (each judged item is a trial, counted in `trials`);
    /// an item not judged is as one not kept.
    pub(crate) fn first_kept(
        &self,
        items: &[usize],
        trials: &mut usize,
        judge: impl Fn(usize) -> Result<Option<Plan>, PlanError> + Sync,
    ) -> Result<(usize, Option<Plan>), PlanError> {
        let mut next = 0;
        while next < items.len() && *trials < self.max_trials && !self.clock.passed() {
            let width = self.threads.min(self.max_trials - *trials);
            let batch: Vec<usize> = items[next..].iter().copied().take(width).collect();
            let (judged, kept) = first_in_order(self.threads, &batch, |&i| {
                if self.clock.passed() {
                    return Ok(None);
                }
                judge(i)
            })?;
            *trials += judged;
            next += judged;
            if kept.is_some() {
                return Ok((next, kept));
            }
        }
        Ok((next, None))
    }
}

/// The schedule steps the searches of one [`crate::plan`] call may still simulate
/// ([`crate::PlanOptions::pass_steps`]). The searches run one after another and each counts
/// its trials, so what is left before each is the same on any machine.
pub(crate) struct Pool {
    left: Cell<usize>,
}

impl Pool {
    pub(crate) fn new(steps: usize) -> Pool {
        Pool {
            left: Cell::new(steps),
        }
    }

    /// The steps left.
    pub(crate) fn left(&self) -> usize {
        self.left.get()
    }

    /// The trials the steps left pay for on a graph of `steps` schedule steps.
    pub(crate) fn trials(&self, steps: usize) -> usize {
        self.left.get() / steps.max(1)
    }

    /// `trials` simulations of a graph of `steps` steps were run.
    pub(crate) fn spend(&self, trials: usize, steps: usize) {
        let spent = trials.saturating_mul(steps.max(1));
        self.left.set(self.left.get().saturating_sub(spent));
    }
}

#[cfg(test)]
mod tests {
    use super::par_map;

    /// Results come back in the items' order on any thread count, each item judged once, when
    /// the items' costs differ widely (the threads take items as they free up).
    #[test]
    fn results_in_order_on_any_thread_count() {
        let items: Vec<u64> = (0..97).map(|i| (i * 7919) % 23).collect();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let f = |&x: &u64| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Uneven work: some items spin far longer than others.
            let mut acc = x;
            for k in 0..(x * x * 200) {
                acc = acc.wrapping_mul(6364136223846793005).wrapping_add(k);
            }
            std::hint::black_box(acc);
            x * 3 + 1
        };
        let expected: Vec<u64> = items.iter().map(|x| x * 3 + 1).collect();
        for threads in [1, 2, 3, 8, 200] {
            calls.store(0, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(par_map(threads, &items, f), expected, "{threads} threads");
            assert_eq!(
                calls.load(std::sync::atomic::Ordering::Relaxed),
                items.len()
            );
        }
        assert!(par_map(4, &[] as &[u64], f).is_empty());
    }
}
