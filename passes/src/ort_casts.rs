//! ONNX Runtime's float16 fallback on its CPU provider, made explicit.
//!
//! When ORT 1.31.1 loads a model for the CPU provider, a node whose float16 types have no CPU
//! kernel ([`ckpt_ir::ops::kernels`]) is run in float32 between Casts, at every optimization
//! level (`InsertCastTransformer`, after partitioning):
//! 1. a node that has a float16 kernel but whose float16 inputs all come from nodes without
//!    one, and whose float16 outputs all go to such nodes, is run in float32 too (nodes taken
//!    in index order, each decision seeing the earlier ones; the node must read another
//!    node's output, produce no graph output, and have a float32 kernel);
//! 2. in ORT's default order, each node left without a kernel that reads a float16 value gets
//!    a `Cast` to float32 per float16 input (one per value, shared by its readers) and a
//!    `Cast` back to float16 per float16 output; the Casts are new nodes, numbered after
//!    every node of the file, in the order they are made, named `InsertedPrecisionFreeCast_`
//!    and the value's name;
//! 3. duplicate Casts are removed (`RemoveDuplicateCastTransformer`, nodes in index order):
//!    a Cast whose reader is a Cast back to its input type hands that reader's readers its
//!    own input; a Cast left read only by Casts, and not a graph output, is removed and its
//!    readers read its input. A cast that loses precision (wider to narrower, or float to
//!    integer) is kept unless ORT inserted it.
//!
//! [`lower`] returns the graph ORT runs: the file's nodes in their order, without the removed
//! Casts, then the inserted Casts in the order ORT made them, so ORT's default order of it is
//! the order ORT runs the original in. A node that has no kernel even so (bfloat16 on the CPU
//! provider: ORT casts float16 only) is named in [`FallbackError::NoKernel`].

use std::collections::{HashMap, HashSet};
use std::path::Path;

use ckpt_ir::ops::kernels::{is_type_param, KernelTable, NodeTypes, Provider};
use ckpt_ir::{onnx, DType, Graph, NodeId};

use crate::memory::{is_constant_node, schedule_for, MemoryError};

/// The prefix ORT names the Casts it inserts with (`AddCastNode`).
pub const INSERTED_CAST_PREFIX: &str = "InsertedPrecisionFreeCast_";

/// A node ORT has no kernel for on the provider, even through its float16 fallback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoKernel {
    pub node: String,
    pub op: String,
    /// The node's input types, as `f16, f16`.
    pub types: String,
}

