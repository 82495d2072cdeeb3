//! The Pareto frontier of one graph: for a list of ceilings, from no recompute down to the
//! floor, the cheapest known plan that fits each, beside the baselines (no recompute, per-block
//! checkpointing, recompute-all) on the same axes.
//!
//! Rules:
//! - Every plan is a rewrite the simulator has analysed; its predicted peak is the analysis's
//!   device total under the deployment profile (the number the main job compares with the
//!   ceiling).
//! - Monotone by construction: every plan found (by the planner at any ceiling, or a baseline)
//!   joins one pool, and each ceiling takes the cheapest plan of the pool that fits it (fewest
//!   added FLOPs, then the lowest peak). A plan that fits a lower ceiling fits every higher one,
//!   so added FLOPs never rise as the ceiling rises, and `fits` never turns false.
//! - The floor is the lowest device total any plan of the pool reaches (recompute-all, a
//!   planner's plan found by probing below the lowest the planner reports, or one found at a
//!   swept ceiling), not a proven bound: the planner's search is a heuristic. Evenly spaced
//!   points end at the floor, so the lowest point fits with the floor's plan.
//! - Per-block checkpointing keeps each layer's residual-stream input and recomputes every
//!   other candidate. The residual stream is found from the graph: a forward `Add` one of whose
//!   operands is an ancestor of the other (the skip connection) makes that operand a block
//!   input. A graph with no such `Add` falls back to the solver's √n spacing.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use ckpt_ir::Graph;
use ckpt_passes::recompute::Candidates;
use ckpt_planner::PlanOptions;

pub use ckpt_planner::{KnownPlan, Planned, NO_RECOMPUTE, PER_BLOCK, PER_LAYER, RECOMPUTE_ALL};

use crate::job::{Ceiling, Job};
use crate::pipeline::analyse;
use crate::size::human;
use ckpt_planner::{default_threads, step_flops, AnalyseOptions, Analysis};
use ckpt_validate::measured_cost::NodeCosts;

/// How each of a report's plans is searched, as the main job's flags say: `--time-limit` (one
/// plan's, counted from its start), `--fold` (the graph with its copies folded away planned
/// too, and the cheaper plan kept), `--plan-again` (a refusal planned again on the output
/// of the plan at its lowest total) and `--fold-tied` (shared weights' gradients folded too).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanSearch {
    pub time_limit: Duration,
    pub fold: bool,
    pub plan_again: bool,
    pub fold_tied: bool,
}

impl PlanSearch {
    /// The reports' default search with a time limit of `time_limit`: copies folded, a
    /// refusal not planned again (`--plan-again off`: a capacity search or a floor search
    /// meets many refusals, and each planned again costs up to six passes more).
    pub fn folding(time_limit: Duration) -> PlanSearch {
        PlanSearch {
            time_limit,
            fold: true,
            plan_again: false,
            fold_tied: false,
        }
    }
}

/// The planner's options for the frontier's plans at `ceiling` (no reserve, no refusal
/// probes, the main job's search steps, copies folded and refusals planned again where
/// `search` says so), costing
/// recompute by measured node times where `costs` are given (the main job's `--cost
/// profile`); the time limit counts from now.
fn plan_options(
    options: &AnalyseOptions,
    ceiling: u64,
    search: PlanSearch,
    costs: Option<&NodeCosts>,
) -> PlanOptions {
    let job = Job {
        model: Default::default(),
        ceiling,
        output: None,
        analysis: options.clone(),
        reserve_pct: 0.0,
        time_limit: search.time_limit,
        refusal_probes: 0,
        plan_again: search.plan_again,
        search_steps: ckpt_planner::PASS_STEPS,
        fold: search.fold,
        chunk_loss_head: false,
        fold_tied: search.fold_tied,
    };
    job.plan_options(Instant::now(), default_threads(), costs)
}

/// Rewrite `before` for the recompute set `set`, apply, and analyse the result
/// ([`ckpt_planner::evaluate_set`]).
pub fn evaluate_set(
    before: &Analysis,
    cands: &Candidates,
    set: Vec<bool>,
    options: &AnalyseOptions,
    method: &str,
) -> Result<KnownPlan> {
    let o = plan_options(options, 0, PlanSearch::folding(Duration::ZERO), None);
    Ok(ckpt_planner::evaluate_set(before, cands, set, &o, method)?)
}

