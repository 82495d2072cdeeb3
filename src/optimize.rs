//! The main job, read top to bottom:
//! import → analyse (phases, ORT schedule, simulation, ledger) → solve → rewrite → verify
//! → re-simulate → export → validate → receipt.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::json;

use ckpt_ir::ops::infer;
use ckpt_ir::{export, export_bytes, write_atomic, Bindings, Graph, Message};
use ckpt_passes::ledger::{ledger, Ledger, Optimizer};
use ckpt_passes::memory::{schedule, simulate, Simulation};
use ckpt_passes::recompute::{candidates, problem, rewrite, Candidates};
use ckpt_passes::{classify, Classification, TensorKind};
use ckpt_solver::{solve_ilp_with, IlpOptions, Plan, SolveError};

use crate::size::human;

/// The session setting every consumer of a rewritten model must use.
pub const CSE_KEY: &str = "optimization.disable_specified_optimizers";
pub const CSE_VALUE: &str = "CommonSubexpressionElimination";
/// The metadata key under which the rewritten model records it.
pub const METADATA_KEY: &str = "ckpt-opt.session_config.optimization.disable_specified_optimizers";

/// Inputs of the main job.
#[derive(Clone, Debug)]
pub struct Job {
    pub model: PathBuf,
    pub ceiling: u64,
    pub output: Option<PathBuf>,
    pub bindings: Bindings,
    pub loss: Option<String>,
    pub optimizer: Optimizer,
    pub optimizer_bits: u64,
    pub reserve_pct: f64,
    pub time_limit: Duration,
}

/// Everything the analysis of one graph yields.
pub struct Analysis {
    pub graph: Graph,
    pub class: Classification,
    pub sim: Simulation,
    pub ledger: Ledger,
    pub types: ckpt_ir::ops::Types,
}

/// import-free analysis of a graph.
pub fn analyse(mut graph: Graph, b: &Bindings, loss: Option<&str>, optimizer: Optimizer, bits: u64) -> Result<Analysis> {
    let types = infer(&graph).context("shape inference")?;
    let ids: Vec<_> = graph.tensor_ids().collect();
    for t in ids {
        let tensor = graph.tensor(t);
        if tensor.dtype.is_none() || tensor.shape.is_none() {
            if let Some(tt) = types.get(t) {
                let (d, s) = (tt.dtype, tt.shape.clone());
                graph.set_type(t, Some(d), Some(s));
            }
        }
    }
    let class = classify(&graph, loss)?;
    let sched = schedule(&graph)?;
    let sim = simulate(&graph, &sched, b)?;
    let ledger = ledger(&graph, &class, &sim, b, optimizer, bits);
    Ok(Analysis { graph, class, sim, ledger, types })
}

/// How the job ended.
pub enum Outcome {
    /// Already under the ceiling; nothing to do.
    AlreadyFits { before: Analysis },
    /// No plan can fit: the diagnosis.
    CannotFit { before: Analysis, message: String, lowest_total: u64 },
    /// Rewritten.
    Rewritten(Box<Rewritten>),
}

pub struct Rewritten {
    pub before: Analysis,
    pub after: Analysis,
    pub cands: Candidates,
    pub plan: Plan,
    pub patch_text: String,
    pub arena_ceiling: u64,
    pub solve_attempts: usize,
}

fn lowest_reachable(before: &Analysis, cands: &Candidates) -> u64 {
    let p = problem(&before.graph, &before.sim, cands, 0);
    let all = vec![true; p.candidates.len()];
    ckpt_solver::evaluate(&p, &all).peak.min(before.sim.peak_live)
}

