//! Phases of nodes and kinds of tensors, from data flow alone (never names of nodes or
//! file position: ORT artifacts interleave forward and backward nodes in the file).
//!
//! - **loss**: `--loss NAME`, else the first graph output that is a floating-point scalar.
//! - **forward**: the loss's producer and all its ancestors; within it, **loss** phase is
//!   the tail after the model proper: forward nodes downstream of a parameter-consuming
//!   node and upstream of none.
//! - **optimizer**: the ops the registry marks as optimizer steps (accumulators, optimizers,
//!   ZeroGradient: they write parameter or gradient buffers) and everything downstream of
//!   them.
//! - **backward**: every other node.
//!
//! Tensor kinds: gradients are graph outputs computed in backward or values fed to an
//! accumulator; a parameter is the graph input or initializer a gradient belongs to
//! (paired by the exporters' `<param>_grad` naming, else by a unique shape match among
//! forward-consumed float inputs); accumulator/optimizer buffers are optimizer state;
//! other graph inputs are data; activations saved for backward are produced in forward
//! and read in backward.

use std::collections::VecDeque;
use std::fmt;

use ckpt_ir::ops::{optimizer_step, OptimizerStep};
use ckpt_ir::{Graph, NodeId, NodeOrigin, TensorId, TensorSource};

/// Which part of the training step a node belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Forward,
    Loss,
    Backward,
    Optimizer,
    Recompute,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Forward,
        Phase::Loss,
        Phase::Backward,
        Phase::Optimizer,
        Phase::Recompute,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Loss => "loss",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::Recompute => "recompute",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a tensor is, for the ledger.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// A graph input fed with data (tokens, labels, features).
    Data,
    Parameter,
    Gradient,
    /// Optimizer moments, gradient accumulation buffers.
    OptimizerState,
    /// An initializer that is not a parameter.
    Constant,
    /// Produced in forward, read in backward: kept alive across the step unless recomputed.
    SavedActivation,
    /// Any other computed value.
    Transient,
}

impl TensorKind {
    pub fn name(self) -> &'static str {
        match self {
            TensorKind::Data => "data",
            TensorKind::Parameter => "parameter",
            TensorKind::Gradient => "gradient",
            TensorKind::OptimizerState => "optimizer state",
            TensorKind::Constant => "constant",
            TensorKind::SavedActivation => "saved activation",
            TensorKind::Transient => "transient",
        }
    }
}

/// The result of [`classify`].
#[derive(Clone, Debug)]
pub struct Classification {
    pub loss: TensorId,
    /// Indexed by `NodeId::index`.
    pub phase: Vec<Phase>,
    /// Indexed by `TensorId::index`.
    pub kind: Vec<TensorKind>,
    /// (parameter, its gradient), in graph input order.
    pub param_grads: Vec<(TensorId, TensorId)>,
}

impl Classification {
    pub fn phase(&self, n: NodeId) -> Phase {
        self.phase[n.index()]
    }

    pub fn kind(&self, t: TensorId) -> TensorKind {
        self.kind[t.index()]
    }

    /// Tensors of one kind, in id order.
    pub fn of_kind(&self, k: TensorKind) -> impl Iterator<Item = TensorId> + '_ {
        self.kind
            .iter()
            .enumerate()
            .filter(move |(_, &x)| x == k)
            .map(|(i, _)| TensorId::from_index(i))
    }
}

/// Why phases could not be assigned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassifyError {
    #[error("no loss found: no graph output is a floating-point scalar; name it with --loss (outputs: {outputs})")]
    NoLoss { outputs: String },
    #[error("--loss `{0}` is not a graph output")]
    LossNotOutput(String),
}