/// The baselines of a graph ([`ckpt_planner::baselines`]), costed by FLOPs.
pub fn baselines(before: &Analysis, options: &AnalyseOptions) -> Result<Vec<KnownPlan>> {
    let o = plan_options(options, 0, PlanSearch::folding(Duration::ZERO), None);
    Ok(ckpt_planner::baselines(before, &o)?)
}

/// Run the main job's planner on `graph` at `ceiling` (no reserve;
/// [`ckpt_planner::plan_at`]), costed by FLOPs.
pub fn plan_at(
    graph: &Graph,
    options: &AnalyseOptions,
    ceiling: u64,
    search: PlanSearch,
) -> Result<Planned> {
    let o = plan_options(options, ceiling, search, None);
    Ok(ckpt_planner::plan_at(graph, &o)?)
}

/// The index of the cheapest plan of `pool` that fits `ceiling`: fewest added FLOPs (measured
/// nanoseconds where the pool was costed by `--cost profile`), then the lowest total, then the
/// earliest.
pub fn cheapest_fitting(pool: &[KnownPlan], ceiling: u64) -> Option<usize> {
    let plans: Vec<(u64, u64)> = pool
        .iter()
        .map(|p| (p.total_bytes, p.added_cost.unwrap_or(p.added_flops)))
        .collect();
    cheapest_index(&plans, ceiling)
}

/// [`cheapest_fitting`] on numbers: `plans` are (total bytes, added FLOPs).
pub fn cheapest_index(plans: &[(u64, u64)], ceiling: u64) -> Option<usize> {
    plans
        .iter()
        .enumerate()
        .filter(|(_, p)| p.0 <= ceiling)
        .min_by_key(|(i, p)| (p.1, p.0, *i))
        .map(|(i, _)| i)
}

/// Which ceilings to sweep.
#[derive(Clone, Debug)]
pub enum Ceilings {
    /// N ceilings evenly spaced from the no-recompute total down to the floor (both included).
    /// Where a plan found at a swept ceiling goes below the floor they were spaced to, the
    /// lowest ceiling moves down to it ([`end_at_floor`]).
    Points(usize),
    /// Given ceilings (`90%` is of the no-recompute total).
    List(Vec<Ceiling>),
}

/// One point of the frontier.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub ceiling_bytes: u64,
    /// The chosen plan's predicted device total (`None` when nothing fits).
    pub predicted_peak_bytes: Option<u64>,
    pub added_flops: u64,
    pub added_flops_percent: f64,
    pub fits: bool,
    /// How the chosen plan was found (`none fits` when nothing does).
    pub method: String,
    /// The ceiling the planner found the chosen plan for (`None`: a baseline); a plan found at
    /// a lower ceiling is reused where it is the cheapest.
    pub found_at_ceiling_bytes: Option<u64>,
    /// With `--cost profile`: the kernel time the plan adds, predicted from ONNX Runtime's
    /// measured per-node medians, in milliseconds, and as a share of the measured step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_ms_percent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_peak_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p95_ms: Option<f64>,
    /// Index into the plan pool (not serialized).
    #[serde(skip)]
    pub plan: Option<usize>,
}

/// One baseline on the frontier's axes.
#[derive(Clone, Debug, Serialize)]
pub struct BaselineRow {
    pub name: String,
    pub predicted_peak_bytes: u64,
    pub added_flops: u64,
    pub added_flops_percent: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_ms_percent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_peak_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p95_ms: Option<f64>,
}