impl std::fmt::Display for NoKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` ({} on {})", self.node, self.op, self.types)
    }
}

/// Why the graph ORT runs could not be derived.
#[derive(Debug, thiserror::Error)]
pub enum FallbackError {
    #[error("ONNX Runtime {version}'s CPU provider has no kernel for {} node(s), first {}", nodes.len(), nodes[0])]
    NoKernel {
        version: String,
        nodes: Vec<NoKernel>,
    },
    #[error(transparent)]
    Order(#[from] MemoryError),
    #[error("the graph with ORT's Casts does not import: {0}")]
    Import(#[from] ckpt_ir::ImportError),
}

/// What ORT changes in a graph at load, and the graph it runs.
#[derive(Debug)]
pub struct Fallback {
    /// Nodes run in float32 between Casts, in ORT's default order.
    pub converted: Vec<String>,
    /// Casts ORT inserts and keeps.
    pub inserted: usize,
    /// Casts removed as duplicates (inserted ones and the file's own).
    pub removed: usize,
    /// The graph ORT runs, its nodes in the order ORT runs the original.
    pub graph: Graph,
    /// Node names in the order ORT runs the original (its Casts numbered after every node).
    pub ort_order: Vec<String>,
}

#[derive(Clone, Debug)]
struct WNode {
    name: String,
    domain: String,
    op: String,
    inputs: Vec<Option<String>>,
    outputs: Vec<Option<String>>,
    /// The graph's node, or `None` for an inserted Cast.
    orig: Option<NodeId>,
    /// An inserted Cast's target type.
    to: Option<DType>,
    assigned: bool,
    removed: bool,
    subgraph: bool,
}

struct Work<'a> {
    table: &'a KernelTable,
    graph: &'a Graph,
    nodes: Vec<WNode>,
    types: HashMap<String, DType>,
    outputs: HashSet<String>,
    names: HashSet<String>,
    /// The position in `nodes` of each of the graph's nodes ORT numbers.
    index: HashMap<NodeId, usize>,
}

fn is_f16(types: &HashMap<String, DType>, t: &Option<String>) -> bool {
    t.as_ref().and_then(|t| types.get(t)) == Some(&DType::F16)
}

impl Work<'_> {
    fn opset(&self, n: &WNode) -> i64 {
        self.graph.opset(&n.domain).unwrap_or(1)
    }

    fn types_of(&self, list: &[Option<String>]) -> Vec<Option<DType>> {
        list.iter()
            .map(|t| t.as_ref().and_then(|t| self.types.get(t).copied()))
            .collect()
    }

    fn kernel(&self, n: &WNode) -> bool {
        let (i, o) = (self.types_of(&n.inputs), self.types_of(&n.outputs));
        self.table.has_kernel(
            &n.domain,
            &n.op,
            self.opset(n),
            NodeTypes {
                inputs: &i,
                outputs: &o,
            },
        )
    }

    /// The node producing `t` in the file's graph (a `Constant` node's value has none: ORT
    /// makes it an initializer).
    fn producer(&self, t: &str) -> Option<usize> {
        let p = self.graph.tensor(self.graph.tensor_id(t)?).producer()?;
        self.index.get(&p).copied()
    }

    /// The nodes reading `t` in the file's graph.
    fn readers(&self, t: &str) -> Vec<usize> {
        self.graph.tensor_id(t).map_or_else(Vec::new, |id| {
            self.graph
                .tensor(id)
                .consumers()
                .iter()
                .filter_map(|c| self.index.get(c).copied())
                .collect()
        })
    }

    /// (node, slot) reading `t` among the live nodes, as Casts are inserted and removed.
    fn live_readers(&self, t: &str) -> Vec<(usize, usize)> {
        let mut r = Vec::new();
        for (i, n) in self.nodes.iter().enumerate().filter(|(_, n)| !n.removed) {
            for (s, x) in n.inputs.iter().enumerate() {
                if x.as_deref() == Some(t) {
                    r.push((i, s));
                }
            }
        }
        r
    }

    fn needs_input_cast(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        !n.assigned && n.inputs.iter().any(|t| is_f16(&self.types, t))
    }

    /// ORT's `IsIsolatedFp16NodeOnCpu`.
    fn isolated(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        let has_edge = n
            .inputs
            .iter()
            .flatten()
            .any(|t| self.producer(t).is_some());
        let makes_output = n.outputs.iter().flatten().any(|t| self.outputs.contains(t));
        if !has_edge || n.subgraph || makes_output || !n.assigned {
            return false;
        }
        let Some(schema) = self.table.schema(&n.domain, &n.op, self.opset(n)) else {
            return false;
        };
        let mut bound: Vec<(&str, DType)> = Vec::new();
        let mut f16_in = Vec::new();
        let mut at = 0usize;
        for (k, f) in schema.inputs.iter().enumerate() {
            let count = if f.variadic && k + 1 == schema.inputs.len() {
                n.inputs.len().saturating_sub(at)
            } else {
                1
            };
            if is_type_param(f.type_str) {
                for idx in at..(at + count).min(n.inputs.len()) {
                    let Some(t) = &n.inputs[idx] else { continue };
                    let Some(&d) = self.types.get(t) else {
                        continue;
                    };
                    let d = if d == DType::F16 {
                        f16_in.push(idx);
                        DType::F32
                    } else {
                        d
                    };
                    set(&mut bound, f.type_str, d);
                    break;
                }
            }
            at += count;
        }
        if f16_in.is_empty() {
            return false;
        }
        for &idx in &f16_in {
            let t = n.inputs[idx].as_deref().unwrap_or_default();
            if let Some(p) = self.producer(t) {
                if !self.needs_input_cast(p) {
                    return false;
                }
            }
        }
        let mut f16_out = Vec::new();
        for (idx, f) in schema.outputs.iter().enumerate().take(n.outputs.len()) {
            if !is_type_param(f.type_str) {
                continue;
            }
            let Some(t) = &n.outputs[idx] else { continue };
            let Some(&d) = self.types.get(t) else {
                continue;
            };
            if d == DType::F16 {
                f16_out.push(idx);
                set(&mut bound, f.type_str, DType::F32);
            } else {
                set(&mut bound, f.type_str, d);
            }
        }
        if f16_out.is_empty() {
            return false;
        }
        for &idx in &f16_out {
            let t = n.outputs[idx].as_deref().unwrap_or_default();
            if self.readers(t).iter().any(|&r| !self.needs_input_cast(r)) {
                return false;
            }
        }
        self.table
            .has_kernel_for(&n.domain, &n.op, schema.since, &bound)
    }

    /// ORT's `GenerateNodeName`: `base`, or `base_token_K` while taken.
    fn fresh(&mut self, base: &str, counter: &mut usize) -> String {
        let mut name = base.to_string();
        while self.names.contains(&name) {
            name = format!("{base}_token_{counter}");
            *counter += 1;
        }
        self.names.insert(name.clone());
        name
    }

    fn cast(&mut self, name: String, input: String, output: String, to: DType) {
        self.nodes.push(WNode {
            name,
            domain: ckpt_ir::ONNX_DOMAIN.to_string(),
            op: "Cast".to_string(),
            inputs: vec![Some(input)],
            outputs: vec![Some(output)],
            orig: None,
            to: Some(to),
            assigned: true,
            removed: false,
            subgraph: false,
        });
    }
}

fn set<'a>(bound: &mut Vec<(&'a str, DType)>, name: &'a str, d: DType) {
    match bound.iter_mut().find(|(n, _)| *n == name) {
        Some(e) => e.1 = d,
        None => bound.push((name, d)),
    }
}

/// Whether ORT's `RemoveDuplicateCastTransformer` takes a Cast from `src` to `dst` as losing
/// information (`UnsafeCast`): unknown types, signed to unsigned, float to non-float, an integer
/// into a float no wider, float16 and bfloat16 either way, or a narrowing not inserted by ORT.
fn unsafe_cast(src: DType, dst: DType, name: &str) -> bool {
    #[derive(PartialEq)]
    enum G {
        Bool,
        Int,
        Unsigned,
        Float,
    }
    let group = |d: DType| match d {
        DType::Bool => Some(G::Bool),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => Some(G::Int),
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => Some(G::Unsigned),
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => Some(G::Float),
        _ => None,
    };
    let bits = |d: DType| if d == DType::Bool { 1 } else { d.bits() };
    let (Some(s), Some(d)) = (group(src), group(dst)) else {
        return true;
    };
    if s != G::Bool && s != G::Unsigned && d == G::Unsigned {
        return true;
    }
    if s == G::Float && d != G::Float {
        return true;
    }
    if s == G::Unsigned && d == G::Int {
        return bits(dst) <= bits(src);
    }
    if (s == G::Int || s == G::Unsigned) && d == G::Float {
        return bits(dst) <= bits(src);
    }
    if matches!(
        (src, dst),
        (DType::F16, DType::BF16) | (DType::BF16, DType::F16)
    ) {
        return true;
    }
    bits(src) > bits(dst) && !name.starts_with(INSERTED_CAST_PREFIX)
}

/// The graph ORT runs for `graph` on the CPU provider of `ort_version`, or `None` when ORT
/// changes nothing (no node lacks a float16 kernel), or when the registry has no kernel table
/// for that runtime.
pub fn lower(graph: &Graph, ort_version: &str) -> Result<Option<Fallback>, FallbackError> {
    let Some(table) = KernelTable::of(Provider::Cpu, ort_version) else {
        return Ok(None);
    };
    let mut w = start(graph, table);
    if !w.nodes.iter().any(|n| !n.assigned) {
        return Ok(None);
    }
    let missing = missing_in(&w);
    if !missing.is_empty() {
        return Err(FallbackError::NoKernel {
            version: ort_version.to_string(),
            nodes: missing,
        });
    }
    for i in 0..w.nodes.len() {
        if w.isolated(i) {
            w.nodes[i].assigned = false;
        }
    }
    let order: Vec<usize> = schedule_for(graph, ort_version)?
        .order
        .iter()
        .filter_map(|n| w.index.get(n).copied())
        .collect();
    let converted = insert_casts(&mut w, &order);
    let removed = remove_duplicate_casts(&mut w);
    let inserted = w
        .nodes
        .iter()
        .filter(|n| n.orig.is_none() && !n.removed)
        .count();
    let (graph, ort_order) = build(&w, ort_version)?;
    Ok(Some(Fallback {
        converted,
        inserted,
        removed,
        graph,
        ort_order,
    }))
}

fn start<'a>(graph: &'a Graph, table: &'a KernelTable) -> Work<'a> {
    let mut types = HashMap::new();
    let inferred = ckpt_ir::ops::infer(graph).ok();
    for id in graph.tensor_ids() {
        let t = graph.tensor(id);
        let d = inferred.as_ref().and_then(|i| i.dtype(id)).or(t.dtype);
        if let Some(d) = d {
            types.insert(t.name.clone(), d);
        }
    }
    let name = |t: &Option<ckpt_ir::TensorId>| t.map(|t| graph.tensor(t).name.clone());
    let mut w = Work {
        table,
        graph,
        nodes: Vec::new(),
        index: HashMap::new(),
        types,
        outputs: graph
            .outputs()
            .iter()
            .map(|&t| graph.tensor(t).name.clone())
            .collect(),
        names: graph.node_names().map(str::to_string).collect(),
    };
    for &n in graph.nodes() {
        if is_constant_node(graph, n) {
            continue;
        }
        let node = graph.node(n);
        let mut wn = WNode {
            name: node.name.clone(),
            domain: node.domain.clone(),
            op: node.op_type.clone(),
            inputs: node.inputs.iter().map(name).collect(),
            outputs: node.outputs.iter().map(name).collect(),
            orig: Some(n),
            to: None,
            assigned: false,
            removed: false,
            subgraph: node
                .attributes()
                .iter()
                .any(|a| a.g.is_some() || !a.graphs.is_empty()),
        };
        // A node with no 16-bit float value is taken as ORT's registry takes it: the table
        // decides only for nodes the fallback concerns.
        let half = wn.inputs.iter().chain(&wn.outputs).any(|t| {
            matches!(
                t.as_ref().and_then(|t| w.types.get(t)),
                Some(DType::F16 | DType::BF16)
            )
        });
        wn.assigned = !half || w.kernel(&wn);
        w.index.insert(n, w.nodes.len());
        w.nodes.push(wn);
    }
    w
}

/// Nodes without a kernel that ORT's fallback does not rescue: no float16 input to cast
/// (bfloat16, or an op the provider lacks), a subgraph, or no float32 kernel once cast.
fn missing_in(w: &Work) -> Vec<NoKernel> {
    let mut out = Vec::new();
    for n in w.nodes.iter().filter(|n| !n.assigned) {
        let casts = !n.subgraph && n.inputs.iter().any(|t| is_f16(&w.types, t));
        let rescued = casts && {
            let widen = |l: &[Option<String>]| -> Vec<Option<DType>> {
                w.types_of(l)
                    .into_iter()
                    .map(|d| d.map(|d| if d == DType::F16 { DType::F32 } else { d }))
                    .collect()
            };
            let (i, o) = (widen(&n.inputs), widen(&n.outputs));
            w.table.has_kernel(
                &n.domain,
                &n.op,
                w.opset(n),
                NodeTypes {
                    inputs: &i,
                    outputs: &o,
                },
            )
        };
        if !rescued {
            let types = w
                .types_of(&n.inputs)
                .iter()
                .map(|d| d.map_or("-".to_string(), |d| d.to_string()))
                .collect::<Vec<_>>()
                .join(", ");
            out.push(NoKernel {
                node: n.name.clone(),
                op: n.op.clone(),
                types,
            });
        }
    }
    out
}

/// Step 2: Casts around every unassigned node that reads float16, in `order`.
fn insert_casts(w: &mut Work, order: &[usize]) -> Vec<String> {
    let mut made: HashMap<String, String> = HashMap::new();
    let mut counter = 0usize;
    let mut converted = Vec::new();
    for &i in order {
        let n = w.nodes[i].clone();
        if n.assigned || n.subgraph || !n.inputs.iter().any(|t| is_f16(&w.types, t)) {
            continue;
        }
        let mut inputs = n.inputs.clone();
        for slot in inputs.iter_mut() {
            if !is_f16(&w.types, slot) {
                continue;
            }
            let src = slot.clone().unwrap_or_default();
            let dst = match made.get(&src) {
                Some(d) => d.clone(),
                None => {
                    let name = w.fresh(&format!("{INSERTED_CAST_PREFIX}{src}"), &mut counter);
                    w.types.insert(name.clone(), DType::F32);
                    w.cast(name.clone(), src.clone(), name.clone(), DType::F32);
                    made.insert(src, name.clone());
                    name
                }
            };
            *slot = Some(dst);
        }
        let mut outputs = n.outputs.clone();
        for slot in outputs.iter_mut() {
            if !is_f16(&w.types, slot) {
                continue;
            }
            let out = slot.clone().unwrap_or_default();
            let name = w.fresh(&format!("{INSERTED_CAST_PREFIX}{out}"), &mut counter);
            w.types.insert(name.clone(), DType::F32);
            w.cast(name.clone(), name.clone(), out, DType::F16);
            *slot = Some(name);
        }
        let node = &mut w.nodes[i];
        node.inputs = inputs;
        node.outputs = outputs;
        node.assigned = true;
        converted.push(node.name.clone());
    }
    converted
}

/// Step 3: ORT's `RemoveDuplicateCastTransformer`, one pass in index order. Returns how many
/// Casts it removed.
fn remove_duplicate_casts(w: &mut Work) -> usize {
    let mut removed = 0;
    for i in 0..w.nodes.len() {
        if w.nodes[i].removed
            || w.nodes[i].op != "Cast"
            || w.nodes[i].domain != ckpt_ir::ONNX_DOMAIN
        {
            continue;
        }
        let (Some(Some(input)), Some(Some(output))) = (
            w.nodes[i].inputs.first().cloned(),
            w.nodes[i].outputs.first().cloned(),
        ) else {
            continue;
        };
        let (Some(&src), Some(&dst)) = (w.types.get(&input), w.types.get(&output)) else {
            continue;
        };
        let loses = unsafe_cast(src, dst, &w.nodes[i].name);
        let edges = w.live_readers(&output);
        let mut drop = Vec::new();
        let mut keep = Vec::new();
        let mut inconsistent = false;
        for &(c, _) in &edges {
            let child = &w.nodes[c];
            if child.op != "Cast" {
                continue;
            }
            let (Some(Some(ci)), Some(Some(co))) = (child.inputs.first(), child.outputs.first())
            else {
                continue;
            };
            let (Some(&src1), Some(&dst1)) = (w.types.get(ci), w.types.get(co)) else {
                inconsistent = true;
                break;
            };
            if loses && unsafe_cast(dst1, src1, &child.name) {
                inconsistent = true;
                break;
            }
            if !w.outputs.contains(co) && src == dst1 && src1 == dst {
                drop.push(c);
            } else {
                keep.push(c);
            }
        }
        if inconsistent {
            continue;
        }
        for &c in &drop {
            let co = w.nodes[c].outputs[0].clone().unwrap_or_default();
            for (r, s) in w.live_readers(&co) {
                w.nodes[r].inputs[s] = Some(input.clone());
            }
            w.nodes[c].removed = true;
            removed += 1;
        }
        if !edges.is_empty()
            && drop.len() + keep.len() == edges.len()
            && !w.outputs.contains(&output)
        {
            for &c in &keep {
                w.nodes[c].inputs[0] = Some(input.clone());
            }
            w.nodes[i].removed = true;
            removed += 1;
        }
    }
    removed
}

/// The graph of `w`: the file's nodes in file order (Constant nodes where they were), without
/// the removed ones, then the inserted Casts; value_info for every new float32 value.
fn build(w: &Work, ort_version: &str) -> Result<(Graph, Vec<String>), FallbackError> {
    let graph = w.graph;
    let mut model = ckpt_ir::export(graph);
    let exported = model
        .graph
        .as_ref()
        .map(|g| g.node.clone())
        .unwrap_or_default();
    let by_orig: HashMap<NodeId, &WNode> = w
        .nodes
        .iter()
        .filter_map(|n| n.orig.map(|o| (o, n)))
        .collect();
    let names = |l: &[Option<String>]| -> Vec<String> {
        l.iter().map(|t| t.clone().unwrap_or_default()).collect()
    };
    let mut nodes = Vec::with_capacity(exported.len());
    for (&id, proto) in graph.nodes().iter().zip(exported) {
        match by_orig.get(&id) {
            Some(n) if n.removed => {}
            Some(n) => {
                let mut p = proto;
                p.input = names(&n.inputs);
                p.output = names(&n.outputs);
                nodes.push(p);
            }
            None => nodes.push(proto),
        }
    }
    let mut value_info = Vec::new();
    for n in w.nodes.iter().filter(|n| n.orig.is_none() && !n.removed) {
        let to = n.to.unwrap_or(DType::F32);
        nodes.push(onnx::NodeProto {
            name: Some(n.name.clone()),
            op_type: Some("Cast".to_string()),
            input: names(&n.inputs),
            output: names(&n.outputs),
            attribute: vec![onnx::AttributeProto {
                name: Some("to".to_string()),
                r#type: Some(onnx::attribute_proto::AttributeType::Int as i32),
                i: Some(i64::from(to.code())),
                ..Default::default()
            }],
            ..Default::default()
        });
        // The float32 side of an inserted Cast is a new value, shaped like the float16 one.
        let (f32_side, f16_side) = if to == DType::F32 {
            (&n.outputs[0], &n.inputs[0])
        } else {
            (&n.inputs[0], &n.outputs[0])
        };
        let like = f16_side.as_ref().and_then(|t| graph.tensor_id(t));
        if let (Some(name), Some(like)) = (f32_side, like) {
            value_info.push(ckpt_ir::build::tensor_value_info(
                name,
                Some(DType::F32),
                graph.tensor(like).shape.as_ref(),
            ));
        }
    }
    if let Some(g) = model.graph.as_mut() {
        g.node = nodes;
        g.value_info.extend(value_info);
    }
    let path = Path::new("<ort cpu fallback>");
    // ORT numbers its Casts after every node of the file, which a file cannot say (its nodes
    // are in topological order): the file lists the nodes in the order ORT runs the original.
    // ORT's order of that file can differ from it where an inserted Cast and a node it
    // precedes feed one node (ORT expands the higher index first); the plan is made on the
    // file as written, whose order the simulator takes from it like any other.
    let numbered = ckpt_ir::import_model(model.clone(), path, graph.dir())?;
    let order = schedule_for(&numbered, ort_version)?.order;
    let mut file: Vec<onnx::NodeProto> = Vec::with_capacity(numbered.node_count());
    let protos = model
        .graph
        .as_ref()
        .map(|g| g.node.clone())
        .unwrap_or_default();
    let position: HashMap<NodeId, usize> = numbered
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i))
        .collect();
    for &n in numbered.nodes() {
        if is_constant_node(&numbered, n) {
            file.push(protos[position[&n]].clone());
        }
    }
    for n in &order {
        file.push(protos[position[n]].clone());
    }
    if let Some(g) = model.graph.as_mut() {
        g.node = file;
    }
    let sorted = ckpt_ir::import_model(model, path, graph.dir())?;
    let ran = order
        .iter()
        .map(|&n| numbered.node(n).name.clone())
        .collect();
    Ok((sorted, ran))
}
