//! Qualified capacity: the largest value of one symbolic dim (batch or seq) that fits a ceiling
//! with no recompute, and with recompute, each with its cheapest plan and its estimated
//! throughput, beside gradient accumulation.
//!
//! Rules:
//! - A value fits with no recompute when the unmodified graph's predicted device total is at
//!   most the ceiling; with recompute when the main job's planner, under the main job's
//!   options, plans it (or finds it already fits): the answer's plan is the one the main job
//!   writes with the same flags and `--dim DIM=VALUE`.
//! - The search assumes the device total grows with the dim: it doubles from 1 until a value
//!   does not fit (or passes `--max`), then bisects. Each answer is then checked one step
//!   above it: the value + 1 is planned and simulated and must not fit (or must exceed `max`);
//!   where it fits after all (the planner's search is not monotone in the dim), the answer
//!   moves up to it and is checked again, so a reported answer always has a failing step above.
//! - Step time is estimated from FLOPs (step time ∝ the step's FLOPs, added FLOPs included);
//!   throughput is items (tokens for a seq dim, samples otherwise) per FLOP, relative to no
//!   recompute at its own largest value.
//! - Gradient accumulation reaches the recompute answer's effective batch with k microbatches
//!   of the no-recompute answer, at no-recompute's per-item cost: throughput 1.0 relative. It
//!   cannot lengthen a sequence, so for a seq dim it reaches the tokens per step, not the
//!   sequence length.

use std::cell::RefCell;
use std::collections::HashMap;

use anyhow::Result;
use serde::Serialize;

use ckpt_ir::{Bindings, Graph};

use crate::pipeline::analyse;
use crate::reports::frontier::{plan_at, PlanSearch, Planned};
use crate::size::human;
use ckpt_planner::{step_flops, AnalyseOptions};

/// What to search.
#[derive(Clone, Debug)]
pub struct CapacityQuery {
    pub dim: String,
    pub ceiling_bytes: u64,
    /// The largest value searched.
    pub max_value: u64,
    pub search: PlanSearch,
}

/// The value one step above an answer, planned and simulated.
#[derive(Clone, Debug, Serialize)]
pub struct Above {
    pub value: u64,
    /// Its predicted device total (with recompute: the lowest any plan reached).
    pub predicted_peak_bytes: u64,
    pub fits: bool,
}

/// One answer: the largest value that fits one way.
#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    /// `None`: not even 1 fits.
    pub max_value: Option<u64>,
    pub predicted_peak_bytes: Option<u64>,
    pub added_flops: u64,
    pub step_flops: u64,
    /// Added FLOPs as a percentage of the step: the estimated step-time increase.
    pub step_time_increase_percent: f64,
    /// Items per second relative to no recompute at its largest value (estimated from FLOPs).
    pub throughput_relative: f64,
    pub method: String,
    /// The check one step above (`None` when the answer is `max_value` itself).
    pub above: Option<Above>,
}