/// Run the job up to (not including) writing.
pub fn plan(job: &Job, graph: Graph) -> Result<Outcome> {
    let before = analyse(graph, &job.bindings, job.loss.as_deref(), job.optimizer, job.optimizer_bits)?;
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
        return Ok(Outcome::CannotFit { before, message, lowest_total: fixed });
    }
    let cands = candidates(&before.graph, &before.class, &before.sim, &before.types, &job.bindings);
    let mut arena_ceiling = effective - fixed;
    let opts = IlpOptions { time_limit: job.time_limit, ..Default::default() };
    for attempt in 1..=5 {
        let prob = problem(&before.graph, &before.sim, &cands, arena_ceiling);
        let plan = match solve_ilp_with(&prob, &opts) {
            Ok(p) => p,
            Err(e @ (SolveError::Infeasible { .. } | SolveError::NoPlanWithinTimeLimit { .. } | SolveError::DoesNotFit { .. })) => {
                if std::env::var_os("CKPT_OPT_DEBUG").is_some() {
                    eprintln!("solver: {e}");
                }
                let lowest = lowest_reachable(&before, &cands);
                let message = format!(
                    "no recompute plan fits: the lowest arena peak recompute can reach is {} (total {} with {} fixed); the ceiling leaves {} for the arena. Dominant ledger line: {}",
                    human(lowest),
                    human(lowest + fixed),
                    human(fixed),
                    human(effective - fixed),
                    before.ledger.dominant()
                );
                return Ok(Outcome::CannotFit { before, message, lowest_total: lowest + fixed });
            }
            Err(e) => return Err(anyhow!(e)),
        };
        let mut patch = rewrite(&before.graph, &before.class, &cands, &plan, &format!("recompute for ceiling {}", job.ceiling));
        patch.metadata.push((METADATA_KEY.to_string(), CSE_VALUE.to_string()));
        let patch_text = patch.to_string();
        let mut g2 = before.graph.clone();
        patch.apply(&mut g2).context("applying the recompute patch")?;
        let after = analyse(g2, &job.bindings, job.loss.as_deref(), job.optimizer, job.optimizer_bits)?;
        if after.ledger.total_bytes <= effective {
            return Ok(Outcome::Rewritten(Box::new(Rewritten { before, after, cands, plan, patch_text, arena_ceiling, solve_attempts: attempt })));
        }
        // The simulator (the truth) disagrees with the solver's linear model: tighten and re-solve.
        let excess = after.ledger.total_bytes - effective;
        if std::env::var_os("CKPT_OPT_DEBUG").is_some() {
            let pk = after.sim.peak_step;
            let node = after.sim.schedule.order[pk];
            eprintln!(
                "attempt {attempt}: solver peak {} at step {}, simulated {} at step {pk} ({} {}), excess {excess}",
                plan.peak, plan.peak_step, after.sim.peak_live, after.graph.node(node).name, after.class.phase(node)
            );
            for &n in after.graph.nodes() {
                if after.class.phase(n) == ckpt_passes::Phase::Recompute {
                    let st = after.sim.schedule.step_of(n).unwrap_or(0);
                    let first = after.graph.node(n).output_tensors().flat_map(|t| after.graph.tensor(t).consumers().to_vec()).filter_map(|c| after.sim.schedule.step_of(c)).min();
                    eprintln!("   clone {} at step {st}, first consumer at {first:?}", after.graph.node(n).name);
                }
            }
            for (t, b) in after.sim.live_tensors_at(pk).iter().take(8) {
                eprintln!("   live {} {b} {}", after.graph.tensor(*t).name, after.class.kind(*t).name());
            }
        }
        if excess >= arena_ceiling {
            break;
        }
        arena_ceiling -= excess;
    }
    let lowest = lowest_reachable(&before, &cands);
    let message = format!(
        "no plan the simulator accepts was found: the lowest arena peak recompute can reach is {} (total {})",
        human(lowest),
        human(lowest + fixed)
    );
    Ok(Outcome::CannotFit { before, message, lowest_total: lowest + fixed })
}

/// `model.onnx` → `model.ckpt.onnx` beside it.
pub fn default_output(model: &Path) -> PathBuf {
    let stem = model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
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
    let node = a.sim.schedule.order.get(a.sim.peak_step).copied();
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
                "bytes_saved": c.bytes,
                "nodes_recomputed": c.nodes.iter().map(|&n| g.node(n).name.clone()).collect::<Vec<_>>(),
                "flops_added": c.cost,
                "dropped_from_step": c.free_from,
                "rematerialised_at_step": r.plan.remat_at.get(i).copied().flatten(),
                "first_backward_use_step": c.needed_at,
                "boundary": why,
                "why": format!("dropping frees {} from step {} to step {}, under the ceiling at the high-water mark", human(c.bytes), c.free_from, c.needed_at),
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

/// Serialized model for hashing and validation.
pub fn model_bytes(g: &Graph) -> Vec<u8> {
    export(g).encode_to_vec()
}

pub fn elapsed_ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
