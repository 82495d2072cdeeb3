//! The stable text form of a [`Graph`], which [`crate::parse_graph`] reads back.
//!
//! One line per fact, deterministic: tensors are renumbered in print order (graph inputs,
//! initializers, then node outputs in node order), attributes are sorted by name, every
//! tensor shows its dtype and shape (`?` for an unknown dtype, `[?]` for an unknown rank,
//! symbols and symbolic expressions for symbolic dims). Nodes print in file order, or in any
//! order the caller gives (a schedule), with an optional note per node (a phase) after their
//! id and name. Up to 8 values of a constant (an initializer, a tensor attribute) print
//! after it; larger constants print their type only.
//!
//! ```text
//! ir_version 10
//! opset ai.onnx 20
//! input %0 "x": f32[8,32]
//! input+init %1 "scale": f32[] = [0.5]
//! init %2 "w": f32[64,32]
//! %3 "h": f32[8,64] = MatMul(%0, %2)  # n0 "mm"
//! output %3 "h"
//! ```
//!
//! One numbering: a [`Numbering`] is the `%N` of every tensor in one print of one graph in
//! one order. The printer uses it, and a patch prints against it with [`print_patch`], so a
//! snapshot that shows a patch and the graph it produced names each tensor once: print the
//! patch against the rewritten graph in the order the graph is printed, and the patch's new
//! tensors show with the numbers the graph gives them. A patch's own `Display`, which knows
//! no graph, names existing tensors by [`TensorId`] and new ones `new0`, `new1`…: for a graph
//! that was imported or parsed and is printed in file order, a tensor's id is its print
//! number, so this is the numbering of the graph the patch applies to.
//!
//! Node ids (`n7`) are a graph's own and are printed as they are, not renumbered: they are
//! what patches and diagnostics name. The parser gives each node the id it was printed with.

use std::collections::HashMap;
use std::fmt::{self, Write};

use crate::dtype::DType;
use crate::graph::{Graph, InitData, TensorSource};
use crate::ids::{NodeId, TensorId};
use crate::onnx;
use crate::patch::{Patch, TensorRef};

/// At most this many values of a constant are printed.
pub(crate) const MAX_VALUES: usize = 8;

/// The `%N` of each tensor in the text form of a graph printed in a given node order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Numbering {
    num: HashMap<TensorId, usize>,
}

impl Numbering {
    /// The numbering [`print_graph_with`] uses for `graph` in `order`: graph inputs,
    /// initializers, node outputs in `order`, then graph outputs not yet numbered.
    pub fn new(graph: &Graph, order: &[NodeId]) -> Numbering {
        let mut n = Numbering::default();
        for &t in graph.inputs() {
            n.number(t);
        }
        for t in graph.initializers() {
            n.number(t);
        }
        for &id in order {
            for t in graph.node(id).output_tensors() {
                n.number(t);
            }
        }
        for &t in graph.outputs() {
            n.number(t);
        }
        n
    }

    /// The numbering of `graph` printed in file order.
    pub fn file_order(graph: &Graph) -> Numbering {
        Numbering::new(graph, graph.nodes())
    }

    fn number(&mut self, t: TensorId) -> usize {
        let next = self.num.len();
        *self.num.entry(t).or_insert(next)
    }

    /// The print number of `t`, if it is printed.
    pub fn get(&self, t: TensorId) -> Option<usize> {
        self.num.get(&t).copied()
    }
}

/// The text form in file order.
pub fn print_graph(graph: &Graph) -> String {
    print_graph_with(graph, graph.nodes(), &|_| None)
}