/// The frontier of one graph under one profile and shape.
#[derive(Clone, Debug, Serialize)]
pub struct Frontier {
    pub model: String,
    pub profile: String,
    pub bindings: ckpt_ir::Bindings,
    /// FLOPs of one step of the unmodified graph.
    pub step_flops: u64,
    /// How recompute was costed: `flops`, or `profile` (ONNX Runtime's measured node times).
    pub cost_model: String,
    /// With `--cost profile`: the sum of the unmodified graph's median node times, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_kernel_ms: Option<f64>,
    pub no_recompute_bytes: u64,
    pub floor_bytes: u64,
    /// What the floor's plan holds at its in-use peak, by ledger line, with what the caller
    /// feeds and the profile's arena beyond that peak (`ckpt_passes::ledger::held`): the
    /// lines sum to the floor's total.
    pub floor_held: FloorHeld,
    /// Points in descending ceiling order.
    pub points: Vec<Point>,
    pub baselines: Vec<BaselineRow>,
    /// Whether the points and baselines were measured on ONNX Runtime.
    pub validated: bool,
    /// The no-recompute graph's measured p50 step time (with validation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_p50_ms: Option<f64>,
}

/// What the floor's plan holds at its in-use peak ([`Frontier::floor_held`]).
#[derive(Clone, Debug, Serialize)]
pub struct FloorHeld {
    /// The plan that reaches the floor: `no recompute`, a baseline's name, or the planner's
    /// method.
    pub method: String,
    /// The step of its run where the arena's in-use bytes peak, and the node run there.
    pub peak_step: usize,
    pub peak_node: String,
    pub lines: Vec<HeldLine>,
    /// The largest values in the arena at that step, largest first.
    pub largest: Vec<HeldValue>,
    /// Where its arena binds (`ckpt_passes::device::binding`): the request its steps fail at
    /// in an arena 256 B smaller than one they run in. Not always the in-use peak: a request
    /// can fail with bytes to spare, none of its free chunks large enough.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<crate::receipt::ArenaBinding>,
}

/// One value of [`FloorHeld::largest`].
#[derive(Clone, Debug, Serialize)]
pub struct HeldValue {
    pub line: String,
    pub tensor: String,
    pub bytes: u64,
}

/// One ledger line of [`FloorHeld`].
#[derive(Clone, Debug, Serialize)]
pub struct HeldLine {
    pub line: String,
    pub bytes: u64,
}

impl FloorHeld {
    /// The floor of `pool`: its plan of the lowest total (the first on a tie), whose arena
    /// need is `profile`'s.
    fn of(pool: &[KnownPlan], profile: &ckpt_ir::Profile) -> Option<FloorHeld> {
        let p = pool.iter().min_by_key(|p| p.total_bytes)?;
        let a = &p.analysis;
        let bound = profile.caller_outputs == ckpt_ir::profile::CallerOutputs::Bound;
        let held = ckpt_passes::ledger::held(&a.graph, &a.class, &a.sim, &a.ledger, !bound);
        let binding = crate::receipt::ArenaBinding::of(a, profile);
        Some(FloorHeld {
            binding,
            method: p.method.clone(),
            peak_step: held.step,
            peak_node: crate::receipt::node_name(a, held.step),
            lines: held
                .lines
                .into_iter()
                .map(|(line, bytes)| HeldLine {
                    line: line.into(),
                    bytes,
                })
                .collect(),
            largest: held
                .largest
                .into_iter()
                .map(|(line, tensor, bytes)| HeldValue {
                    line: line.into(),
                    tensor,
                    bytes,
                })
                .collect(),
        })
    }
}

/// The sweep, before any measurement: the frontier and the pool its points index.
pub struct Sweep {
    pub frontier: Frontier,
    pub pool: Vec<KnownPlan>,
    /// The unmodified graph's analysis.
    pub before: Analysis,
}

/// Tries at finding a plan at the lowest total the planner reports reaching.
const FLOOR_TRIES: usize = 4;

