//! Making the receipt: [`receipt`] from the job and the planner's outcome, then
//! [`Receipt::record_validation`] and the written output (the main job's) add theirs; and each
//! typed part from the analysis it states ([`Ledger::of`], [`Trace::of`], [`Solver::of`], ...).
//!
//! Rules: an outcome that did not rewrite (already fits, or cannot fit) states one analysis on
//! both sides of every before/after pair; a rewrite states the analyses of the original and of
//! the rewritten graph.

use ckpt_ir::Bindings;
use ckpt_passes::TensorKind;
use ckpt_planner::{IlpReport, IlpRound as PlannerRound};

use super::{
    node_name, ArenaBinding, BeforeAfter, Excluded, FileHash, Ilp, IlpRound, Ledger, LiveTensor,
    NamedBytes, Peak, PhasePeak, RandomOpSeeds, Receipt, Segment, Solver, Status, Tool, Trace,
};
use crate::job::{Ceiling, Job};
use crate::pipeline::PlannedJob;
use crate::size::human;
use ckpt_planner::{step_flops, Analysis, Outcome, Rewritten};
use ckpt_validate::measured_cost::{added_ns, CostKind, MeasuredCost, NodeCosts};
use ckpt_validate::memory::MemoryCheck;
use ckpt_validate::paired::Validation;

/// What the receipt states of a job besides its outcome.
pub struct JobRecord<'a> {
    pub job: &'a Job,
    /// The ceiling as given (`job.ceiling` is its bytes).
    pub ceiling: Ceiling,
    /// The command line, as given.
    pub command_line: Vec<String>,
    /// The seed of inputs and random ops.
    pub seed: u64,
    pub model: FileHash,
    /// The input model's external data files, hashed.
    pub model_data: Vec<FileHash>,
    pub random_op_seeds: RandomOpSeeds,
    /// `--cost profile`: the measured node times the plan was costed with.
    pub costs: Option<&'a NodeCosts>,
}