/// The text form with nodes in `order`, each line followed by `note(node)` when given.
pub fn print_graph_with(
    graph: &Graph,
    order: &[NodeId],
    note: &dyn Fn(NodeId) -> Option<String>,
) -> String {
    let mut out = String::new();
    let num = Numbering::new(graph, order);
    let n = |t: TensorId| num.get(t).unwrap_or(usize::MAX);
    let protos: HashMap<&str, &onnx::TensorProto> = graph
        .model()
        .graph
        .as_ref()
        .map(|g| {
            g.initializer
                .iter()
                .filter_map(|i| i.name.as_deref().map(|name| (name, i)))
                .collect()
        })
        .unwrap_or_default();
    let init_values = |t: TensorId| {
        protos
            .get(graph.tensor(t).name.as_str())
            .and_then(|p| small_values(p, p.data_type.and_then(DType::from_code)))
            .map_or(String::new(), |v| format!(" = {v}"))
    };

    let _ = writeln!(out, "ir_version {}", graph.ir_version());
    let mut opsets = graph.opsets();
    opsets.sort();
    for (d, v) in opsets {
        let _ = writeln!(out, "opset {d} {v}");
    }
    for &t in graph.inputs() {
        let tensor = graph.tensor(t);
        let (kw, values) = if tensor.is_initializer() {
            ("input+init", init_values(t))
        } else {
            ("input", String::new())
        };
        let _ = writeln!(
            out,
            "{kw} %{} {:?}: {}{values}",
            n(t),
            tensor.name,
            type_str(graph, t)
        );
    }
    for t in graph.initializers() {
        if graph.inputs().contains(&t) {
            continue;
        }
        let tensor = graph.tensor(t);
        let ext = match &tensor.source {
            TensorSource::Initializer {
                data:
                    InitData::External {
                        location,
                        offset,
                        length,
                    },
                ..
            } => {
                format!(
                    " external({location:?}, offset={offset}, length={})",
                    length.map_or("?".to_string(), |l| l.to_string())
                )
            }
            _ => init_values(t),
        };
        let _ = writeln!(
            out,
            "init %{} {:?}: {}{ext}",
            n(t),
            tensor.name,
            type_str(graph, t)
        );
    }
    let mut defined: std::collections::HashSet<TensorId> = graph
        .inputs()
        .iter()
        .copied()
        .chain(graph.initializers())
        .collect();
    for &id in order {
        let node = graph.node(id);
        let outs: Vec<String> = node
            .outputs
            .iter()
            .map(|o| match o {
                Some(t) => format!(
                    "%{} {:?}: {}",
                    n(*t),
                    graph.tensor(*t).name,
                    type_str(graph, *t)
                ),
                None => "_".to_string(),
            })
            .collect();
        let ins: Vec<String> = node
            .inputs
            .iter()
            .map(|i| match i {
                Some(t) if defined.contains(t) => format!("%{}", n(*t)),
                Some(t) => format!("%?{:?}", graph.tensor(*t).name),
                None => "_".to_string(),
            })
            .collect();
        defined.extend(node.output_tensors());
        let mut attrs: Vec<&onnx::AttributeProto> = node.attributes().iter().collect();
        attrs.sort_by(|a, b| a.name.cmp(&b.name));
        let attr_text = if attrs.is_empty() {
            String::new()
        } else {
            format!(
                " {{{}}}",
                attrs
                    .iter()
                    .map(|a| attr_str(a))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let _ = write!(
            out,
            "{} = {}({}){attr_text}  # {id} {:?}",
            outs.join(", "),
            node.op_label(),
            ins.join(", "),
            node.name
        );
        if let Some(n) = note(id) {
            let _ = write!(out, " {n}");
        }
        out.push('\n');
    }
    for &t in graph.outputs() {
        let _ = writeln!(out, "output %{} {:?}", n(t), graph.tensor(t).name);
    }
    out
}

/// `patch` printed against the numbering of `graph` in `order`: existing tensors by their
/// `%N` there, each new tensor by the `%N` of the tensor of its name in `graph` (print against
/// the rewritten graph) or as `new<i>` when `graph` has none (the graph it applies to).
pub fn print_patch(patch: &Patch, graph: &Graph, order: &[NodeId]) -> String {
    let num = Numbering::new(graph, order);
    let name = |t: TensorRef| -> String {
        let id = match t {
            TensorRef::Existing(t) => Some(t),
            TensorRef::New(i) => patch
                .tensors
                .get(i)
                .and_then(|nt| graph.tensor_id(&nt.name)),
            TensorRef::Constant(i) => patch
                .constants
                .get(i)
                .and_then(|c| graph.tensor_id(&c.name)),
        };
        match (id.and_then(|t| num.get(t)), t) {
            (Some(n), _) => format!("%{n}"),
            (None, TensorRef::New(i)) => format!("new{i}"),
            (None, TensorRef::Constant(i)) => format!("const{i}"),
            (None, TensorRef::Existing(t)) => format!("%?{t}"),
        }
    };
    let mut out = String::new();
    let _ = write_patch(&mut out, patch, &name);
    out
}

/// The lines of a patch, tensors named by `name` (shared by `Display` and [`print_patch`]).
pub(crate) fn write_patch(
    f: &mut dyn fmt::Write,
    patch: &Patch,
    name: &dyn Fn(TensorRef) -> String,
) -> fmt::Result {
    writeln!(f, "patch {:?}", patch.label)?;
    let r = |t: &Option<TensorRef>| t.map_or("_".to_string(), name);
    for (i, t) in patch.tensors.iter().enumerate() {
        match t.like {
            Some(like) => writeln!(
                f,
                "  tensor {} {:?} like {}",
                name(TensorRef::New(i)),
                t.name,
                name(TensorRef::Existing(like))
            )?,
            None => writeln!(f, "  tensor {} {:?}", name(TensorRef::New(i)), t.name)?,
        }
    }
    for (i, c) in patch.constants.iter().enumerate() {
        let dtype = c
            .value
            .data_type
            .and_then(crate::DType::from_code)
            .map_or("?", |d| d.name());
        let dims: Vec<String> = c.value.dims.iter().map(i64::to_string).collect();
        let values = match crate::ops::decode(&c.value) {
            Some(crate::ops::ConstData::Ints(v)) => format!("{v:?}"),
            Some(crate::ops::ConstData::Floats(v)) => format!("{v:?}"),
            None => "?".to_string(),
        };
        writeln!(
            f,
            "  constant {} {:?} = {dtype}[{}] {values} before {}",
            name(TensorRef::Constant(i)),
            c.name,
            dims.join(","),
            c.before
        )?;
    }
    for n in &patch.nodes {
        let ins: Vec<String> = n.inputs.iter().map(r).collect();
        let outs: Vec<String> = n.outputs.iter().map(r).collect();
        writeln!(
            f,
            "  node {:?} = copy of {}({}) -> {} before {}",
            n.name,
            n.copy_of,
            ins.join(", "),
            outs.join(", "),
            n.before
        )?;
    }
    for n in &patch.fresh {
        let ins: Vec<String> = n.inputs.iter().map(r).collect();
        let outs: Vec<String> = n.outputs.iter().map(r).collect();
        let attrs: Vec<String> = n.attributes.iter().map(attr_str).collect();
        let op = match &n.domain {
            Some((d, _)) => format!("{d}.{}", n.op_type),
            None => n.op_type.clone(),
        };
        writeln!(
            f,
            "  node {:?} = {}({}) {{{}}} -> {} before {}",
            n.name,
            op,
            ins.join(", "),
            attrs.join(", "),
            outs.join(", "),
            n.before
        )?;
    }
    for m in &patch.moves {
        let ins: Vec<String> = m.inputs.iter().map(r).collect();
        writeln!(
            f,
            "  move {}({}) before {} after new node #{}",
            m.node,
            ins.join(", "),
            m.before,
            m.after_new
        )?;
    }
    for w in &patch.rewires {
        writeln!(
            f,
            "  rewire {}[{}]: {} -> {}",
            w.node,
            w.slot,
            name(TensorRef::Existing(w.from)),
            name(w.to)
        )?;
    }
    for s in &patch.substitutes {
        let ins: Vec<String> = s.inputs.iter().map(r).collect();
        let attrs: Vec<String> = s.attributes.iter().map(attr_str).collect();
        writeln!(
            f,
            "  substitute {} = {}({}) {{{}}}",
            s.node,
            s.op_type,
            ins.join(", "),
            attrs.join(", ")
        )?;
    }
    for n in &patch.removals {
        writeln!(f, "  remove {n}")?;
    }
    for g in &patch.guards {
        writeln!(
            f,
            "  guard {}[{}] through Identity -> {:?}",
            g.node, g.slot, g.name
        )?;
    }
    if !patch.forget_value_info.is_empty() {
        let names: Vec<String> = patch
            .forget_value_info
            .iter()
            .map(|&t| name(TensorRef::Existing(t)))
            .collect();
        writeln!(f, "  forget value_info {}", names.join(" "))?;
    }
    for (k, v) in &patch.metadata {
        writeln!(f, "  metadata {k:?} = {v:?}")?;
    }
    Ok(())
}

/// `f32[8,seq]`, with `?` for what is unknown.
pub fn type_str(graph: &Graph, t: TensorId) -> String {
    let tensor = graph.tensor(t);
    let d = tensor
        .dtype
        .map_or("?".to_string(), |d| d.name().to_string());
    let s = tensor
        .shape
        .as_ref()
        .map_or("[?]".to_string(), |s| s.to_string());
    format!("{d}{s}")
}

fn attr_str(a: &onnx::AttributeProto) -> String {
    use onnx::attribute_proto::AttributeType as T;
    let name = a.name.as_deref().unwrap_or("");
    let ty = a
        .r#type
        .and_then(|t| T::try_from(t).ok())
        .unwrap_or(T::Undefined);
    let list = |kind: &str, items: Vec<String>| {
        if items.is_empty() {
            format!("{kind}[]")
        } else {
            format!("[{}]", items.join(", "))
        }
    };
    let value = match ty {
        T::Float => format!("{:?}", a.f.unwrap_or(0.0)),
        T::Int => format!("{}", a.i.unwrap_or(0)),
        T::String => format!(
            "{:?}",
            String::from_utf8_lossy(a.s.as_deref().unwrap_or(&[]))
        ),
        T::Tensor => a.t.as_ref().map_or("tensor(?)".to_string(), tensor_str),
        T::Graph => format!("graph({} nodes)", a.g.as_ref().map_or(0, |g| g.node.len())),
        T::Floats => list(
            "floats",
            a.floats.iter().map(|f| format!("{f:?}")).collect(),
        ),
        T::Ints => list("ints", a.ints.iter().map(|i| i.to_string()).collect()),
        T::Strings => list(
            "strings",
            a.strings
                .iter()
                .map(|s| format!("{:?}", String::from_utf8_lossy(s)))
                .collect(),
        ),
        T::Tensors => format!("tensors({})", a.tensors.len()),
        T::Graphs => format!("graphs({})", a.graphs.len()),
        T::SparseTensor | T::SparseTensors => "sparse".to_string(),
        T::TypeProto | T::TypeProtos => "type".to_string(),
        T::Undefined => match &a.ref_attr_name {
            Some(r) => format!("@{r}"),
            None => "?".to_string(),
        },
    };
    format!("{name}={value}")
}

/// A constant tensor attribute: type, shape and up to [`MAX_VALUES`] values.
fn tensor_str(t: &onnx::TensorProto) -> String {
    let dtype = t.data_type.and_then(DType::from_code);
    let dname = dtype.map_or("?", |d| d.name());
    let values = small_values(t, dtype);
    format!(
        "{dname}{:?}{}",
        t.dims,
        values.map_or(String::new(), |v| format!(" {v}"))
    )
}

/// `[v, …]` for 1 to [`MAX_VALUES`] values of an f32, i64, i32 or bool tensor.
fn small_values(t: &onnx::TensorProto, dtype: Option<DType>) -> Option<String> {
    let raw = t.raw_data.as_deref();
    let show = |v: Vec<String>| {
        if (1..=MAX_VALUES).contains(&v.len()) {
            Some(format!("[{}]", v.join(", ")))
        } else {
            None
        }
    };
    match dtype? {
        DType::F32 => match raw {
            Some(r) => show(
                r.chunks_exact(4)
                    .map(|c| format!("{:?}", f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
            ),
            None => show(t.float_data.iter().map(|f| format!("{f:?}")).collect()),
        },
        DType::I64 => match raw {
            Some(r) => show(
                r.chunks_exact(8)
                    .map(|c| {
                        i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                            .to_string()
                    })
                    .collect(),
            ),
            None => show(t.int64_data.iter().map(|v| v.to_string()).collect()),
        },
        DType::I32 => match raw {
            Some(r) => show(
                r.chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).to_string())
                    .collect(),
            ),
            None => show(t.int32_data.iter().map(|v| v.to_string()).collect()),
        },
        DType::Bool => match raw {
            Some(r) => show(r.iter().map(|&b| (b != 0).to_string()).collect()),
            None => show(t.int32_data.iter().map(|&v| (v != 0).to_string()).collect()),
        },
        _ => None,
    }
}