/// The lowest total of a plan in `pool` after probing the planner: asked for the impossible
/// (one byte above what the caller feeds), it reports the lowest total it reached; asked for
/// that, it returns the plan (each retry asks a quarter of the way back up to the lowest plan
/// known); then it is asked for less, step by step, until it finds none. The floor is the
/// lowest plan found, not a proven bound.
fn find_floor(
    graph: &Graph,
    options: &AnalyseOptions,
    before: &Analysis,
    pool: &mut Vec<KnownPlan>,
    search: PlanSearch,
    costs: Option<&NodeCosts>,
) -> Result<u64> {
    let plan_at = |g: &Graph, o: &AnalyseOptions, c: u64, t: PlanSearch| -> Result<Planned> {
        Ok(ckpt_planner::plan_at(g, &plan_options(o, c, t, costs))?)
    };
    let known = |pool: &[KnownPlan]| pool.iter().map(|p| p.total_bytes).min().unwrap_or(u64::MAX);
    let probe = before.ledger.fixed_bytes + 1;
    let Planned::CannotFit {
        lowest_reachable_total_bytes: mut target,
    } = plan_at(graph, options, probe, search)?
    else {
        return Ok(known(pool));
    };
    for _ in 0..FLOOR_TRIES {
        let best = known(pool);
        if target >= best {
            break;
        }
        match plan_at(graph, options, target, search)? {
            Planned::Plan(p) => {
                pool.push(*p);
                break;
            }
            Planned::CannotFit { .. } => target += (best - target).div_ceil(4),
        }
    }
    // The diagnosis's lowest is where a search for the impossible stopped, not a bound: ask
    // for less, in steps of a fortieth of the no-recompute total, while plans come back.
    let step = (before.ledger.total_bytes / FLOOR_STEP_DIVISOR).max(1);
    for _ in 0..FLOOR_DESCENT {
        let best = known(pool);
        let Some(target) = best
            .checked_sub(step)
            .filter(|&t| t > before.ledger.fixed_bytes)
        else {
            break;
        };
        match plan_at(graph, options, target, search)? {
            Planned::Plan(p) if p.total_bytes < best => pool.push(*p),
            _ => break,
        }
    }
    Ok(known(pool))
}

/// Steps the floor search takes below the diagnosis's lowest, and their size (a fraction of
/// the no-recompute total).
const FLOOR_DESCENT: usize = 8;
const FLOOR_STEP_DIVISOR: u64 = 40;

/// Make the lowest of the descending `ceilings` the pool's `floor`. The points are spaced down
/// to the floor the probe found, but a plan the planner returns at a swept ceiling (the lowest
/// one above all) may go below it: the lowest ceiling then moves down to that plan's total,
/// so the lowest point is the floor and fits (a single ceiling, no recompute's, is kept and
/// the floor added below it).
pub fn end_at_floor(ceilings: &mut Vec<u64>, floor: u64) {
    match ceilings.as_mut_slice() {
        [_, .., last] if *last > floor => *last = floor,
        [only] if *only > floor => ceilings.push(floor),
        _ => {}
    }
}

