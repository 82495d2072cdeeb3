//! The main job, read top to bottom:
//! import → analyse (phases, ORT schedule, simulation, ledger) → solve → rewrite → verify
//! → re-simulate → export → validate → receipt.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::json;

use ckpt_ir::ops::{flops, infer};
use ckpt_ir::Profile;
use ckpt_ir::{export_bytes, write_atomic, Bindings, Graph};
use ckpt_passes::device::{device_need, DeviceNeed};
use ckpt_passes::ledger::{ledger, Ledger, Optimizer};
use ckpt_passes::memory::{schedule, simulate_threads, Simulation};
use ckpt_passes::recompute::{candidates, problem, rewrite, Candidates};
use ckpt_passes::{classify, Classification, TensorKind};
use ckpt_solver::{solve_ilp_with, IlpOptions, Plan, SolveError, Status};

use crate::receipt::{Diagnosis, DiagnosisKind};
use crate::size::human;

/// What an analysis needs besides the graph.
#[derive(Clone, Debug)]
pub struct AnalyseOptions {
    pub bindings: Bindings,
    /// The loss output (default: the first floating-point scalar output).
    pub loss: Option<String>,
    pub optimizer: Optimizer,
    /// Bits per element of the optimizer state.
    pub optimizer_bits: u64,
    /// The deployment profile the device need is predicted under.
    pub profile: Profile,
}

impl Job {
    /// The profile the output records: an arena sized to the budget becomes the ceiling less
    /// what the caller feeds (`fixed_bytes`), in bytes.
    pub fn recorded_profile(&self, fixed_bytes: u64) -> Profile {
        self.analysis
            .profile
            .resolved(self.ceiling.saturating_sub(fixed_bytes))
    }
}

impl Default for AnalyseOptions {
    fn default() -> AnalyseOptions {
        AnalyseOptions {
            bindings: Bindings::new(),
            loss: None,
            optimizer: Optimizer::None,
            optimizer_bits: 32,
            profile: Profile::default(),
        }
    }
}

impl AnalyseOptions {
    /// The defaults with `bindings`.
    pub fn with_bindings(bindings: Bindings) -> AnalyseOptions {
        AnalyseOptions {
            bindings,
            ..AnalyseOptions::default()
        }
    }
}

/// Inputs of the main job.
#[derive(Clone, Debug)]
pub struct Job {
    pub model: PathBuf,
    pub ceiling: u64,
    pub output: Option<PathBuf>,
    /// Bindings, loss, optimizer and deployment profile: how every graph of the job is
    /// analysed (the original and each rewrite).
    pub analysis: AnalyseOptions,
    pub reserve_pct: f64,
    pub time_limit: Duration,
}

/// Everything the analysis of one graph yields.
pub struct Analysis {
    pub graph: Graph,
    pub class: Classification,
    pub sim: Simulation,
    /// The device need under the profile (the ledger's `device_arena_bytes`).
    pub device: DeviceNeed,
    pub ledger: Ledger,
    pub types: ckpt_ir::ops::Types,
}

/// Fill in dtypes and shapes by inference: where the file has none, and where the exporter
/// named a dim it could not relate to the inputs (`unk__12`), which inference expresses in the
/// inputs' symbols (`batch*seq`) so that bindings can evaluate it.
pub fn with_inferred_types(mut graph: Graph) -> Result<(Graph, ckpt_ir::ops::Types)> {
    let types = infer(&graph).context("shape inference")?;
    let input_symbols: std::collections::BTreeSet<String> = graph
        .inputs()
        .iter()
        .filter_map(|&t| graph.tensor(t).shape.as_ref())
        .flat_map(|s| s.symbols())
        .collect();
    let ids: Vec<_> = graph.tensor_ids().collect();
    for &t in &ids {
        check_declared(&graph, t, types.shape(t))?;
    }
    for t in ids {
        let tensor = graph.tensor(t);
        let stray = tensor
            .shape
            .as_ref()
            .is_some_and(|s| s.symbols().iter().any(|x| !input_symbols.contains(x)));
        if tensor.dtype.is_none() || tensor.shape.is_none() || stray {
            if let Some(tt) = types.get(t) {
                let (d, s) = (tt.dtype, tt.shape.clone());
                graph.set_type(t, Some(d), Some(s));
            }
        }
    }
    Ok((graph, types))
}

/// A shape the file declares (value_info, graph outputs) must agree with what inference
/// derives from the ops: the same rank, and the same size on every axis where both are
/// numbers. A model that declares smaller intermediates than its ops produce would otherwise
/// be planned on the lie.
fn check_declared(
    graph: &Graph,
    t: ckpt_ir::TensorId,
    inferred: Option<&ckpt_ir::Shape>,
) -> Result<()> {
    let tensor = graph.tensor(t);
    let (Some(declared), Some(inferred)) = (&tensor.shape, inferred) else {
        return Ok(());
    };
    let differs = declared.rank() != inferred.rank()
        || declared
            .dims()
            .iter()
            .zip(inferred.dims())
            .any(|(d, i)| matches!((d.known(), i.known()), (Some(a), Some(b)) if a != b));
    if differs {
        return Err(anyhow!(
            "tensor `{}` is declared with shape {declared}, but its producer computes {inferred}; the file's value_info is wrong (plans are never made on a declared shape the ops do not produce)",
            tensor.name
        ));
    }
    Ok(())
}

/// The analysis of a graph: types, phases, ORT's schedule, the simulation, the device need
/// under the profile, and the ledger.
pub fn analyse(graph: Graph, o: &AnalyseOptions) -> Result<Analysis> {
    crate::progress::stage("analysing: shape inference, ORT's schedule, the simulated arena");
    let (graph, types) = with_inferred_types(graph)?;
    let class = classify(&graph, o.loss.as_deref())?;
    let sched = schedule(&graph)?;
    let sim = simulate_threads(&graph, &sched, &o.bindings, o.profile.intra_op_num_threads)?;
    let device = device_need(&sim, &o.profile);
    let ledger = ledger(
        &graph,
        &class,
        &sim,
        device.arena_bytes,
        &o.bindings,
        o.optimizer,
        o.optimizer_bits,
    );
    Ok(Analysis {
        graph,
        class,
        sim,
        device,
        ledger,
        types,
    })
}