/// The receipt of a job that ended as `outcome`: its status (`already_fits`,
/// `ceiling_cannot_be_met` or `rewritten`) and everything the plan says; validation, the
/// written output and the time taken are added after.
pub fn receipt(r: &JobRecord, planned: &PlannedJob) -> Receipt {
    let job = r.job;
    let before = &planned.before;
    let profile = &job.analysis.profile;
    let bindings = &job.analysis.bindings;
    let mut receipt = Receipt {
        tool: Tool {
            name: "ckpt-opt".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        command_line: r.command_line.clone(),
        seed: r.seed,
        model: r.model.clone(),
        model_data: r.model_data.clone(),
        bindings: bindings.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        input_shapes: input_shapes(&before.graph, bindings),
        ceiling: r.ceiling.to_string(),
        ceiling_bytes: job.ceiling,
        reserve_percent: job.reserve_pct,
        profile: ckpt_planner::recorded_metadata(profile, job.ceiling, &before.ledger)
            .into_iter()
            .collect(),
        profile_description: job.recorded_profile(before.ledger.fixed_bytes).describe(),
        session_config: profile.session_config.clone(),
        rng_policy: ckpt_validate::paired::RNG_POLICY.into(),
        random_op_seeds: r.random_op_seeds,
        random_ops_shifted: Vec::new(),
        status: Status::AlreadyFits,
        reason: None,
        diagnosis: None,
        lowest_reachable_total_bytes: None,
        output: None,
        output_data: None,
        output_load: None,
        predicted_peak_bytes: None,
        predicted_device_arena_bytes: None,
        predicted_in_use_bytes: None,
        predicted_arena_peak_bytes: None,
        predicted_default_arena_peak_bytes: None,
        arena_binding: None,
        ledger: BeforeAfter {
            before: Ledger::of(&before.ledger),
            after: Ledger::of(&before.ledger),
        },
        trace: None,
        added_flops: 0,
        model_added_flops: None,
        nodes_cloned: 0,
        nodes_moved: 0,
        step_flops: None,
        added_flops_percent: None,
        cost_model: if r.costs.is_some() {
            CostKind::Profile
        } else {
            CostKind::Flops
        },
        measured_cost: r.costs.map(|c| MeasuredCost::new(c, 0)),
        segments: Vec::new(),
        candidates: None,
        excluded: Vec::new(),
        solver: None,
        loss_head: None,
        tied_gradients: None,
        patch: None,
        validation: None,
        memory: None,
        ort: None,
        seconds: 0.0,
    };
    match &planned.outcome {
        Outcome::AlreadyFits => receipt.record_peaks(before, before, profile),
        Outcome::CannotFit(diagnosis) => {
            receipt.status = Status::CeilingCannotBeMet;
            receipt.lowest_reachable_total_bytes = Some(diagnosis.lowest_reachable_total_bytes);
            receipt.diagnosis = Some(diagnosis.clone());
            receipt.record_peaks(before, before, profile);
        }
        Outcome::Rewritten(rw) => {
            receipt.record_rewrite(before, rw, profile, bindings);
            if let Some(c) = r.costs {
                receipt.restate_measured_cost(before, rw, c, bindings);
            }
        }
    }
    receipt
}

impl Receipt {
    /// The predicted peaks of `a` (before) and `b` (after) under `profile`.
    fn record_peaks(&mut self, a: &Analysis, b: &Analysis, profile: &ckpt_ir::Profile) {
        let pair = |f: fn(&Analysis) -> u64| {
            Some(BeforeAfter {
                before: f(a),
                after: f(b),
            })
        };
        self.predicted_peak_bytes = pair(|x| x.ledger.total_bytes);
        self.predicted_device_arena_bytes = pair(|x| x.device.arena_bytes);
        self.predicted_in_use_bytes = pair(|x| x.device.uncapped.in_use_peak);
        self.predicted_arena_peak_bytes = pair(|x| x.sim.peak_live);
        self.predicted_default_arena_peak_bytes = pair(|x| x.sim.arena_peak());
        // A refusal or a graph that already fits reports one analysis on both sides.
        let before = ArenaBinding::of(a, profile);
        let after = if std::ptr::eq(a, b) {
            before.clone()
        } else {
            ArenaBinding::of(b, profile)
        };
        self.arena_binding = Some(BeforeAfter { before, after });
    }

    /// A rewrite: its peaks, ledgers and traces before and after, what it adds, its segments,
    /// the excluded activations, how it was found and its patch.
    fn record_rewrite(
        &mut self,
        before: &Analysis,
        r: &Rewritten,
        profile: &ckpt_ir::Profile,
        bindings: &Bindings,
    ) {
        let step = step_flops(before, bindings).max(1);
        self.status = Status::Rewritten;
        self.record_peaks(before, &r.after, profile);
        self.ledger = BeforeAfter {
            before: Ledger::of(&before.ledger),
            after: Ledger::of(&r.after.ledger),
        };
        self.trace = Some(BeforeAfter {
            before: Trace::of(before),
            after: Trace::of(&r.after),
        });
        self.added_flops = r.counts.added_flops;
        self.model_added_flops = Some(r.model_cost());
        self.nodes_cloned = r.counts.cloned;
        self.nodes_moved = r.counts.moved;
        self.step_flops = Some(step);
        self.added_flops_percent = Some(100.0 * r.counts.added_flops as f64 / step as f64);
        self.segments = Segment::of_plan(before, r);
        self.candidates = Some(r.candidate_count());
        self.excluded = Excluded::of_plan(before, r);
        self.solver = Some(Solver::of(r));
        self.loss_head = r.loss_head.clone();
        self.tied_gradients = r.tied_gradients().cloned();
        self.patch = Some(r.patch_text.clone());
    }

    /// `--cost profile`: the plan's cost in milliseconds, and each segment's FLOPs (the
    /// planner's per-candidate cost is then nanoseconds) beside its milliseconds.
    fn restate_measured_cost(
        &mut self,
        before: &Analysis,
        r: &Rewritten,
        costs: &NodeCosts,
        bindings: &Bindings,
    ) {
        self.measured_cost = Some(MeasuredCost::new(
            costs,
            added_ns(&before.graph, &r.cands, &r.plan, costs),
        ));
        let mut model_flops = 0u64;
        for (segment, c) in self.segments.iter_mut().zip(chosen(r)) {
            let flops: u64 = c
                .nodes
                .iter()
                .filter(|n| !c.moved.contains(n))
                .filter_map(|&n| {
                    ckpt_ir::ops::flops(&before.graph, n, &before.types, bindings).ok()
                })
                .sum();
            model_flops += flops;
            segment.flops_added = flops;
            segment.ms_added = Some(c.model.cost as f64 / 1e6);
        }
        self.model_added_flops = Some(model_flops);
    }

    /// A validation that ran: its values and its memory check, the runtime that ran it, and
    /// with `--cost profile` the measured p50 step-time increase beside the predicted one.
    pub fn record_validation(&mut self, v: &Validation, m: MemoryCheck) {
        self.ort = Some(v.ort.clone());
        self.validation = Some(v.clone());
        self.memory = Some(m);
        self.record_measured_added();
    }

    /// With `--validate` and `--cost profile`: the measured p50 step-time increase.
    fn record_measured_added(&mut self) {
        let Some(v) = &self.validation else {
            return;
        };
        let (a, b) = (v.original.p50_ms, v.rewritten.p50_ms);
        if let (true, Some(m)) = (a.is_finite() && b.is_finite(), self.measured_cost.as_mut()) {
            m.measured_added_ms = Some(b - a);
        }
    }

    /// Nothing was published (validation failed): no output, no data files, no shifted seeds.
    pub fn withdraw_output(&mut self) {
        self.output = None;
        self.output_data = None;
        self.output_load = None;
        self.random_ops_shifted.clear();
    }
}

/// Graph input shapes under the bindings (`None`: a dim left symbolic).
fn input_shapes(
    g: &ckpt_ir::Graph,
    b: &Bindings,
) -> std::collections::BTreeMap<String, Vec<Option<u64>>> {
    g.inputs()
        .iter()
        .filter(|&&t| !g.tensor(t).is_initializer())
        .filter_map(|&t| {
            let tensor = g.tensor(t);
            let shape = tensor.shape.as_ref()?;
            Some((
                tensor.name.clone(),
                shape.dims().iter().map(|d| d.eval(b).ok()).collect(),
            ))
        })
        .collect()
}

/// The candidates the plan recomputes, in candidate order.
fn chosen(r: &Rewritten) -> impl Iterator<Item = &ckpt_passes::recompute::Candidate> {
    r.cands
        .list
        .iter()
        .enumerate()
        .filter(|(i, _)| r.plan.recompute.get(*i).copied().unwrap_or(false))
        .map(|(_, c)| c)
}

impl Ledger {
    /// The ledger's lines as the receipt states them.
    pub fn of(l: &ckpt_passes::ledger::Ledger) -> Ledger {
        Ledger {
            parameters_count: l.parameters_count,
            parameters_bytes: l.parameters_bytes,
            gradients_bytes: l.gradients_bytes,
            optimizer_state_bytes: l.optimizer_state_bytes,
            data_bytes: l.data_bytes,
            saved_activations_bytes: l.saved_activations_bytes,
            saved_activations_count: l.saved_activations_count,
            largest_saved_activations: l
                .largest_saved
                .iter()
                .map(|(name, bytes)| NamedBytes {
                    name: name.clone(),
                    bytes: *bytes,
                })
                .collect(),
            transient_at_peak_bytes: l.transient_at_peak_bytes,
            arena_peak_bytes: l.arena_peak_bytes,
            device_arena_bytes: l.device_arena_bytes,
            outputs_bytes: l.outputs_bytes,
            initializer_bytes: l.initializer_bytes,
            load_bytes: l.load_bytes,
            caller_bytes: l.caller_bytes(),
            arena_cap_bytes: l.arena_cap_bytes(),
            fixed_bytes: l.fixed_bytes,
            total_bytes: l.total_bytes,
            dominant: l.dominant().into(),
        }
    }
}

impl Trace {
    /// Per-phase peaks and the high-water mark of `a`'s simulated run.
    pub fn of(a: &Analysis) -> Trace {
        let name = |n: ckpt_ir::NodeId| a.graph.node(n).name.clone();
        let phases = a
            .sim
            .phase_peaks(&a.class)
            .iter()
            .map(|(p, pk)| PhasePeak {
                phase: p.name().into(),
                peak_bytes: pk.bytes,
                step: pk.step,
                node: pk.node.map(name),
            })
            .collect();
        let node = ckpt_passes::memory::peak_node(&a.sim);
        let largest_live = a
            .sim
            .live_tensors_at(a.sim.peak_step)
            .iter()
            .take(5)
            .map(|(t, b)| LiveTensor {
                tensor: a.graph.tensor(*t).name.clone(),
                bytes: *b,
                kind: a.class.kind(*t).name().into(),
            })
            .collect();
        Trace {
            phases,
            peak: Peak {
                bytes: a.sim.peak_live,
                step: a.sim.peak_step,
                node: node.map(name),
                op: node.map(|n| a.graph.node(n).op_label()),
                phase: node.map(|n| a.class.phase(n).name().into()),
                largest_live,
            },
            default_arena_peak_bytes: a.sim.arena_peak(),
        }
    }
}

impl Segment {
    /// The plan's recomputes, pass by pass ([`Rewritten::passes`]), each pass's in candidate
    /// order.
    pub fn of_plan(before: &Analysis, r: &Rewritten) -> Vec<Segment> {
        let mut planned = before;
        let mut segments = Vec::new();
        for (pass, p) in r.passes().into_iter().enumerate() {
            segments.extend(Segment::of_pass(planned, p, pass));
            planned = &p.after;
        }
        segments
    }

    /// One pass's recomputes, in candidate order: `p` planned `before` (a variant of it where
    /// `p` says so).
    fn of_pass(before: &Analysis, p: &Rewritten, pass: usize) -> Vec<Segment> {
        let r = p;
        let g = r.planned(&before.graph);
        r.cands
            .list
            .iter()
            .enumerate()
            .filter(|(i, _)| r.plan.recompute.get(*i).copied().unwrap_or(false))
            .map(|(i, c)| {
                let name = |n: &ckpt_ir::NodeId| g.node(*n).name.clone();
                Segment {
                    pass,
                    activations_dropped: c.saved.iter().map(|&t| g.tensor(t).name.clone()).collect(),
                    bytes_saved: c.model.bytes,
                    nodes_recomputed: c
                        .nodes
                        .iter()
                        .filter(|n| !c.moved.contains(n))
                        .map(name)
                        .collect(),
                    nodes_moved: c.moved.iter().map(name).collect(),
                    flops_added: c.model.cost,
                    dropped_from_step: c.model.free_from,
                    rematerialised_at_step: r.plan.remat_at.get(i).copied().flatten(),
                    next_use_step: c.model.needed_at,
                    boundary: boundary(before, r, c),
                    why: format!(
                        "dropping frees {} from step {} to step {}, under the ceiling at the high-water mark",
                        human(c.model.bytes),
                        c.model.free_from,
                        c.model.needed_at
                    ),
                    ms_added: None,
                }
            })
            .collect()
    }
}

/// The values a recompute reads that stay, sorted, each with why it stays.
fn boundary(
    before: &Analysis,
    r: &Rewritten,
    c: &ckpt_passes::recompute::Candidate,
) -> Vec<String> {
    let g = r.planned(&before.graph);
    let mut names: Vec<String> = c
        .nodes
        .iter()
        .flat_map(|&n| g.node(n).input_tensors().collect::<Vec<_>>())
        .filter(|t| !c.values.contains(t))
        .map(|t| g.tensor(t).name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
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
                    } else if before.class.kind(t) == TensorKind::SavedActivation {
                        "kept saved activation (checkpoint)".to_string()
                    } else {
                        "kept".to_string()
                    }
                }
            };
            format!("{}: {reason}", tensor.name)
        })
        .collect()
}