/// Sweep `graph` over `ceilings` with the planner (see the module doc).
pub fn sweep(
    model: &str,
    graph: &Graph,
    options: &AnalyseOptions,
    ceilings: &Ceilings,
    search: PlanSearch,
    costs: Option<&NodeCosts>,
) -> Result<Sweep> {
    let before = analyse(graph.clone(), options)?;
    let step = step_flops(&before, &options.bindings).max(1);
    let mut pool = ckpt_planner::baselines(
        &before,
        &plan_options(
            options,
            0,
            PlanSearch {
                time_limit: Duration::ZERO,
                ..search
            },
            costs,
        ),
    )?;
    let n_baselines = pool.len();
    let base_total = before.ledger.total_bytes;
    let floor = find_floor(graph, options, &before, &mut pool, search, costs)?;
    let mut list: Vec<u64> = match ceilings {
        Ceilings::Points(n) => {
            let n = (*n).max(2);
            (0..n)
                .map(|i| {
                    base_total - ((base_total - floor) as u128 * i as u128 / (n - 1) as u128) as u64
                })
                .collect()
        }
        Ceilings::List(specs) => specs.iter().map(|s| s.resolve(base_total)).collect(),
    };
    list.sort_unstable_by(|a, b| b.cmp(a));
    list.dedup();
    for &c in &list {
        if c >= base_total {
            continue;
        }
        let o = plan_options(options, c, search, costs);
        if let Planned::Plan(p) = ckpt_planner::plan_at(graph, &o)? {
            pool.push(*p);
        }
    }
    let floor = pool.iter().map(|p| p.total_bytes).fold(floor, u64::min);
    // The pool always holds no recompute's plan, so it has a floor plan.
    let floor_held =
        FloorHeld::of(&pool, &options.profile).context("no plan in the frontier's pool")?;
    if let Ceilings::Points(_) = ceilings {
        end_at_floor(&mut list, floor);
    }
    let pct = |f: u64| 100.0 * f as f64 / step as f64;
    let step_ns = costs.map(|c| c.step_ns().max(1));
    let ms = |p: &KnownPlan| p.added_cost.map(|ns| ns as f64 / 1e6);
    let ms_pct = |p: &KnownPlan| {
        p.added_cost
            .zip(step_ns)
            .map(|(ns, s)| 100.0 * ns as f64 / s as f64)
    };
    let points = list
        .iter()
        .map(|&c| {
            let chosen = cheapest_fitting(&pool, c);
            let p = chosen.map(|i| &pool[i]);
            Point {
                ceiling_bytes: c,
                predicted_peak_bytes: p.map(|p| p.total_bytes),
                added_flops: p.map_or(0, |p| p.added_flops),
                added_flops_percent: p.map_or(0.0, |p| pct(p.added_flops)),
                added_ms: p.and_then(ms),
                added_ms_percent: p.and_then(ms_pct),
                fits: p.is_some(),
                method: p.map_or_else(|| "none fits".into(), |p| p.method.clone()),
                found_at_ceiling_bytes: p.and_then(|p| p.found_at_ceiling_bytes),
                measured_peak_bytes: None,
                p50_ms: None,
                p95_ms: None,
                plan: chosen,
            }
        })
        .collect();
    let baselines = pool[..n_baselines]
        .iter()
        .map(|p| BaselineRow {
            name: p.method.clone(),
            predicted_peak_bytes: p.total_bytes,
            added_flops: p.added_flops,
            added_flops_percent: pct(p.added_flops),
            added_ms: ms(p),
            added_ms_percent: ms_pct(p),
            measured_peak_bytes: None,
            p50_ms: None,
            p95_ms: None,
        })
        .collect();
    let frontier = Frontier {
        model: model.into(),
        profile: options.profile.describe(),
        bindings: options.bindings.clone(),
        step_flops: step,
        cost_model: if costs.is_some() { "profile" } else { "flops" }.into(),
        step_kernel_ms: step_ns.map(|s| s as f64 / 1e6),
        no_recompute_bytes: base_total,
        floor_bytes: floor,
        floor_held,
        points,
        baselines,
        validated: false,
        base_p50_ms: None,
    };
    Ok(Sweep {
        frontier,
        pool,
        before,
    })
}

