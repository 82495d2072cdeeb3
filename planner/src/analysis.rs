//! The analysis of one graph: types, phases, ORT's schedule, the simulation, the device need
//! under the deployment profile, and the ledger. A function of the graph and the options only.

use std::collections::BTreeSet;

use ckpt_ir::ops::{infer, TensorType, Types};
use ckpt_ir::{Bindings, Graph, Profile, TensorId};
use ckpt_passes::device::{device_need, DeviceNeed};
use ckpt_passes::ledger::{ledger, Ledger, Optimizer};
use ckpt_passes::memory::{schedule, simulate_resolved, Simulation};
use ckpt_passes::ort_view::{resolved_shapes, OrtShapes};
use ckpt_passes::{classify, Classification};

use crate::PlanError;

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

/// Everything the analysis of one graph yields.
pub struct Analysis {
    pub graph: Graph,
    pub class: Classification,
    pub sim: Simulation,
    /// The device need under the profile (the ledger's `device_arena_bytes`).
    pub device: DeviceNeed,
    pub ledger: Ledger,
    pub types: Types,
    /// ORT's view of the graph's shapes (what its planner compares), which a patched graph's
    /// is resolved from ([`ckpt_passes::ort_view::resolved_shapes_after`]).
    pub ort: OrtShapes,
}

/// Fill in dtypes and shapes by inference: where the file has none, and where the exporter
/// named a dim it could not relate to the inputs (`unk__12`), which inference expresses in the
/// inputs' symbols (`batch*seq`) so that bindings can evaluate it.
pub fn with_inferred_types(mut graph: Graph) -> Result<(Graph, Types), PlanError> {
    let types = infer(&graph).map_err(PlanError::Infer)?;
    let input_symbols: BTreeSet<String> = graph
        .inputs()
        .iter()
        .filter_map(|&t| graph.tensor(t).shape.as_ref())
        .flat_map(|s| s.symbols())
        .collect();
    let ids: Vec<_> = graph.tensor_ids().collect();
    for &t in &ids {
        check_declared(&graph, t, types.get(t))?;
    }
    ckpt_ir::check_type_constraints(&graph, &types).map_err(PlanError::TypeConstraint)?;
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

/// A type the file declares (value_info, graph outputs) must agree with what inference
/// derives from the ops: the same element type, the same rank, and the same size on every
/// axis where both are numbers. A model that declares smaller intermediates than its ops
/// produce would otherwise be planned on the lie, and written with a type ONNX's checker
/// refuses.
fn check_declared(
    graph: &Graph,
    t: TensorId,
    inferred: Option<&TensorType>,
) -> Result<(), PlanError> {
    let tensor = graph.tensor(t);
    let Some(inferred) = inferred else {
        return Ok(());
    };
    if let Some(declared) = tensor.dtype.filter(|&d| d != inferred.dtype) {
        return Err(PlanError::DeclaredType {
            tensor: tensor.name.clone(),
            declared: declared.to_string(),
            inferred: inferred.dtype.to_string(),
        });
    }
    let (Some(declared), inferred) = (&tensor.shape, &inferred.shape) else {
        return Ok(());
    };
    let differs = declared.rank() != inferred.rank()
        || declared
            .dims()
            .iter()
            .zip(inferred.dims())
            .any(|(d, i)| matches!((d.known(), i.known()), (Some(a), Some(b)) if a != b));
    if differs {
        return Err(PlanError::DeclaredShape {
            tensor: tensor.name.clone(),
            declared: declared.to_string(),
            inferred: inferred.to_string(),
        });
    }
    Ok(())
}

/// The analysis of a graph: types, phases, ORT's schedule, the simulation, the device need
/// under the profile, and the ledger.
pub fn analyse(graph: Graph, o: &AnalyseOptions) -> Result<Analysis, PlanError> {
    let (graph, types) = with_inferred_types(graph)?;
    let class = classify(&graph, o.loss.as_deref())?;
    let sched = schedule(&graph)?;
    let ort = resolved_shapes(&graph);
    let sim = simulate_resolved(
        &graph,
        &sched,
        &o.bindings,
        o.profile.intra_op_num_threads,
        &ort,
    )?;
    let device = device_need(&sim, &o.profile);
    let ledger = ledger(
        &graph,
        &class,
        &sim,
        device.arena_bytes,
        &o.bindings,
        o.optimizer,
        o.optimizer_bits,
        o.profile.ort_version,
    );
    Ok(Analysis {
        graph,
        class,
        sim,
        device,
        ledger,
        types,
        ort,
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