/// How the job ended.
pub enum Outcome {
    /// Already under the ceiling; nothing to do.
    AlreadyFits { before: Analysis },
    /// No plan can fit: the diagnosis.
    CannotFit {
        before: Analysis,
        diagnosis: Diagnosis,
    },
    /// Rewritten.
    Rewritten(Box<Rewritten>),
}

pub struct Rewritten {
    pub before: Analysis,
    pub after: Analysis,
    pub cands: Candidates,
    pub plan: Plan,
    pub patch_text: String,
    /// What the written patch does.
    pub counts: RewriteCounts,
    pub arena_ceiling: u64,
    pub solve_attempts: usize,
    /// What the ILP on the linear model gave, whether or not its plan was used.
    pub ilp: serde_json::Value,
    /// The time limit stopped some part of the search (an ILP round, the climb or the cut):
    /// the plan is the best found by then, and may differ on a faster or less loaded machine.
    pub time_limit_hit: bool,
}

/// The clock of one job: the only thing besides the input and the flags that can change a
/// plan, so every place that reads it records whether it stopped anything.
struct Deadline {
    at: Instant,
    hit: std::sync::atomic::AtomicBool,
}

impl Deadline {
    fn new(at: Instant) -> Deadline {
        Deadline {
            at,
            hit: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether `at` (or this deadline) has passed; a passed deadline is recorded as hit.
    fn passed_at(&self, at: Instant) -> bool {
        let passed = Instant::now() >= at;
        if passed {
            self.hit.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        passed
    }

    fn passed(&self) -> bool {
        self.passed_at(self.at)
    }

    /// Whether the clock stopped anything so far.
    fn hit(&self) -> bool {
        self.hit.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Record an ILP answer that a time limit cut short.
    fn note_ilp(&self, solved: &Result<Plan, SolveError>) {
        let stopped = match solved {
            Ok(p) => {
                p.info.status == Status::FeasibleOnTimeout
                    || matches!(
                        p.info.fallback,
                        Some(ckpt_solver::Fallback::Watchdog | ckpt_solver::Fallback::TimeLimit)
                    )
            }
            Err(e) => matches!(e, SolveError::NoPlanWithinTimeLimit { .. }),
        };
        if stopped {
            self.hit.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Threads the search simulates trials on by default: every available core. The plan does
/// not depend on it (trials are judged in order), only the wall time does.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What a rewrite adds to the graph.
#[derive(Clone, Copy, Debug, Default)]
pub struct RewriteCounts {
    /// FLOPs the rewritten graph really adds: its clones (a node shared by several recompute
    /// chains is cloned once; moves add nothing). `plan.cost`, the model's sum over
    /// candidates, counts shared nodes once per chain.
    pub added_flops: u64,
    /// Nodes cloned, and nodes moved later instead (they run once).
    pub cloned: usize,
    pub moved: usize,
}

/// The lowest total the simulator (the truth) reaches: recomputing every candidate, or the
/// best plan the search realised, or nothing, whichever is lowest.
fn lowest_reachable(job: &Job, before: &Analysis, cands: &Candidates, best: Option<u64>) -> u64 {
    let prob = problem(&before.sim, cands, 0);
    let all = plan_from_set(&prob, vec![true; cands.list.len()]);
    let simulated_all = simulated_total(job, before, cands, &all).unwrap_or(u64::MAX);
    simulated_all
        .min(best.unwrap_or(u64::MAX))
        .min(before.ledger.total_bytes)
}

/// Run the job up to (not including) writing.
pub fn plan(job: &Job, graph: Graph) -> Result<Outcome> {
    let t0 = Instant::now();
    let before = analyse(graph, &job.analysis)?;
    plan_analysed(job, before, t0)
}

/// [`plan`] from the analysis of the unmodified graph (for a ceiling relative to its
/// footprint); the time limit counts from `t0`.
pub fn plan_analysed(job: &Job, before: Analysis, t0: Instant) -> Result<Outcome> {
    plan_analysed_on(job, before, t0, default_threads())
}

/// [`plan_analysed`] with trials simulated on `threads` threads: the same plan on any number.
/// Where the graph as given has no plan, the planner tries it again with its backward-only
/// terms lowered ([`lowered_terms`]); the better of the two diagnoses is reported.
pub fn plan_analysed_on(
    job: &Job,
    before: Analysis,
    t0: Instant,
    threads: usize,
) -> Result<Outcome> {
    plan_costed(job, before, t0, threads, None)
}

/// [`plan_analysed_on`] costing recompute by `costs` (measured per-node times of `before`'s
/// graph, see [`crate::cost`]) instead of FLOPs; `None`: FLOPs. The one place a cost model
/// enters the planner: the candidates' costs, and the search's floor of a thousandth of a step.
///
/// Where the graph as given has no plan, its backward-only terms are moved to run just before
/// their backward readers (zero FLOPs, [`lowered_terms`]) and it is planned again; a plan found
/// so is reported against the graph as given, its patch the moves followed by the recompute.
/// Measured costs belong to the given graph's nodes, so with `costs` there is no such pass.
pub fn plan_costed(
    job: &Job,
    before: Analysis,
    t0: Instant,
    threads: usize,
    costs: Option<&crate::cost::NodeCosts>,
) -> Result<Outcome> {
    let first = plan_graph_on(job, before, t0, threads, costs)?;
    if costs.is_some() {
        return Ok(first);
    }
    let Outcome::CannotFit { before, diagnosis } = first else {
        return Ok(first);
    };
    let Some((lowered, moves)) = lowered_terms(job, &before)? else {
        return Ok(Outcome::CannotFit { before, diagnosis });
    };
    match plan_graph_on(job, lowered, t0, threads, None)? {
        Outcome::CannotFit {
            diagnosis: second, ..
        } if second.lowest_reachable_total_bytes < diagnosis.lowest_reachable_total_bytes => {
            Ok(Outcome::CannotFit {
                before,
                diagnosis: second,
            })
        }
        Outcome::Rewritten(mut r) => {
            r.patch_text = format!("{moves}\n{}", r.patch_text);
            r.before = before;
            Ok(Outcome::Rewritten(r))
        }
        _ => Ok(Outcome::CannotFit { before, diagnosis }),
    }
}

/// One planning pass over the graph `before` holds.
fn plan_graph_on(
    job: &Job,
    before: Analysis,
    t0: Instant,
    threads: usize,
    costs: Option<&crate::cost::NodeCosts>,
) -> Result<Outcome> {
    let threads = threads.max(1);
    let clock = Deadline::new(t0 + job.time_limit);
    let effective = (job.ceiling as f64 * (1.0 - job.reserve_pct / 100.0)).floor() as u64;
    if before.ledger.total_bytes <= effective {
        return Ok(Outcome::AlreadyFits { before });
    }
    let fixed = before.ledger.fixed_bytes;
    if fixed >= effective {
        let l = &before.ledger;
        let message = format!(
            "parameters + optimizer state + data inputs = {} ({} + {} + {}) already exceed the ceiling of {} (after {}% reserve); recompute cannot help",
            human(fixed),
            human(l.parameters_bytes),
            human(l.optimizer_state_bytes),
            human(l.data_bytes),
            human(effective),
            job.reserve_pct
        );
        let diagnosis = Diagnosis {
            kind: DiagnosisKind::FixedExceedsCeiling,
            effective_ceiling_bytes: effective,
            fixed_bytes: fixed,
            lowest_reachable_total_bytes: fixed,
            dominant_ledger_line: l.dominant().to_string(),
            timed_out: false,
            message,
        };
        return Ok(Outcome::CannotFit { before, diagnosis });
    }
    let mut cands = candidates(
        &before.graph,
        &before.sim,
        &before.types,
        &job.analysis.bindings,
    );
    if let Some(costs) = costs {
        crate::cost::apply(&mut cands, costs);
    }
    let step_cost = costs.map_or_else(
        || step_flops(&before, &job.analysis.bindings),
        |c| c.step_ns(),
    );
    let cannot_fit = |before: Analysis, cands: &Candidates, best: Option<u64>, timed_out: bool| {
        let lowest = lowest_reachable(job, &before, cands, best);
        let message = format!(
            "no recompute plan fits: the lowest device total found under the deployment profile (recomputing every candidate, or the search's best) is {} ({} fixed + {} arena), above the ceiling of {}; dominant ledger line: {}{}",
            human(lowest),
            human(fixed),
            human(lowest.saturating_sub(fixed)),
            human(effective),
            before.ledger.dominant(),
            if timed_out {
                format!(" (the search stopped at the time limit of {} s; a longer --time-limit may find a plan)", job.time_limit.as_secs_f64())
            } else {
                String::new()
            }
        );
        let diagnosis = Diagnosis {
            kind: DiagnosisKind::NoPlanFound,
            effective_ceiling_bytes: effective,
            fixed_bytes: fixed,
            lowest_reachable_total_bytes: lowest,
            dominant_ledger_line: before.ledger.dominant().to_string(),
            timed_out,
            message,
        };
        Outcome::CannotFit { before, diagnosis }
    };
    let debug = std::env::var_os("CKPT_OPT_DEBUG").is_some();
    // The ILP's linear model counts live bytes; what the profile's arena needs beyond the live
    // peak (fragmentation, held outputs, the memory pattern's block) is taken off its budget as
    // the original graph measures it in the replay. The simulator still decides every fit.
    let profile_overhead = before
        .device
        .arena_bytes
        .saturating_sub(before.sim.peak_live);
    let arena_ceiling = (effective - fixed).saturating_sub(profile_overhead).max(1);
    // 1. The ILP on the linear model, corrected by the simulator. Round 0 solves the plain
    //    model. Each later round learns from the previous round's rewrite, simulated (the
    //    simulator is byte-exact against ORT): (a) a recomputed activation whose buffer ORT's
    //    allocator still held — handed, once freed, to a later value of the same shape — only
    //    saves from where the buffer was really released, so its window shrinks; (b) what the
    //    run still held beyond the model at each step (clones' transients, backward nodes run
    //    early) becomes a per-step correction. Both only grow, so each round is more
    //    conservative than the last; the loop ends when the simulator says a plan fits, nothing
    //    new is learnt, or the rounds run out. Only plans the ILP proved optimal or within a 1%
    //    gap are used: the simulator, not the linear model, has the last word, and a gap
    //    (unlike a clock, which would make the output depend on the machine's speed) keeps
    //    the answer reproducible. A tenth of the time limit per round: a round CBC cannot
    //    settle quickly is not worth the search's time.
    let opts = IlpOptions {
        time_limit: job.time_limit / 10,
        watchdog_slack: job.time_limit / 20,
        relative_gap: ROUND_GAP,
        ..Default::default()
    };
    let mut attempts = 0;
    let prob = problem(&before.sim, &cands, arena_ceiling);
    let mut ilp = json!({});
    let mut ilp_starts: Vec<(u64, Vec<bool>)> = Vec::new(); // (simulated total, set) of every round's plan
    let mut learnt_prob = prob.clone(); // windows shrunk to what the allocator really released
    let mut correction = vec![0u64; prob.base_live.len()];
    let mut rounds = Vec::new();
    for round in 0..CORRECTION_ROUNDS {
        if clock.passed_at(t0 + job.time_limit / 2) {
            break;
        }
        let mut corrected = learnt_prob.clone();
        for (b, c) in corrected.base_live.iter_mut().zip(&correction) {
            *b += c;
        }
        let solved = solve_ilp_with(&corrected, &opts);
        clock.note_ilp(&solved);
        let plan = match solved {
            Ok(p)
                if matches!(
                    p.info.status,
                    Status::Optimal | Status::WithinGap | Status::NoRecomputeNeeded
                ) =>
            {
                p
            }
            Ok(p) => {
                if debug {
                    eprintln!(
                        "ilp round {round}: {:?} {:?}",
                        p.info.status, p.info.fallback
                    );
                }
                rounds.push(json!({"round": round, "status": format!("{:?}", p.info.status), "seconds": p.info.wall.as_secs_f64()}));
                break;
            }
            Err(
                e @ (SolveError::Infeasible { .. }
                | SolveError::NoPlanWithinTimeLimit { .. }
                | SolveError::DoesNotFit { .. }),
            ) => {
                if debug {
                    eprintln!("ilp round {round}: {e}");
                }
                rounds.push(json!({"round": round, "error": e.to_string()}));
                break;
            }
            Err(e) => return Err(anyhow!(e)),
        };
        attempts += 1;
        let trace = simulated_trace(job, &before, &cands, &plan)?;
        let total = trace.total;
        rounds.push(json!({
            "round": round, "status": format!("{:?}", plan.info.status), "objective": plan.info.objective,
            "seconds": plan.info.wall.as_secs_f64(), "recomputed": plan.recompute.iter().filter(|&&r| r).count(),
            "linear_model_peak_bytes": ckpt_solver::evaluate(&prob, &plan.recompute).peak + fixed, "simulated_peak_bytes": total,
        }));
        if debug {
            eprintln!(
                "ilp round {round}: cost {} corrected model peak {} simulated {} ({:?} {:.3} s, at {:.3} s)",
                plan.cost,
                plan.peak + fixed,
                total,
                plan.info.status,
                plan.info.wall.as_secs_f64(),
                t0.elapsed().as_secs_f64()
            );
            debug_idle(job, &before, &cands, &plan)?;
        }
        if total <= effective {
            let realised = realise(job, &before, &cands, &plan)?;
            if realised.0.ledger.total_bytes <= effective {
                let trace = SolveTrace {
                    arena_ceiling,
                    attempts,
                    ilp: json!({"rounds": rounds, "used": true}),
                    time_limit_hit: clock.hit(),
                };
                return Ok(rewritten(before, cands, plan, realised, trace));
            }
        }
        // A round that simulates no lower than an earlier one: its corrections have stopped
        // paying (each round is more conservative than the last), so the search takes over.
        let improved = ilp_starts.iter().all(|(t, _)| total < *t);
        ilp_starts.push((total, plan.recompute.clone()));
        if !improved {
            if debug {
                eprintln!("ilp round {round}: no lower than an earlier round");
            }
            break;
        }
        let mut learnt = false;
        for (i, c) in learnt_prob.candidates.iter_mut().enumerate() {
            if !plan.recompute[i] {
                continue;
            }
            if debug {
                eprintln!(
                    "  cand {i} {} {} B cost {} window {}..{} held until {:?}",
                    c.label, c.bytes, c.cost, c.free_from, c.needed_at, trace.held_until[i]
                );
            }
            let released = trace.held_until[i]
                .map_or(c.needed_at, |h| h.saturating_add(1))
                .min(c.needed_at);
            if released > c.free_from {
                c.free_from = released;
                learnt = true;
            }
        }
        let model = ckpt_solver::evaluate(&learnt_prob, &plan.recompute);
        for ((corr, seen), modelled) in correction.iter_mut().zip(&trace.seen).zip(&model.live) {
            let excess = seen.saturating_sub(*modelled);
            if excess > *corr {
                *corr = excess;
                learnt = true;
            }
        }
        if !learnt {
            if debug {
                eprintln!("ilp round {round}: nothing new learnt");
            }
            break;
        }
    }
    ilp["rounds"] = json!(rounds);
    ilp["used"] = json!(false);
    // 2. Local search with the simulator in the loop, from the rounds' plans (those that
    //    simulated better than no recompute) and then from no recompute: flip the candidate
    //    (add or drop) that lowers the simulated peak most per added FLOP, until a flip fits
    //    or none helps.
    let search = LocalSearch {
        job,
        before: &before,
        cands: &cands,
        prob: &prob,
        effective,
        cost_floor: (step_cost as f64 / 1000.0).max(1.0),
        debug,
        clock: &clock,
        threads,
    };
    let started = Instant::now();
    let mut trials = 0usize;
    let mut starts: Vec<Vec<bool>> = Vec::new();
    // The ILP rounds' plans that beat no recompute, cheapest first (rounds only grow more
    // conservative: the first is the nearest to the cheapest plan that fits).
    starts.extend(
        ilp_starts
            .iter()
            .filter(|(total, _)| *total < before.ledger.total_bytes)
            .map(|(_, set)| set.clone()),
    );
    starts.push(vec![false; cands.list.len()]);
    let (found, current) = {
        let mut current = before.ledger.total_bytes;
        let mut found: Option<Plan> = None;
        // More starting points when those fail: the ILP's optima at tighter budgets (its linear
        // model under-counts what ORT's allocator holds, so a tighter target lands nearer the truth).
        let tighter = [0.9f64, 0.8].into_iter().filter_map(|f| {
            let mut p = problem(&before.sim, &cands, (arena_ceiling as f64 * f) as u64);
            p.ceiling = p.ceiling.max(1);
            let solved = solve_ilp_with(&p, &opts);
            clock.note_ilp(&solved);
            match solved {
                Ok(plan) if plan.info.status == ckpt_solver::Status::Optimal => {
                    Some(plan.recompute)
                }
                _ => None,
            }
        });
        let mut starts: Box<dyn Iterator<Item = Vec<bool>>> =
            Box::new(starts.into_iter().chain(tighter));
        for start in &mut starts {
            if clock.passed() {
                break;
            }
            match search.climb(start, &mut trials)? {
                Climb::Fits(plan) => {
                    found = Some(*plan);
                    break;
                }
                Climb::Stuck(total) => current = current.min(total),
            }
        }
        (found, current)
    };
    attempts += trials;
    if let Some(mut plan) = found {
        if debug {
            eprintln!(
                "search: fits at {:.3} s, {} trials, cost {}",
                t0.elapsed().as_secs_f64(),
                trials,
                plan.cost
            );
        }
        // Cut FLOPs: drop recomputes the fit does not need, then swap each remaining one (most
        // expensive first) for a cheaper unchosen candidate that keeps the plan under the ceiling.
        let mut chosen: Vec<usize> = (0..plan.recompute.len())
            .filter(|&i| plan.recompute[i])
            .collect();
        chosen.sort_by_key(|&i| (std::cmp::Reverse(cands.list[i].model.cost), i));
        // In order, each drop judged against the drops kept before it; simulated a core's
        // worth at a time (after a kept drop, the rest of the batch is judged again).
        let mut next = 0;
        while next < chosen.len() {
            let batch: Vec<usize> = chosen[next..].iter().copied().take(threads).collect();
            let judged = par_map(threads, &batch, |&i| {
                let mut trial = plan.recompute.clone();
                trial[i] = false;
                let p = plan_from_set(&prob, trial);
                simulated_total(job, &before, &cands, &p)
                    .map(|total| (total <= effective).then_some(p))
            });
            // Only the trials up to the first kept drop count: those after it are judged again
            // against it, as one thread would (the count must not depend on the threads).
            let mut judged_in_order = batch.len();
            for (k, judged) in judged.into_iter().enumerate() {
                if let Some(p) = judged? {
                    plan = p;
                    judged_in_order = k + 1;
                    break;
                }
            }
            trials += judged_in_order;
            next += judged_in_order;
        }
        if debug {
            eprintln!(
                "cut: drops done at {:.3} s, {} trials, cost {}",
                t0.elapsed().as_secs_f64(),
                trials,
                plan.cost
            );
        }
        for &i in &chosen {
            // Swapping a recompute that costs under 1% of the plan cannot gain much, nor can
            // any swap in a plan that adds under 0.1% of a step.
            if !plan.recompute[i]
                || cands.list[i].model.cost.saturating_mul(100) < plan.cost
                || (plan.cost as f64) < search.cost_floor
            {
                continue;
            }
            let mut cheaper: Vec<usize> = (0..plan.recompute.len())
                .filter(|&j| {
                    !plan.recompute[j] && cands.list[j].model.cost < cands.list[i].model.cost
                })
                .collect();
            cheaper.sort_by(|&x, &y| {
                ratio(&cands.list[y])
                    .total_cmp(&ratio(&cands.list[x]))
                    .then(x.cmp(&y))
            });
            for j in cheaper.into_iter().take(SWAP_WIDTH) {
                if trials >= MAX_TRIALS || clock.passed() {
                    break;
                }
                trials += 1;
                let mut trial = plan.recompute.clone();
                trial[i] = false;
                trial[j] = true;
                let p = plan_from_set(&prob, trial);
                if simulated_total(job, &before, &cands, &p)? <= effective {
                    plan = p;
                    break;
                }
            }
        }
        if debug {
            eprintln!(
                "cut: swaps done at {:.3} s, {} trials, cost {}",
                t0.elapsed().as_secs_f64(),
                trials,
                plan.cost
            );
        }
        let realised = realise(job, &before, &cands, &plan)?;
        plan.info.wall = started.elapsed();
        let trace = SolveTrace {
            arena_ceiling,
            attempts,
            ilp,
            time_limit_hit: clock.hit(),
        };
        return Ok(rewritten(before, cands, plan, realised, trace));
    }
    let timed_out = clock.hit();
    Ok(cannot_fit(before, &cands, Some(current), timed_out))
}

/// The simulator-in-the-loop search's fixed context.
struct LocalSearch<'a> {
    job: &'a Job,
    before: &'a Analysis,
    cands: &'a Candidates,
    prob: &'a ckpt_solver::Problem,
    effective: u64,
    cost_floor: f64,
    debug: bool,
    /// The time limit: a search still running then stops with what it has (the only way the
    /// clock can change a result, and the receipt says so).
    clock: &'a Deadline,
    /// Threads trials are simulated on (the answer does not depend on it).
    threads: usize,
}

/// How a climb ended.
enum Climb {
    /// This plan fits.
    Fits(Box<Plan>),
    /// No flip lowers the peak any more: the lowest simulated total reached.
    Stuck(u64),
}

impl LocalSearch<'_> {
    /// The simulated total of `plan`, and the original step its rewritten run peaks at (a
    /// recompute step counts as the original step it precedes).
    fn run(&self, plan: &Plan) -> Result<(u64, usize)> {
        let (total, sim) = simulated_run(self.job, self.before, self.cands, plan)?;
        let original = &self.before.sim.schedule;
        let peak = sim.schedule.order[sim.peak_step.min(sim.schedule.len().saturating_sub(1))..]
            .iter()
            .find_map(|&n| original.step_of(n))
            .unwrap_or(original.len().saturating_sub(1));
        Ok((total, peak))
    }

    /// Hill-climb from `set`, bounded by a move and a simulation count (never by time, so
    /// that the same input gives the same plan).
    fn climb(&self, mut set: Vec<bool>, trials: &mut usize) -> Result<Climb> {
        let (mut current, mut peak_at) = self.run(&plan_from_set(self.prob, set.clone()))?;
        if current <= self.effective {
            return Ok(Climb::Fits(Box::new(plan_from_set(self.prob, set))));
        }
        let max_moves = 2 * set.len() + 1;
        let mut incumbent: Option<Plan> = None; // the cheapest fitting plan seen
        let mut moves_after_fit = 0usize;
        for _ in 0..max_moves {
            if *trials >= MAX_TRIALS || self.clock.passed() {
                break;
            }
            crate::progress::trials(*trials, current);
            // Flips worth trying: every chosen candidate (drop it) and the unchosen ones with
            // the most bytes·window per FLOP (add one), those absent at the simulated peak first.
            let covers = |i: usize| {
                let c = &self.cands.list[i];
                c.model.free_from <= peak_at && peak_at < c.model.needed_at
            };
            let mut adds: Vec<usize> = (0..set.len()).filter(|&i| !set[i]).collect();
            adds.sort_by(|&x, &y| {
                covers(y)
                    .cmp(&covers(x))
                    .then(ratio(&self.cands.list[y]).total_cmp(&ratio(&self.cands.list[x])))
                    .then(x.cmp(&y))
            });
            adds.truncate(SEARCH_WIDTH);
            let flips: Vec<usize> = (0..set.len()).filter(|&i| set[i]).chain(adds).collect();
            let current_cost = plan_from_set(self.prob, set.clone()).cost;
            let mut fits: Option<(usize, Plan)> = None;
            // (score, total, flip, cost, peak)
            let mut step_best: Option<(f64, u64, usize, u64, usize)> = None;
            // Every flip is simulated (in parallel), then judged in order: the same answer on
            // any number of cores.
            *trials += flips.len();
            let judged = par_map(self.threads, &flips, |&i| {
                let mut trial = set.clone();
                trial[i] = !trial[i];
                let plan = plan_from_set(self.prob, trial);
                self.run(&plan).map(|(total, peak)| (plan, total, peak))
            });
            for (&i, judged) in flips.iter().zip(judged) {
                let (plan, total, peak) = judged?;
                if total <= self.effective {
                    if fits
                        .as_ref()
                        .is_none_or(|f| (plan.cost, i) < (f.1.cost, f.0))
                    {
                        fits = Some((i, plan));
                    }
                    continue;
                }
                if total >= current {
                    continue;
                }
                let gain = (current - total) as f64;
                let added = plan.cost as f64 - current_cost as f64;
                // Per added FLOP, with a floor of 0.1% of a step on the cost, so that near-free
                // flips that save next to nothing do not win every move. A drop that helps costs
                // nothing but still scores by its gain: a drop saving 4 KiB must not beat an add
                // saving 30 MiB.
                let score = gain / (added.max(0.0) + self.cost_floor);
                if step_best.is_none_or(|b| score > b.0 || (score == b.0 && total < b.1)) {
                    step_best = Some((score, total, i, plan.cost, peak));
                }
            }
            if let Some((i, plan)) = fits {
                if incumbent.as_ref().is_none_or(|inc| plan.cost < inc.cost) {
                    if self.debug {
                        eprintln!("search: flip candidate {i} -> fits at {} FLOPs", plan.cost);
                    }
                    incumbent = Some(plan);
                }
            }
            // Go on climbing, for a few moves, while the climb costs less than the plan that
            // fits: a few cheap flips may fit where one expensive flip does.
            if incumbent.is_some() {
                moves_after_fit += 1;
            }
            let promising = |b: &(f64, u64, usize, u64, usize)| {
                incumbent
                    .as_ref()
                    .is_none_or(|inc| b.3 < inc.cost && moves_after_fit <= MOVES_AFTER_FIT)
            };
            let Some((_, total, i, _, peak)) = step_best.filter(promising) else {
                break;
            };
            if self.debug {
                eprintln!(
                    "search: flip candidate {i} -> simulated total {total}, peak at step {peak}"
                );
            }
            set[i] = !set[i];
            current = total;
            peak_at = peak;
        }
        if let Some(plan) = incumbent {
            return Ok(Climb::Fits(Box::new(plan)));
        }
        Ok(Climb::Stuck(current))
    }
}

/// `f` over `items` on up to `threads` threads, results in order.
fn par_map<T: Sync, R: Send>(threads: usize, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads.min(items.len()).max(1);
    if threads == 1 {
        return items.iter().map(&f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(|| part.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Bytes freed times window length per FLOP: how promising a candidate looks.
fn ratio(c: &ckpt_passes::recompute::Candidate) -> f64 {
    c.model.bytes as f64 * (c.model.needed_at - c.model.free_from) as f64
        / (c.model.cost as f64 + 1.0)
}

/// Relative gap at which a round of the corrected ILP stops.
const ROUND_GAP: f64 = 0.01;
/// Rounds of the simulator-corrected ILP.
const CORRECTION_ROUNDS: usize = 12;
/// How many unchosen candidates one search move tries adding.
const SEARCH_WIDTH: usize = 32;
/// Moves a climb goes on for after its first fit, looking for a cheaper one.
const MOVES_AFTER_FIT: usize = 8;
/// How many cheaper candidates the final pass tries in place of each expensive recompute.
const SWAP_WIDTH: usize = 16;
/// Simulations one search may run (a count, not a time, so that results are reproducible).
const MAX_TRIALS: usize = 4000;

/// The graph with its backward-only terms placed where ORT's order runs them just before their
/// consumers ([`ckpt_passes::recompute::lower_terms`]: zero-FLOP moves), when the move set,
/// verified and simulated under the profile, lowers the device total; else `None`.
fn lowered_terms(job: &Job, before: &Analysis) -> Result<Option<(Analysis, String)>> {
    let terms = ckpt_passes::recompute::backward_only_terms(&before.graph, &before.class);
    let patch = ckpt_passes::recompute::lower_terms(&before.graph, &terms, "backward-only terms");
    if patch.is_empty() {
        return Ok(None);
    }
    let mut g2 = before.graph.clone();
    if patch.apply(&mut g2).is_err() {
        return Ok(None);
    }
    let lowered = analyse(g2, &job.analysis)?;
    Ok((lowered.ledger.total_bytes < before.ledger.total_bytes)
        .then(|| (lowered, patch.to_string())))
}

/// A plan for a given recompute set, evaluated under the solver's model (used by the repair).
fn plan_from_set(prob: &ckpt_solver::Problem, set: Vec<bool>) -> Plan {
    Plan::for_set(prob, set, ckpt_solver::Method::LocalSearch)
}

/// The simulated total of `plan` (fixed bytes do not change with recompute): rewrite, apply,
/// order, simulate — without the full analysis.
fn simulated_total(job: &Job, before: &Analysis, cands: &Candidates, plan: &Plan) -> Result<u64> {
    Ok(simulated_run(job, before, cands, plan)?.0)
}

fn simulated_run(
    job: &Job,
    before: &Analysis,
    cands: &Candidates,
    plan: &Plan,
) -> Result<(u64, Simulation)> {
    let (_, sim) = rewritten_run(job, before, cands, plan)?;
    let need = device_need(&sim, &job.analysis.profile).arena_bytes;
    Ok((before.ledger.fixed_bytes + need, sim))
}

/// `plan`'s rewrite of the graph (unverified: a trial) and its simulated run.
fn rewritten_run(
    job: &Job,
    before: &Analysis,
    cands: &Candidates,
    plan: &Plan,
) -> Result<(Graph, Simulation)> {
    let patch = rewrite(&before.graph, cands, plan, "trial");
    let mut g2 = before.graph.clone();
    if let Err(e) = patch.apply_unverified(&mut g2) {
        if std::env::var_os("CKPT_OPT_DEBUG").is_some() {
            eprintln!("{patch}");
        }
        return Err(e).context("applying the recompute patch");
    }
    let sim = simulate_threads(
        &g2,
        &schedule(&g2)?,
        &job.analysis.bindings,
        job.analysis.profile.intra_op_num_threads,
    )?;
    Ok((g2, sim))
}

/// Debug trace: what ORT's allocator holds empty at the rewritten run's peak.
fn debug_idle(job: &Job, before: &Analysis, cands: &Candidates, plan: &Plan) -> Result<()> {
    let (g, sim) = rewritten_run(job, before, cands, plan)?;
    let idle = sim.idle_at(&g, sim.peak_step);
    let total: u64 = idle.iter().map(|x| x.1).sum();
    eprintln!(
        "  peak step {} of {} ({}), {} idle in {} buffers:",
        sim.peak_step,
        sim.schedule.len(),
        g.node(sim.schedule.order[sim.peak_step]).name,
        total,
        idle.len()
    );
    for &(b, bytes) in idle.iter().take(4) {
        let buf = &sim.buffers[b];
        let vals: Vec<String> = buf
            .values
            .iter()
            .rev()
            .take(6)
            .map(|&t| {
                let (made, last) = sim.span(&g, t);
                format!("{}[{made}..{last}]", g.tensor(t).name)
            })
            .collect();
        eprintln!(
            "    {bytes} B, alloc {} free {:?}, {} values, last: {}",
            buf.alloc_step,
            buf.free_after,
            buf.values.len(),
            vals.join(", ")
        );
    }
    Ok(())
}

/// What one rewrite's simulated run says, in the original schedule's steps.
struct RunTrace {
    /// Fixed bytes plus the simulated arena peak.
    total: u64,
    /// Live bytes at each original step: that node's step together with the recompute steps
    /// that run just before it (where the linear model puts their transient bytes).
    seen: Vec<u64>,
    /// For each recomputed candidate: the last original step at which the buffer of its
    /// (dropped) activation is still allocated (`None`: to the end of the run).
    held_until: Vec<Option<usize>>,
}

/// Simulate `plan`'s rewrite and express the run in the original schedule's steps.
fn simulated_trace(
    job: &Job,
    before: &Analysis,
    cands: &Candidates,
    plan: &Plan,
) -> Result<RunTrace> {
    let (total, sim) = simulated_run(job, before, cands, plan)?;
    let original = &before.sim.schedule;
    let mut seen = vec![0u64; original.len()];
    // The original step at or before each rewritten step.
    let mut at_or_before = vec![0usize; sim.schedule.len()];
    let mut pending = 0u64;
    let mut last = 0usize;
    for (k, &n) in sim.schedule.order.iter().enumerate() {
        pending = pending.max(sim.live[k]);
        if let Some(s) = original.step_of(n) {
            seen[s] = seen[s].max(pending);
            pending = 0;
            last = s;
        }
        at_or_before[k] = last;
    }
    if let Some(end) = seen.last_mut() {
        *end = (*end).max(pending);
    }
    let held_until = cands
        .list
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if !plan.recompute.get(i).copied().unwrap_or(false) {
                return Some(0);
            }
            let b = c
                .saved
                .first()
                .and_then(|&v| sim.buffer_of.get(v.index()).copied().flatten());
            match b.map(|b| sim.buffers[b].free_after) {
                Some(Some(f)) => Some(at_or_before[f]),
                Some(None) => None,
                None => Some(0),
            }
        })
        .collect();
    Ok(RunTrace {
        total,
        seen,
        held_until,
    })
}

/// How the plan was found, for the receipt.
struct SolveTrace {
    arena_ceiling: u64,
    attempts: usize,
    /// What the ILP rounds did, whether or not their plan was used.
    ilp: serde_json::Value,
    time_limit_hit: bool,
}

/// The job's outcome for a realised plan (the one place a [`Rewritten`] is built).
fn rewritten(
    before: Analysis,
    cands: Candidates,
    plan: Plan,
    (after, patch_text, counts): (Analysis, String, RewriteCounts),
    trace: SolveTrace,
) -> Outcome {
    Outcome::Rewritten(Box::new(Rewritten {
        before,
        after,
        cands,
        plan,
        patch_text,
        counts,
        arena_ceiling: trace.arena_ceiling,
        solve_attempts: trace.attempts,
        ilp: trace.ilp,
        time_limit_hit: trace.time_limit_hit,
    }))
}

/// Rewrite the graph for `plan`, apply, and analyse the result (the simulator is the truth).
fn realise(
    job: &Job,
    before: &Analysis,
    cands: &Candidates,
    plan: &Plan,
) -> Result<(Analysis, String, RewriteCounts)> {
    let mut patch = rewrite(
        &before.graph,
        cands,
        plan,
        &format!("recompute for ceiling {}", job.ceiling),
    );
    // The deployment profile the plan holds under, for runners to read.
    patch
        .metadata
        .extend(job.recorded_profile(before.ledger.fixed_bytes).metadata());
    let text = patch.to_string();
    let counts = RewriteCounts {
        added_flops: patch
            .nodes
            .iter()
            .map(|n| {
                flops(
                    &before.graph,
                    n.copy_of,
                    &before.types,
                    &job.analysis.bindings,
                )
                .unwrap_or(0)
            })
            .sum(),
        cloned: patch.nodes.len(),
        moved: patch.moves.len(),
    };
    let mut g2 = before.graph.clone();
    patch
        .apply(&mut g2)
        .context("applying the recompute patch")?;
    let after = analyse(g2, &job.analysis)?;
    Ok((after, text, counts))
}

/// `model.onnx` → `model.ckpt.onnx` beside it.
pub fn default_output(model: &Path) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    model.with_file_name(format!("{stem}.ckpt.onnx"))
}

/// Write the graph atomically, never over the input.
pub fn write(graph: &Graph, out: &Path, input: &Path) -> Result<Vec<u8>> {
    let bytes = export_bytes(graph);
    write_atomic(out, &bytes, Some(input))?;
    Ok(bytes)
}

/// The ledger as JSON.
pub fn ledger_json(l: &Ledger) -> serde_json::Value {
    json!({
        "parameters_count": l.parameters_count,
        "parameters_bytes": l.parameters_bytes,
        "gradients_bytes": l.gradients_bytes,
        "optimizer_state_bytes": l.optimizer_state_bytes,
        "data_bytes": l.data_bytes,
        "saved_activations_bytes": l.saved_activations_bytes,
        "saved_activations_count": l.saved_activations_count,
        "largest_saved_activations": l.largest_saved.iter().map(|(n, b)| json!({"name": n, "bytes": b})).collect::<Vec<_>>(),
        "transient_at_peak_bytes": l.transient_at_peak_bytes,
        "arena_peak_bytes": l.arena_peak_bytes,
        "device_arena_bytes": l.device_arena_bytes,
        "fixed_bytes": l.fixed_bytes,
        "total_bytes": l.total_bytes,
        "dominant": l.dominant(),
    })
}

/// Per-phase peaks and the high-water mark as JSON.
pub fn trace_json(a: &Analysis) -> serde_json::Value {
    let peaks = a.sim.phase_peaks(&a.class);
    let phases: Vec<serde_json::Value> = peaks
        .iter()
        .map(|(p, pk)| json!({"phase": p.name(), "peak_bytes": pk.bytes, "step": pk.step, "node": pk.node.map(|n| a.graph.node(n).name.clone())}))
        .collect();
    let node = ckpt_passes::memory::peak_node(&a.sim);
    let largest: Vec<serde_json::Value> = a
        .sim
        .live_tensors_at(a.sim.peak_step)
        .iter()
        .take(5)
        .map(|(t, b)| json!({"tensor": a.graph.tensor(*t).name, "bytes": b, "kind": a.class.kind(*t).name()}))
        .collect();
    json!({
        "phases": phases,
        "peak": {
            "bytes": a.sim.peak_live,
            "step": a.sim.peak_step,
            "node": node.map(|n| a.graph.node(n).name.clone()),
            "op": node.map(|n| a.graph.node(n).op_label()),
            "phase": node.map(|n| a.class.phase(n).name()),
            "largest_live": largest,
        },
        "default_arena_peak_bytes": a.sim.arena_peak,
    })
}

/// Total FLOPs of one step (for "% of a step").
pub fn step_flops(a: &Analysis, b: &Bindings) -> u64 {
    a.graph
        .nodes()
        .iter()
        .filter_map(|&n| ckpt_ir::ops::flops(&a.graph, n, &a.types, b).ok())
        .sum()
}

/// Segments of a plan for the receipt.
pub fn segments_json(r: &Rewritten) -> Vec<serde_json::Value> {
    let g = &r.before.graph;
    r.cands
        .list
        .iter()
        .enumerate()
        .filter(|(i, _)| r.plan.recompute.get(*i).copied().unwrap_or(false))
        .map(|(i, c)| {
            let boundary: Vec<String> = {
                let mut v: Vec<String> = c
                    .nodes
                    .iter()
                    .flat_map(|&n| g.node(n).input_tensors().collect::<Vec<_>>())
                    .filter(|t| !c.values.contains(t))
                    .map(|t| g.tensor(t).name.clone())
                    .collect();
                v.sort();
                v.dedup();
                v
            };
            let why: Vec<String> = boundary
                .iter()
                .filter_map(|name| g.tensor_id(name))
                .map(|t| {
                    let tensor = g.tensor(t);
                    let reason = match tensor.producer() {
                        None => "graph input or initializer".to_string(),
                        Some(p) => {
                            let pol = ckpt_ir::ops::policy(g, p);
                            if !pol.is_recomputable() {
                                format!("produced by {} ({})", g.node(p).op_label(), pol.reason())
                            } else if r.before.class.kind(t) == TensorKind::SavedActivation {
                                "kept saved activation (checkpoint)".to_string()
                            } else {
                                "kept".to_string()
                            }
                        }
                    };
                    format!("{}: {reason}", tensor.name)
                })
                .collect();
            json!({
                "activations_dropped": c.saved.iter().map(|&t| g.tensor(t).name.clone()).collect::<Vec<_>>(),
                "bytes_saved": c.model.bytes,
                "nodes_recomputed": c.nodes.iter().filter(|n| !c.moved.contains(n)).map(|&n| g.node(n).name.clone()).collect::<Vec<_>>(),
                "nodes_moved": c.moved.iter().map(|&n| g.node(n).name.clone()).collect::<Vec<_>>(),
                "flops_added": c.model.cost,
                "dropped_from_step": c.model.free_from,
                "rematerialised_at_step": r.plan.remat_at.get(i).copied().flatten(),
                "next_use_step": c.model.needed_at,
                "boundary": why,
                "why": format!("dropping frees {} from step {} to step {}, under the ceiling at the high-water mark", human(c.model.bytes), c.model.free_from, c.model.needed_at),
            })
        })
        .collect()
}

/// sha256 of a file, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}