/// The Markdown summary of a frontier.
pub fn markdown(f: &Frontier) -> String {
    let mut s = String::new();
    s.push_str(&format!("# Frontier: {}\n\n", f.model));
    s.push_str(&format!(
        "Profile: {}. Shape: {}. Step: {} FLOPs. No recompute: {}; floor: {} (the lowest device total any plan reached).\n\n",
        f.profile,
        bindings_text(&f.bindings),
        f.step_flops,
        human(f.no_recompute_bytes),
        human(f.floor_bytes)
    ));
    if f.validated {
        s.push_str("Measured on ONNX Runtime under the profile: device total (smallest arena the profile's steps run in + what the caller feeds) and step time (p50/p95 of timed runs).\n\n");
    } else if f.cost_model == "profile" {
        s.push_str("Not measured: peaks are predicted by the simulator; the added time is predicted from ONNX Runtime's measured per-node medians (--cost profile), not timed (run with --validate to measure peak and step time).\n\n");
    } else {
        s.push_str("Not measured: peaks are predicted by the simulator and the added cost is estimated from FLOPs (run with --validate to measure peak and step time on ONNX Runtime).\n\n");
    }
    if let Some(step) = f.step_kernel_ms {
        s.push_str(&format!(
            "Cost model: ONNX Runtime's measured node times (--cost profile); one step's kernels take {step:.3} ms. Each ceiling takes the plan that adds the least measured time.\n\n"
        ));
    }
    let measured = |m: Option<u64>| m.map_or("-".to_string(), human);
    let ms = |m: Option<f64>| m.map_or("-".to_string(), |v| format!("{v:.2}"));
    s.push_str("| ceiling | fits | predicted peak | measured peak | added FLOPs | % of a step | p50 ms | p95 ms | method |\n");
    s.push_str("|---:|:---:|---:|---:|---:|---:|---:|---:|---|\n");
    let added = |ms: Option<f64>, pct: Option<f64>| match (ms, pct) {
        (Some(m), Some(p)) => format!(" {m:.3} ms ({p:.2}%) |"),
        _ => String::new(),
    };
    if f.step_kernel_ms.is_some() {
        s = s.replace(
            "| method |\n|---:|:---:|---:|---:|---:|---:|---:|---:|---|\n",
            "| method | added time (predicted) |\n|---:|:---:|---:|---:|---:|---:|---:|---:|---|---:|\n",
        );
    }
    for p in &f.points {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.2}% | {} | {} | {}{} |{}\n",
            human(p.ceiling_bytes),
            if p.fits { "yes" } else { "no" },
            p.predicted_peak_bytes.map_or("-".to_string(), human),
            measured(p.measured_peak_bytes),
            p.added_flops,
            p.added_flops_percent,
            ms(p.p50_ms),
            ms(p.p95_ms),
            p.method,
            match p.found_at_ceiling_bytes {
                Some(c) if c != p.ceiling_bytes => format!(" (found for {})", human(c)),
                _ => String::new(),
            },
            added(p.added_ms, p.added_ms_percent)
        ));
    }
    s.push_str(&format!(
        "\n## Baselines\n\n| baseline | predicted peak | measured peak | added FLOPs | % of a step | p50 ms |{}\n|---|---:|---:|---:|---:|---:|{}\n",
        if f.step_kernel_ms.is_some() { " added time (predicted) |" } else { "" },
        if f.step_kernel_ms.is_some() { "---:|" } else { "" }
    ));
    for b in &f.baselines {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.2}% | {} |{}\n",
            b.name,
            human(b.predicted_peak_bytes),
            measured(b.measured_peak_bytes),
            b.added_flops,
            b.added_flops_percent,
            ms(b.p50_ms),
            added(b.added_ms, b.added_ms_percent)
        ));
    }
    let h = &f.floor_held;
    s.push_str(&format!(
        "\n## What the floor holds\n\nThe floor's plan ({}) at its in-use peak, step {} (`{}`), with what the caller feeds and the arena the profile needs beyond that peak:\n\n| line | bytes |\n|---|---:|\n",
        h.method, h.peak_step, h.peak_node
    ));
    for l in h.lines.iter().filter(|l| l.bytes > 0) {
        s.push_str(&format!("| {} | {} |\n", l.line, human(l.bytes)));
    }
    s.push_str(&format!(
        "| total | {} |\n",
        human(h.lines.iter().map(|l| l.bytes).sum())
    ));
    if !h.largest.is_empty() {
        s.push_str("\nThe largest values in the arena there:\n\n| tensor | line | bytes |\n|---|---|---:|\n");
        for v in &h.largest {
            s.push_str(&format!(
                "| `{}` | {} | {} |\n",
                v.tensor,
                v.line,
                human(v.bytes)
            ));
        }
    }
    if let Some(b) = &h.binding {
        s.push_str(&format!(
            "\nWhere its arena binds: in an arena of {} B (it runs in {} B), run {} fails at step {} (`{}`), a request of {} with {} free in the arena, the largest free chunk {}{}.\n",
            b.arena_bytes,
            b.runs_in_bytes,
            b.run + 1,
            b.step,
            b.node,
            human(b.requested_bytes),
            human(b.free_bytes),
            human(b.largest_free_bytes),
            if b.layout_bound {
                ": the arena's layout binds there, not the bytes in use"
            } else {
                ""
            }
        ));
    }
    s.push_str("\nEach ceiling takes the cheapest plan known to fit it (a plan found for a lower ceiling fits every higher one), so added cost never rises with the ceiling. Not covered: other deployment profiles, other shapes, and ORT optimization levels above `disable`.\n");
    s
}