/// Gradient accumulation beside recompute.
#[derive(Clone, Debug, Serialize)]
pub struct Accumulation {
    pub microbatch: Option<u64>,
    /// Microbatches per optimizer step to reach the recompute answer's value.
    pub steps: Option<u64>,
    pub effective_value: Option<u64>,
    pub throughput_relative: f64,
    pub note: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Capacity {
    pub model: String,
    pub dim: String,
    /// `tokens` for a seq dim, else `samples`.
    pub items: String,
    pub ceiling_bytes: u64,
    pub profile: String,
    pub bindings: std::collections::BTreeMap<String, u64>,
    pub searched_up_to: u64,
    pub no_recompute: Answer,
    pub with_recompute: Answer,
    pub accumulation: Accumulation,
    /// Does recompute unlock a larger value, and is it cheaper per item than accumulation?
    pub verdict: String,
}

/// `o` with `dim` bound to `v`, and the input dims inference relates to it derived
/// ([`crate::model_io::derive_bindings`]: `batch_x_seq` follows `batch`).
pub(crate) fn options_at(graph: &Graph, o: &AnalyseOptions, dim: &str, v: u64) -> AnalyseOptions {
    let mut b: Bindings = o.bindings.clone();
    b.insert(dim.to_string(), v);
    crate::model_io::derive_bindings(graph, &mut b);
    AnalyseOptions {
        bindings: b,
        ..o.clone()
    }
}

/// The largest `v` in `1..=max` with `fits(v)`, assuming monotone (doubling, then bisection).
fn largest(max: u64, mut fits: impl FnMut(u64) -> Result<bool>) -> Result<Option<u64>> {
    if max == 0 || !fits(1)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, None);
    while hi.is_none() {
        let next = lo.saturating_mul(2).min(max);
        if next == lo {
            return Ok(Some(lo));
        }
        if fits(next)? {
            lo = next;
        } else {
            hi = Some(next);
        }
    }
    let mut hi = hi.unwrap_or(max);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// What an answer states of its plan.
#[derive(Clone, Debug)]
struct Fit {
    method: String,
    total_bytes: u64,
    added_flops: u64,
}

/// The main job's plan at one value ([`plan_at`]: its planner under the same options, the
/// unmodified graph when it already fits); `Err` carries the lowest total it reached. The
/// answer is the plan the main job writes at that value, so it reproduces it.
fn best_with_recompute(
    graph: &Graph,
    o: &AnalyseOptions,
    q: &CapacityQuery,
) -> Result<std::result::Result<Fit, u64>> {
    Ok(match plan_at(graph, o, q.ceiling_bytes, q.search)? {
        Planned::Plan(p) => Ok(Fit {
            method: p.method,
            total_bytes: p.total_bytes,
            added_flops: p.added_flops,
        }),
        Planned::CannotFit {
            lowest_reachable_total_bytes,
        } => Err(lowest_reachable_total_bytes),
    })
}

/// Search both answers (see the module doc).
pub fn capacity(
    model: &str,
    graph: &Graph,
    o: &AnalyseOptions,
    q: &CapacityQuery,
) -> Result<Capacity> {
    let s = Search {
        graph,
        o,
        q,
        planned: RefCell::new(HashMap::new()),
    };
    let nr = largest(q.max_value, |v| Ok(s.total_at(v)? <= q.ceiling_bytes))?;
    let wr = largest(q.max_value, |v| Ok(s.best_at(v)?.is_ok()))?;
    let no_recompute = s.no_recompute(nr)?;
    let nr_rate = nr.map(|v| per_item(v, no_recompute.step_flops));
    let with_recompute = s.with_recompute(wr, nr_rate)?;
    let wr = with_recompute.max_value;
    let is_seq = q.dim.to_ascii_lowercase().contains("seq");
    let accumulation = accumulation(q, nr, wr, is_seq);
    let verdict = verdict(q, nr, &with_recompute, &accumulation);
    Ok(Capacity {
        model: model.into(),
        dim: q.dim.clone(),
        items: if is_seq { "tokens" } else { "samples" }.into(),
        ceiling_bytes: q.ceiling_bytes,
        profile: o.profile.describe(),
        bindings: o.bindings.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        searched_up_to: q.max_value,
        no_recompute,
        with_recompute,
        accumulation,
        verdict,
    })
}

/// Items per FLOP at `v` (`flops`: the step's).
fn per_item(v: u64, flops: u64) -> f64 {
    v as f64 / flops as f64
}

/// The graph, options and query of one search: totals, FLOPs and plans at a value of the dim.
struct Search<'a> {
    graph: &'a Graph,
    o: &'a AnalyseOptions,
    q: &'a CapacityQuery,
    /// The plans made so far, by value: the answer and the step above it were planned by
    /// the bisection, and a plan depends on the input and the flags only.
    planned: RefCell<HashMap<u64, std::result::Result<Fit, u64>>>,
}