impl Excluded {
    /// The activations the op policy keeps, with the reason.
    pub fn of_plan(before: &Analysis, r: &Rewritten) -> Vec<Excluded> {
        let g = r.planned(&before.graph);
        r.cands
            .excluded
            .iter()
            .map(|e| Excluded {
                tensor: g.tensor(e.tensor).name.clone(),
                node: g.node(e.node).name.clone(),
                op: e.op.clone(),
                reason: e.reason.clone(),
            })
            .collect()
    }
}

impl Solver {
    /// How `r`'s plan was found.
    pub fn of(r: &Rewritten) -> Solver {
        let info = &r.plan.info;
        Solver {
            method: info.method,
            label: r.method_label(),
            status: info.status,
            objective: info.objective,
            bound: info.bound,
            gap: info.gap,
            seconds: info.wall.as_secs_f64(),
            fallback: info.fallback.clone(),
            attempts: r.solve_attempts,
            time_limit_hit: r.time_limit_hit,
            arena_ceiling_bytes: r.arena_ceiling,
            found_at_ceiling_bytes: r.found_at_ceiling_bytes,
            rungs_planned: r.rungs_planned,
            planned_again_from_bytes: r.earlier.as_ref().map(|e| e.after.ledger.total_bytes),
            planned_again_at_ceiling_bytes: r.earlier_ceiling_bytes,
            ilp: Ilp::of(&r.ilp),
        }
    }
}