/// `batch=2, seq=32`, or `static` when the graph has no bindings.
pub fn bindings_text(b: &std::collections::BTreeMap<String, u64>) -> String {
    if b.is_empty() {
        "static".into()
    } else {
        b.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What ONNX Runtime measured of one plan under the profile.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Measurement {
    /// What the caller feeds + the smallest arena the profile's steps run in.
    pub device_total_bytes: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    /// Every timed run's p99 (nearest rank over the runs).
    pub p99_ms: f64,
}

/// Inputs for measuring plans of `before` (seeded like the main job's validation).
pub fn measurement_inputs(
    before: &Analysis,
    options: &AnalyseOptions,
    seed: u64,
) -> Result<Vec<ckpt_runtime::HostTensor>> {
    let params: Vec<_> = before
        .class
        .of_kind(ckpt_passes::TensorKind::Parameter)
        .collect();
    let (inputs, _) = ckpt_validate::inputs::make_inputs(
        &before.graph,
        &options.bindings,
        seed,
        &ckpt_validate::inputs::InputOverrides::default(),
        &params,
    )?;
    Ok(inputs)
}

/// Measure `plan`'s device total (bisection on the arena cap, the profile's steps) and its step
/// time (`runs` timed runs after 2 warm-ups) on ONNX Runtime.
pub fn measure(
    plan: &KnownPlan,
    options: &AnalyseOptions,
    inputs: &[ckpt_runtime::HostTensor],
    runs: usize,
) -> Result<Measurement> {
    let a = &plan.analysis;
    let model = ckpt_ir::export(&a.graph);
    let dir = a.graph.dir().map(std::path::Path::to_path_buf);
    let e = ckpt_validate::memory::MemoryExpectation::of(
        &options.profile,
        (a, a),
        None,
        (dir.clone(), dir),
    );
    let d = ckpt_validate::memory::measure_device(&plan.method, &model, inputs, &e, &e.original)?;
    let bytes = ckpt_ir::export_bytes(&a.graph);
    let t = ckpt_runtime::time_steps(
        ckpt_runtime::Model::new(&plan.method, &bytes).in_dir(a.graph.dir()),
        inputs,
        &ckpt_validate::memory::session_config(&options.profile),
        2,
        runs.max(1),
    )
    .with_context(|| format!("timing the {} graph", plan.method))?;
    let mut sorted = t.runs.clone();
    sorted.sort_by(f64::total_cmp);
    let p99 = sorted[((0.99 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    Ok(Measurement {
        device_total_bytes: d.measured_total_bytes,
        p50_ms: t.p50_ms,
        p95_ms: t.p95_ms,
        p99_ms: p99,
    })
}

/// Measure every plan the frontier shows (each once) and fill in the measured columns.
pub fn validate_sweep(
    s: &mut Sweep,
    options: &AnalyseOptions,
    seed: u64,
    runs: usize,
) -> Result<()> {
    let inputs = measurement_inputs(&s.before, options, seed)?;
    let mut measured: Vec<Option<Measurement>> = vec![None; s.pool.len()];
    let mut get = |i: usize| -> Result<Measurement> {
        if let Some(m) = measured[i] {
            return Ok(m);
        }
        let m = measure(&s.pool[i], options, &inputs, runs)?;
        measured[i] = Some(m);
        Ok(m)
    };
    for (i, b) in s.frontier.baselines.iter_mut().enumerate() {
        let m = get(i)?;
        b.measured_peak_bytes = Some(m.device_total_bytes);
        b.p50_ms = Some(m.p50_ms);
        b.p95_ms = Some(m.p95_ms);
    }
    for p in &mut s.frontier.points {
        if let Some(i) = p.plan {
            let m = get(i)?;
            p.measured_peak_bytes = Some(m.device_total_bytes);
            p.p50_ms = Some(m.p50_ms);
            p.p95_ms = Some(m.p95_ms);
        }
    }
    s.frontier.base_p50_ms = s.frontier.baselines.first().and_then(|b| b.p50_ms);
    s.frontier.validated = true;
    Ok(())
}