/// Find the loss: the named output, or the first floating-point scalar output.
pub fn find_loss(graph: &Graph, name: Option<&str>) -> Result<TensorId, ClassifyError> {
    if let Some(name) = name {
        return graph
            .outputs()
            .iter()
            .copied()
            .find(|&t| graph.tensor(t).name == name)
            .ok_or_else(|| ClassifyError::LossNotOutput(name.to_string()));
    }
    graph
        .outputs()
        .iter()
        .copied()
        .find(|&t| {
            let tensor = graph.tensor(t);
            let float = tensor.dtype.is_some_and(|d| d.is_float());
            let scalar = tensor
                .shape
                .as_ref()
                .is_some_and(|s| s.dims().iter().all(|d| d.known() == Some(1)));
            float && scalar
        })
        .ok_or_else(|| ClassifyError::NoLoss {
            outputs: graph
                .outputs()
                .iter()
                .map(|&t| graph.tensor(t).name.clone())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn walk(graph: &Graph, start: impl IntoIterator<Item = NodeId>, up: bool) -> Vec<bool> {
    let mut seen = vec![false; graph.node_bound()];
    let mut queue: VecDeque<NodeId> = start.into_iter().collect();
    for &n in &queue {
        seen[n.index()] = true;
    }
    while let Some(n) = queue.pop_front() {
        let next = if up {
            graph.predecessors(n)
        } else {
            graph.successors(n)
        };
        for m in next {
            if !seen[m.index()] {
                seen[m.index()] = true;
                queue.push_back(m);
            }
        }
    }
    seen
}

/// Classify nodes and tensors. `loss` names the loss output (default: first float scalar).
pub fn classify(graph: &Graph, loss: Option<&str>) -> Result<Classification, ClassifyError> {
    let loss = find_loss(graph, loss)?;
    let forward = match graph.tensor(loss).producer() {
        Some(p) => walk(graph, [p], true),
        None => vec![false; graph.node_bound()],
    };
    let opt_roots: Vec<NodeId> = graph
        .nodes()
        .iter()
        .copied()
        .filter(|&n| optimizer_step(graph, n).is_some())
        .collect();
    let mut phase = node_phases(graph, &forward, &opt_roots);
    let (grads, buffers) = find_gradients(graph, loss, &phase, &opt_roots);
    let param_grads = pair_parameters(graph, &forward, &grads, &buffers);
    let kind = tensor_kinds(graph, &phase, &buffers, &param_grads, &grads);
    mark_loss_phase(graph, &forward, &param_grads, &mut phase);
    Ok(Classification {
        loss,
        phase,
        kind,
        param_grads,
    })
}

/// Each node's phase before the loss tail is told apart: recompute clones, the loss's
/// ancestors (forward), what the optimizer steps reach (optimizer), backward for the rest.
fn node_phases(graph: &Graph, forward: &[bool], opt_roots: &[NodeId]) -> Vec<Phase> {
    let optimizer = walk(graph, opt_roots.iter().copied(), false);
    let mut phase = vec![Phase::Backward; graph.node_bound()];
    for &n in graph.nodes() {
        phase[n.index()] = if matches!(graph.node(n).origin, NodeOrigin::Recompute { .. }) {
            Phase::Recompute
        } else if forward[n.index()] {
            Phase::Forward
        } else if optimizer[n.index()] {
            Phase::Optimizer
        } else {
            Phase::Backward
        };
    }
    phase
}

/// The gradients (backward-computed graph outputs but the loss, and the values fed to
/// accumulators) and the optimizer state (accumulators' buffers, and every graph-input
/// operand of an optimizer op).
fn find_gradients(
    graph: &Graph,
    loss: TensorId,
    phase: &[Phase],
    opt_roots: &[NodeId],
) -> (Vec<TensorId>, Vec<TensorId>) {
    let mut grads: Vec<TensorId> = Vec::new();
    for &t in graph.outputs() {
        if t != loss
            && graph
                .tensor(t)
                .producer()
                .is_some_and(|p| phase[p.index()] == Phase::Backward)
        {
            grads.push(t);
        }
    }
    let mut buffers: Vec<TensorId> = Vec::new();
    for &n in opt_roots {
        let node = graph.node(n);
        if optimizer_step(graph, n) == Some(OptimizerStep::Accumulate) {
            if let Some(Some(buf)) = node.inputs.first() {
                buffers.push(*buf);
            }
            if let Some(Some(g)) = node.inputs.get(1) {
                grads.push(*g);
            }
        } else {
            // Optimizer ops: every graph-input operand other than parameters is state.
            buffers.extend(
                node.input_tensors()
                    .filter(|&t| graph.tensor(t).is_graph_input()),
            );
        }
    }
    (grads, buffers)
}

/// `(parameter, gradient)` pairs, in graph-input order: by the exporters' `<param>_grad`
/// naming, else by a unique shape match among the float inputs and initializers read in
/// forward (optimizer state excluded).
fn pair_parameters(
    graph: &Graph,
    forward: &[bool],
    grads: &[TensorId],
    buffers: &[TensorId],
) -> Vec<(TensorId, TensorId)> {
    let consumed_in_forward = |t: TensorId| {
        graph
            .tensor(t)
            .consumers()
            .iter()
            .any(|c| forward[c.index()])
    };
    let candidates: Vec<TensorId> = graph
        .tensor_ids()
        .filter(|&t| {
            let tensor = graph.tensor(t);
            !matches!(tensor.source, TensorSource::Node(_))
                && tensor.dtype.is_some_and(|d| d.is_float())
                && !buffers.contains(&t)
        })
        .collect();
    let mut param_grads = Vec::new();
    let mut taken = vec![false; graph.tensor_count()];
    let mut unpaired = Vec::new();
    for &g in grads {
        let gname = &graph.tensor(g).name;
        let base = gname.split("_grad").next().unwrap_or(gname);
        match candidates
            .iter()
            .copied()
            .find(|&p| graph.tensor(p).name == base && !taken[p.index()])
        {
            Some(p) => {
                taken[p.index()] = true;
                param_grads.push((p, g));
            }
            None => unpaired.push(g),
        }
    }
    for g in unpaired {
        let shape = &graph.tensor(g).shape;
        let matches: Vec<TensorId> = candidates
            .iter()
            .copied()
            .filter(|&p| {
                !taken[p.index()]
                    && consumed_in_forward(p)
                    && shape.is_some()
                    && &graph.tensor(p).shape == shape
            })
            .collect();
        if matches.len() == 1 {
            taken[matches[0].index()] = true;
            param_grads.push((matches[0], g));
        }
    }
    let position = |t: TensorId| {
        graph
            .inputs()
            .iter()
            .position(|&i| i == t)
            .unwrap_or(usize::MAX)
    };
    param_grads.sort_by_key(|&(p, _)| (position(p), p));
    param_grads
}

/// Each tensor's kind: by its source and phases (data, constant, saved activation,
/// transient), then optimizer state, parameters and gradients over those.
fn tensor_kinds(
    graph: &Graph,
    phase: &[Phase],
    buffers: &[TensorId],
    param_grads: &[(TensorId, TensorId)],
    grads: &[TensorId],
) -> Vec<TensorKind> {
    let mut kind = vec![TensorKind::Transient; graph.tensor_count()];
    for t in graph.tensor_ids() {
        let tensor = graph.tensor(t);
        kind[t.index()] = match &tensor.source {
            TensorSource::GraphInput => TensorKind::Data,
            TensorSource::Initializer { .. } => TensorKind::Constant,
            TensorSource::Node(p) => {
                let fwd = matches!(phase[p.index()], Phase::Forward | Phase::Loss);
                let read_later = tensor.consumers().iter().any(|c| {
                    matches!(
                        phase[c.index()],
                        Phase::Backward | Phase::Optimizer | Phase::Recompute
                    )
                });
                if fwd && read_later {
                    TensorKind::SavedActivation
                } else {
                    TensorKind::Transient
                }
            }
        };
    }
    for &b in buffers {
        kind[b.index()] = TensorKind::OptimizerState;
    }
    for &(p, g) in param_grads {
        kind[p.index()] = TensorKind::Parameter;
        if !graph.tensor(g).is_graph_input() {
            kind[g.index()] = TensorKind::Gradient;
        }
    }
    for &g in grads {
        kind[g.index()] = TensorKind::Gradient;
    }
    kind
}

/// The loss phase: forward nodes downstream of a parameter consumer and upstream of none.
fn mark_loss_phase(
    graph: &Graph,
    forward: &[bool],
    param_grads: &[(TensorId, TensorId)],
    phase: &mut [Phase],
) {
    let param_consumers: Vec<NodeId> = param_grads
        .iter()
        .flat_map(|&(p, _)| graph.tensor(p).consumers().to_vec())
        .filter(|c| forward[c.index()])
        .collect();
    let below = walk(graph, param_consumers.iter().copied(), false);
    let above = walk(graph, param_consumers.iter().copied(), true);
    if !param_consumers.is_empty() {
        for &n in graph.nodes() {
            let i = n.index();
            if phase[i] == Phase::Forward && below[i] && !above[i] {
                phase[i] = Phase::Loss;
            }
        }
    }
}