impl Search<'_> {
    /// The unmodified graph's predicted device total at `v`.
    fn total_at(&self, v: u64) -> Result<u64> {
        Ok(analyse(
            self.graph.clone(),
            &options_at(self.graph, self.o, &self.q.dim, v),
        )?
        .ledger
        .total_bytes)
    }

    /// The step's FLOPs at `v` (at least 1).
    fn flops_at(&self, v: u64) -> Result<u64> {
        let oo = options_at(self.graph, self.o, &self.q.dim, v);
        let a = analyse(self.graph.clone(), &oo)?;
        Ok(step_flops(&a, &oo.bindings).max(1))
    }

    /// [`best_with_recompute`] at `v`, planned once.
    fn best_at(&self, v: u64) -> Result<std::result::Result<Fit, u64>> {
        if let Some(known) = self.planned.borrow().get(&v) {
            return Ok(known.clone());
        }
        let best = best_with_recompute(
            self.graph,
            &options_at(self.graph, self.o, &self.q.dim, v),
            self.q,
        )?;
        self.planned.borrow_mut().insert(v, best.clone());
        Ok(best)
    }

    /// Fits `v` with no recompute, as checked one step above an answer.
    fn above_at(&self, v: u64) -> Result<Above> {
        let t = self.total_at(v)?;
        Ok(Above {
            value: v,
            predicted_peak_bytes: t,
            fits: t <= self.q.ceiling_bytes,
        })
    }

    /// The no-recompute answer `nr`, checked one step above.
    fn no_recompute(&self, nr: Option<u64>) -> Result<Answer> {
        let nr_step = match nr {
            Some(v) => Some(self.flops_at(v)?),
            None => None,
        };
        let above = match nr {
            Some(v) if v < self.q.max_value => Some(self.above_at(v + 1)?),
            None => Some(self.above_at(1)?),
            _ => None,
        };
        Ok(Answer {
            max_value: nr,
            predicted_peak_bytes: match nr {
                Some(v) => Some(self.total_at(v)?),
                None => None,
            },
            added_flops: 0,
            step_flops: nr_step.unwrap_or(0),
            step_time_increase_percent: 0.0,
            throughput_relative: if nr.is_some() { 1.0 } else { 0.0 },
            method: crate::reports::frontier::NO_RECOMPUTE.into(),
            above,
        })
    }

    /// The with-recompute answer from the search's `wr`, with its plan, checked one step
    /// above; `nr_rate` is no recompute's items per FLOP.
    fn with_recompute(&self, wr: Option<u64>, nr_rate: Option<f64>) -> Result<Answer> {
        // The answer must carry its plan (the bisection's, kept by value): where there is
        // none, the answer moves down until a plan is found.
        let mut wr = wr;
        let mut plan = None;
        while let Some(v) = wr {
            match self.best_at(v)? {
                Ok(p) => {
                    plan = Some(p);
                    break;
                }
                Err(_) => wr = v.checked_sub(1).filter(|&x| x >= 1),
            }
        }
        // Checked one step above (the bisection's plan there where it made one); where that
        // fits (the planner's search is not monotone in the dim), the answer moves up to it
        // and is checked again.
        let above = loop {
            let v = wr.map_or(1, |v| v + 1);
            if v > self.q.max_value {
                break None;
            }
            match self.best_at(v)? {
                Ok(p) => {
                    wr = Some(v);
                    plan = Some(p);
                }
                Err(lowest) => {
                    break Some(Above {
                        value: v,
                        predicted_peak_bytes: lowest,
                        fits: false,
                    })
                }
            }
        };
        let wr_step = match wr {
            Some(v) => Some(self.flops_at(v)?),
            None => None,
        };
        let added = plan.as_ref().map_or(0, |p| p.added_flops);
        let wr_rate = wr.zip(wr_step).map(|(v, f)| per_item(v, f + added));
        let relative = match (wr_rate, nr_rate) {
            (Some(r), Some(base)) if base > 0.0 => r / base,
            _ => 0.0,
        };
        Ok(Answer {
            max_value: wr,
            predicted_peak_bytes: plan.as_ref().map(|p| p.total_bytes),
            added_flops: added,
            step_flops: wr_step.unwrap_or(0),
            step_time_increase_percent: wr_step.map_or(0.0, |f| 100.0 * added as f64 / f as f64),
            throughput_relative: relative,
            method: plan
                .as_ref()
                .map_or_else(|| "none fits".into(), |p| p.method.clone()),
            above,
        })
    }
}

