//! What a recompute costs, as the planner ranks it (`--cost flops|profile`).
//!
//! - `flops` (the default): the op registry's FLOP count of every node a recompute clones
//!   ([`ckpt_passes::recompute::candidates`] fills it in).
//! - `profile`: each node's kernel time, measured by ONNX Runtime's profiler on the graph being
//!   planned, under the deployment profile's session: one warm-up run, then the median over
//!   the timed runs of one session, in nanoseconds ([`NodeCosts`]). A node ORT never ran
//!   (folded, removed, fused away) costs 0.
//!
//! The solver sees numbers only: [`apply`] ([`ckpt_planner::Costs::apply`]) replaces each candidate's cost with the sum over
//! the nodes it clones (a moved node runs once and is free), at least 1, as the FLOP model
//! does. A node shared by several chains counts once per chain in the model and once in
//! [`added_ns`], which sums over the nodes the written patch clones.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use ckpt_ir::{Graph, Message, NodeId};
use ckpt_passes::recompute::{rewrite, Candidates};
use ckpt_runtime::{HostTensor, Model, NodeEvent, SessionConfig};
use ckpt_solver::Plan;

use crate::error::ValidateError;
use crate::progress::{report, Stage};

type Result<T, E = ValidateError> = std::result::Result<T, E>;

/// How recompute is costed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CostKind {
    /// The op registry's FLOP count.
    #[default]
    Flops,
    /// ORT's measured kernel time per node.
    Profile,
}

/// Measured kernel time per node of one graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCosts {
    /// Nanoseconds, indexed by `NodeId::index` (0: ORT did not run the node).
    pub ns: Vec<u64>,
    /// Timed runs the medians are over (the warm-up run excluded).
    pub runs: usize,
    /// Nodes of the graph ORT's profile has a kernel time for.
    pub measured_nodes: usize,
    /// Nodes of the graph ORT did not run, by name (costed 0).
    pub unmeasured_nodes: Vec<String>,
    /// Execution providers that ran the measured nodes.
    pub providers: Vec<String>,
}

impl NodeCosts {
    /// The sum of every node's median: one step's kernel time.
    pub fn step_ns(&self) -> u64 {
        self.ns.iter().sum()
    }

    /// The cost of one node.
    pub fn of(&self, n: NodeId) -> u64 {
        self.ns.get(n.index()).copied().unwrap_or(0)
    }

    /// The planner's costs: every measured node's nanoseconds, and one step's.
    pub fn planner_costs(&self) -> ckpt_planner::Costs {
        ckpt_planner::Costs {
            per_node: self
                .ns
                .iter()
                .enumerate()
                .filter(|(_, &ns)| ns > 0)
                .map(|(i, &ns)| (NodeId::from_index(i), ns))
                .collect(),
            step: self.step_ns(),
        }
    }
}

/// Per-node medians from a profile of `warmup + runs` runs of `graph` (events in start
/// order, so a node's first `warmup` events belong to the warm-up runs). An event is matched
/// to its node by ORT's node index (the node's position in the exported file, which is the
/// graph's order), else by name.
pub fn node_costs(graph: &Graph, events: &[NodeEvent], warmup: usize) -> NodeCosts {
    let order = graph.nodes();
    let by_name: BTreeMap<&str, NodeId> = order
        .iter()
        .map(|&n| (graph.node(n).name.as_str(), n))
        .filter(|(name, _)| !name.is_empty())
        .collect();
    let mut durations: BTreeMap<NodeId, Vec<u64>> = BTreeMap::new();
    let mut providers: Vec<String> = Vec::new();
    for e in events {
        let by_index = e
            .node_index
            .and_then(|i| order.get(i).copied())
            .filter(|&n| graph.node(n).name == e.node_name || e.node_name.is_empty());
        let Some(n) = by_index.or_else(|| by_name.get(e.node_name.as_str()).copied()) else {
            continue; // a node ORT created (a fused or inserted kernel)
        };
        durations.entry(n).or_default().push(e.dur_us);
        if !providers.contains(&e.provider) {
            providers.push(e.provider.clone());
        }
    }
    let mut ns = vec![0u64; graph.node_bound()];
    let mut runs = 0;
    for (n, d) in &mut durations {
        let timed = if d.len() > warmup {
            &mut d[warmup..]
        } else {
            &mut d[..]
        };
        timed.sort_unstable();
        runs = runs.max(timed.len());
        ns[n.index()] = median_us(timed) * 1000;
    }
    let unmeasured_nodes = order
        .iter()
        .filter(|n| !durations.contains_key(n))
        .map(|&n| graph.node(n).name.clone())
        .collect();
    NodeCosts {
        ns,
        runs,
        measured_nodes: durations.len(),
        unmeasured_nodes,
        providers,
    }
}

