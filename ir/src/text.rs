//! The stable text form of a [`Graph`].
//!
//! One line per fact, deterministic: tensors are renumbered in print order (graph inputs,
//! initializers, then node outputs in node order), attributes are sorted by name, every
//! tensor shows its dtype and shape. Nodes print in file order, or in any order the caller
//! gives (a schedule), with an optional note per node (a phase).
//!
//! ```text
//! ir_version 10
//! opset ai.onnx 20
//! input %0 "x": f32[8,32]
//! init %1 "w": f32[64,32]
//! %2 "h": f32[8,64] = MatMul(%0, %1)  # n0 "mm"
//! output %2
//! ```

use std::collections::HashMap;
use std::fmt::Write;

use crate::dtype::DType;
use crate::graph::{Graph, InitData, TensorSource};
use crate::ids::{NodeId, TensorId};
use crate::onnx;

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
    let mut num: HashMap<TensorId, usize> = HashMap::new();
    let mut next = 0usize;
    let mut number = |t: TensorId, num: &mut HashMap<TensorId, usize>| -> usize {
        *num.entry(t).or_insert_with(|| {
            next += 1;
            next - 1
        })
    };

    let _ = writeln!(out, "ir_version {}", graph.ir_version());
    let mut opsets = graph.opsets();
    opsets.sort();
    for (d, v) in opsets {
        let _ = writeln!(out, "opset {d} {v}");
    }
    for &t in graph.inputs() {
        let n = number(t, &mut num);
        let tensor = graph.tensor(t);
        let kw = if tensor.is_initializer() {
            "input+init"
        } else {
            "input"
        };
        let _ = writeln!(out, "{kw} %{n} {:?}: {}", tensor.name, type_str(graph, t));
    }
    for t in graph.initializers() {
        if num.contains_key(&t) {
            continue;
        }
        let n = number(t, &mut num);
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
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "init %{n} {:?}: {}{ext}",
            tensor.name,
            type_str(graph, t)
        );
    }
    for &id in order {
        let node = graph.node(id);
        let mut outs = Vec::new();
        for o in &node.outputs {
            match o {
                Some(t) => {
                    let n = number(*t, &mut num);
                    outs.push(format!(
                        "%{n} {:?}: {}",
                        graph.tensor(*t).name,
                        type_str(graph, *t)
                    ));
                }
                None => outs.push("_".to_string()),
            }
        }
        let ins: Vec<String> = node
            .inputs
            .iter()
            .map(|i| match i {
                Some(t) => match num.get(t) {
                    Some(n) => format!("%{n}"),
                    None => format!("%?{:?}", graph.tensor(*t).name),
                },
                None => "_".to_string(),
            })
            .collect();
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
        let n = number(t, &mut num);
        let _ = writeln!(out, "output %{n} {:?}", graph.tensor(t).name);
    }
    out
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
    let value = match ty {
        T::Float => format!("{:?}", a.f.unwrap_or(0.0)),
        T::Int => format!("{}", a.i.unwrap_or(0)),
        T::String => format!(
            "{:?}",
            String::from_utf8_lossy(a.s.as_deref().unwrap_or(&[]))
        ),
        T::Tensor => a.t.as_ref().map_or("tensor(?)".to_string(), tensor_str),
        T::Graph => format!("graph({} nodes)", a.g.as_ref().map_or(0, |g| g.node.len())),
        T::Floats => format!("{:?}", a.floats),
        T::Ints => format!("{:?}", a.ints),
        T::Strings => format!(
            "{:?}",
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
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

/// A constant tensor attribute: type, shape and up to 8 values.
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

fn small_values(t: &onnx::TensorProto, dtype: Option<DType>) -> Option<String> {
    const MAX: usize = 8;
    let raw = t.raw_data.as_deref();
    let show = |v: Vec<String>| {
        if v.len() <= MAX {
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
        _ => None,
    }
}