impl Ilp {
    /// What the planner's ILP rounds did.
    pub fn of(r: &IlpReport) -> Ilp {
        let rounds = r
            .rounds
            .iter()
            .map(|round| match round {
                PlannerRound::Unproven {
                    round,
                    status,
                    seconds,
                } => IlpRound::Unproven {
                    round: *round,
                    status: *status,
                    seconds: *seconds,
                },
                PlannerRound::NoPlan { round, error } => IlpRound::NoPlan {
                    round: *round,
                    error: error.clone(),
                },
                PlannerRound::Simulated {
                    round,
                    status,
                    objective,
                    seconds,
                    recomputed,
                    linear_model_peak_bytes,
                    simulated_peak_bytes,
                } => IlpRound::Simulated {
                    round: *round,
                    status: *status,
                    objective: *objective,
                    seconds: *seconds,
                    recomputed: *recomputed,
                    linear_model_peak_bytes: *linear_model_peak_bytes,
                    simulated_peak_bytes: *simulated_peak_bytes,
                },
            })
            .collect();
        Ilp {
            rounds,
            used: r.used,
        }
    }
}

impl ArenaBinding {
    /// Where `a`'s arena need, found under `profile`, is decided; `None` where no step's
    /// request decides it.
    pub fn of(a: &Analysis, profile: &ckpt_ir::Profile) -> Option<ArenaBinding> {
        let b = ckpt_passes::device::binding(&a.sim, profile, a.device.arena_bytes)?;
        Some(ArenaBinding {
            arena_bytes: b.arena_bytes,
            runs_in_bytes: b.runs_in_bytes,
            step: b.step,
            node: node_name(a, b.step),
            run: b.run,
            requested_bytes: b.requested,
            free_bytes: b.free,
            largest_free_bytes: b.largest_free,
            layout_bound: b.free >= b.requested,
        })
    }
}