/// The lower median of sorted microseconds.
fn median_us(sorted: &[u64]) -> u64 {
    if sorted.is_empty() {
        0
    } else {
        sorted[(sorted.len() - 1) / 2]
    }
}

/// Profile `graph` on ORT under `cfg`: one warm-up run and `runs` timed runs on one session.
pub fn profile_node_costs(
    graph: &Graph,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
    runs: usize,
) -> Result<NodeCosts> {
    let bytes = crate::paired::ort_ready(&ckpt_ir::export(graph), graph.dir()).encode_to_vec();
    let model = Model::new("profiled", &bytes).in_dir(graph.dir());
    let events = ckpt_runtime::profile_runs(model, inputs, cfg, runs.max(1) + 1)
        .map_err(ValidateError::Profile)?;
    let costs = node_costs(graph, &events, 1);
    if costs.measured_nodes == 0 {
        return Err(ValidateError::ProfileNamesNoNode {
            graph: graph
                .dir()
                .map_or_else(|| "the graph".to_string(), |d| d.display().to_string()),
            nodes: graph.node_count(),
        });
    }
    Ok(costs)
}

/// Whether `--cost profile` can run `before`'s graph: plain ONNX Runtime cannot run one that
/// needs the training runtime.
pub fn profilable(before: &ckpt_planner::Analysis) -> Result<()> {
    if crate::training::needs_training_runtime(before.graph.model()) {
        return Err(ValidateError::ProfileNeedsTrainingRuntime);
    }
    Ok(())
}

/// `--cost profile`: each node's median kernel time on ONNX Runtime under `profile`, over
/// `runs` timed runs, on inputs made as validation makes them (`seed`, `overrides`). Callers
/// check [`profilable`] first (a refusal there is a usage error; a failure here is ORT's).
pub fn measure(
    before: &ckpt_planner::Analysis,
    bindings: &ckpt_ir::Bindings,
    seed: u64,
    overrides: &crate::inputs::InputOverrides,
    runs: usize,
    profile: &ckpt_ir::Profile,
) -> Result<NodeCosts> {
    report(Stage::NodeCosts);
    let params: Vec<_> = before
        .class
        .of_kind(ckpt_passes::TensorKind::Parameter)
        .collect();
    let (inputs, _) =
        crate::inputs::make_inputs(&before.graph, bindings, seed, overrides, &params)?;
    profile_node_costs(
        &before.graph,
        &inputs,
        &crate::memory::session_config(profile),
        runs,
    )
}

/// Cost every candidate by `costs`: the sum over the nodes its recompute clones, at least 1.
pub fn apply(cands: &mut Candidates, costs: &NodeCosts) {
    costs.planner_costs().apply(cands);
}

/// The kernel time the rewrite of `plan` adds: the measured time of every node its patch
/// clones (each once).
pub fn added_ns(graph: &Graph, cands: &Candidates, plan: &Plan, costs: &NodeCosts) -> u64 {
    patch_ns(&rewrite(graph, cands, plan, "cost"), costs)
}

/// The measured time of every node `patch` clones (moves add none).
pub fn patch_ns(patch: &ckpt_ir::Patch, costs: &NodeCosts) -> u64 {
    costs.planner_costs().of_patch(patch)
}

/// What the receipt says of a measured cost model.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct MeasuredCost {
    /// Timed runs each node's median is over (one warm-up run before them).
    pub runs: usize,
    pub providers: Vec<String>,
    pub measured_nodes: usize,
    /// Nodes ORT did not run (folded or removed at the profile's level), costed 0.
    pub unmeasured_nodes: Vec<String>,
    /// The sum of the nodes' median kernel times: one step, in milliseconds.
    pub step_kernel_ms: f64,
    /// The kernel time the rewrite adds, predicted from the medians, in milliseconds.
    pub predicted_added_ms: f64,
    /// `--validate`: the rewritten graph's p50 step time less the original's, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_added_ms: Option<f64>,
}

impl MeasuredCost {
    /// The receipt's record of `costs` and the `added` nanoseconds of a plan.
    pub fn new(costs: &NodeCosts, added: u64) -> MeasuredCost {
        MeasuredCost {
            runs: costs.runs,
            providers: costs.providers.clone(),
            measured_nodes: costs.measured_nodes,
            unmeasured_nodes: costs.unmeasured_nodes.clone(),
            step_kernel_ms: costs.step_ns() as f64 / 1e6,
            predicted_added_ms: added as f64 / 1e6,
            measured_added_ms: None,
        }
    }
}