/// Gradient accumulation beside the answers `nr` (no recompute) and `wr` (with recompute).
fn accumulation(q: &CapacityQuery, nr: Option<u64>, wr: Option<u64>, is_seq: bool) -> Accumulation {
    match (nr, wr) {
        (Some(m), Some(target)) => {
            let k = target.div_ceil(m);
            Accumulation {
                microbatch: Some(m),
                steps: Some(k),
                effective_value: Some(k * m),
                throughput_relative: 1.0,
                note: if is_seq {
                    format!("{k} accumulated steps of {}={m} reach the tokens of {}={target} per optimizer step, not its sequence length", q.dim, q.dim)
                } else {
                    format!(
                        "{k} accumulated microbatches of {}={m} reach an effective {} of {}",
                        q.dim,
                        q.dim,
                        k * m
                    )
                },
            }
        }
        _ => Accumulation {
            microbatch: nr,
            steps: None,
            effective_value: None,
            throughput_relative: if nr.is_some() { 1.0 } else { 0.0 },
            note: "no recompute answer to match".into(),
        },
    }
}

/// Does recompute unlock a larger value, and is it cheaper per item than accumulation?
fn verdict(q: &CapacityQuery, nr: Option<u64>, with: &Answer, acc: &Accumulation) -> String {
    match (nr, with.max_value) {
        (_, None) => "nothing fits, even with recompute".to_string(),
        (None, Some(w)) => format!(
            "only recompute fits: {}={w} at +{:.2}% step time",
            q.dim, with.step_time_increase_percent
        ),
        (Some(n), Some(w)) if w <= n => {
            format!("recompute does not unlock a larger {} than {n}", q.dim)
        }
        (Some(n), Some(w)) => {
            let rel = with.throughput_relative;
            format!(
                "recompute unlocks {}={w} (no recompute: {n}) at +{:.2}% step time; estimated throughput {:.3}x of no recompute, against 1.000x for accumulating {} microbatches: {}",
                q.dim,
                with.step_time_increase_percent,
                rel,
                acc.steps.unwrap_or(1),
                if rel > 1.0 { "recompute is the cheaper trade" } else { "accumulation is the cheaper trade (unless the larger value itself is needed)" }
            )
        }
    }
}

/// The Markdown (and terminal) table of a capacity answer.
pub fn markdown(c: &Capacity) -> String {
    let mut s = format!(
        "# Capacity: {} ({} under {})\n\nProfile: {}. Other dims: {}. Searched {}=1..{}. Step time and throughput are estimated from FLOPs ({} per FLOP), not measured.\n\n",
        c.model,
        c.dim,
        human(c.ceiling_bytes),
        c.profile,
        crate::reports::frontier::bindings_text(&c.bindings),
        c.dim,
        c.searched_up_to,
        c.items
    );
    s.push_str(&format!("| | largest {} | predicted peak | added FLOPs | step time | {} / s (relative) | checked above |\n|---|---:|---:|---:|---:|---:|---|\n", c.dim, c.items));
    let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    for (name, a) in [
        ("no recompute", &c.no_recompute),
        ("with recompute", &c.with_recompute),
    ] {
        s.push_str(&format!(
            "| {name} | {} | {} | {} | +{:.2}% | {:.3}x | {} |\n",
            opt(a.max_value),
            a.predicted_peak_bytes.map_or("-".into(), human),
            a.added_flops,
            a.step_time_increase_percent,
            a.throughput_relative,
            a.above
                .as_ref()
                .map_or("(the search's maximum)".into(), |x| format!(
                    "{}={}: {} {}",
                    c.dim,
                    x.value,
                    human(x.predicted_peak_bytes),
                    if x.fits { "FITS" } else { "does not fit" }
                ))
        ));
    }
    s.push_str(&format!(
        "| accumulation | {} x {} | - | 0 | +0.00% | {:.3}x | - |\n\n{}\n\n{}\n",
        opt(c.accumulation.microbatch),
        opt(c.accumulation.steps),
        c.accumulation.throughput_relative,
        c.accumulation.note,
        c.verdict
    ));
    s
}
