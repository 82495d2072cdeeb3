//! The ONNX rules a written model must meet, checked on the exported `ModelProto` before it is
//! published: what `onnx.checker.check_model(full_check=True)` enforces on the file's
//! structure, so that no output the checker refuses is ever written. The rules, in the order
//! [`check_model_rules`] checks them:
//!
//! 1. Header: `ir_version` set and known; opset imports in range, each domain once, none
//!    below IR version 3 and at least one from IR version 3 on; `metadata_props` keys unique;
//!    a graph with a non-empty name.
//! 2. Graph inputs and outputs: named, typed (a tensor type with an element type and a
//!    shape); graph inputs named once; every tensor type among them and the value_info with
//!    a defined element type (ONNX Runtime refuses UNDEFINED).
//! 3. Initializers: named once; a known, defined element type and non-negative dims of a
//!    64-bit size; embedded data in exactly one value field (none for 0 elements) whose length
//!    is dims × element type; external data in no value field, its `location` relative and
//!    inside `dir`, naming a file that holds `length` = dims × element size bytes; at IR
//!    version 3 and below, each one a graph input.
//! 4. Nodes, in file order: an op type, some input or output, an op that ONNX (at the imported
//!    opset, not deprecated) or ONNX Runtime defines or a local function, its domain imported;
//!    a node of an ONNX domain meets its op's schema (input and output counts, required ones
//!    given, attributes known, of their types, the required ones there); attributes named,
//!    typed (from IR version 2 on), holding one value field of their type; every input
//!    defined by an earlier node, a graph input or an initializer (topological order); every
//!    output assigned once (single static assignment).
//! 5. Graph outputs: each one defined in the graph.
//!
//! The rules the importer applies to every input are its own functions, called here: the
//! header ([`crate::opset::check_opset_imports`]), element types, ops and attributes
//! (`wellformed::check_elem_types`, `wellformed::check_op`, `wellformed::check_attributes`,
//! `wellformed::check_schema`), initializer data and external data (`import::init_data`).
//! Sub-graphs (`If`/`Loop` bodies), sparse initializers, ONNX Runtime's contrib-op schemas and
//! the checker's strict shape inference are not covered here; the analysis refuses declared
//! shapes and element types that contradict inference.

use std::collections::HashSet;
use std::path::Path;

use crate::error::{CheckError, ImportError};
use crate::graph::normalise_domain;
use crate::import::{check_header, check_size, dims_shape, init_data, node_label, tensor_dtype};
use crate::onnx;
use crate::onnx::tensor_proto::DataLocation;
use crate::onnx::type_proto::Value;

/// The path errors of the importer's rules name: the model checked has no file yet.
const MODEL: &str = "the model";

/// Check `proto` against the rules in the module doc; `dir` is where its external data
/// lives (`None`: external data is an error). The first broken rule is returned.
pub fn check_model_rules(proto: &onnx::ModelProto, dir: Option<&Path>) -> Result<(), CheckError> {
    check_rules(proto, dir, true)
}

/// [`check_model_rules`], with the nodes' topological order checked only when `ordered`: the
/// importer accepts nodes in any order that has no cycle (it orders them itself, and a graph
/// ONNX Runtime rewrote for its float16 Casts lists the Casts last), and checks every input's
/// definition itself.
pub(crate) fn check_rules(
    proto: &onnx::ModelProto,
    dir: Option<&Path>,
    ordered: bool,
) -> Result<(), CheckError> {
    let graph = check_model_header(proto)?;
    check_graph_values(graph)?;
    crate::wellformed::check_elem_types(graph)?;
    let mut defined: HashSet<&str> = graph.input.iter().map(value_name).collect();
    check_initializers(proto, graph, dir, &mut defined)?;
    check_nodes(proto, graph, &mut defined, ordered)?;
    for vi in &graph.output {
        if !defined.contains(value_name(vi)) {
            return Err(ImportError::UndefinedOutput {
                tensor: value_name(vi).to_string(),
            }
            .into());
        }
    }
    Ok(())
}

fn value_name(vi: &onnx::ValueInfoProto) -> &str {
    vi.name.as_deref().unwrap_or("")
}

/// Rule 1: the importer's header rules, at least one opset import from IR version 3 on,
/// unique metadata keys and a named graph.
fn check_model_header(proto: &onnx::ModelProto) -> Result<&onnx::GraphProto, CheckError> {
    let graph = check_header(proto, Path::new(MODEL))?;
    let ir = proto.ir_version.unwrap_or(0);
    if ir >= 3 && proto.opset_import.is_empty() {
        return Err(CheckError::NoOpsetImport { ir });
    }
    let mut keys: HashSet<&str> = HashSet::new();
    for p in &proto.metadata_props {
        let key = p.key.as_deref().unwrap_or("");
        if !keys.insert(key) {
            return Err(CheckError::MetadataKeyTwice { key: key.into() });
        }
    }
    if graph.name.as_deref().unwrap_or("").is_empty() {
        return Err(CheckError::GraphUnnamed);
    }
    Ok(graph)
}

/// Rule 2: graph inputs and outputs named and typed; inputs named once.
fn check_graph_values(graph: &onnx::GraphProto) -> Result<(), CheckError> {
    let lists: [(&'static str, &[onnx::ValueInfoProto]); 2] =
        [("input", &graph.input), ("output", &graph.output)];
    for (list, values) in lists {
        for (index, vi) in values.iter().enumerate() {
            let bad = |what: &str| CheckError::ValueInfo {
                list,
                index,
                name: value_name(vi).to_string(),
                what: what.to_string(),
            };
            if value_name(vi).is_empty() {
                return Err(bad("it has no name"));
            }
            let missing = match vi.r#type.as_ref().map(|t| &t.value) {
                None => Some("it has no type"),
                Some(None) => Some("its type holds none of the kinds ONNX defines"),
                Some(Some(Value::TensorType(t))) => tensor_type_missing(t.elem_type, &t.shape),
                Some(Some(Value::SparseTensorType(t))) => {
                    tensor_type_missing(t.elem_type, &t.shape)
                }
                Some(Some(Value::SequenceType(s))) => s
                    .elem_type
                    .is_none()
                    .then_some("its sequence type has no element type"),
                Some(Some(Value::MapType(m))) => (m.key_type.is_none() || m.value_type.is_none())
                    .then_some("its map type lacks its key or value type"),
                Some(Some(_)) => None,
            };
            if let Some(what) = missing {
                return Err(bad(what));
            }
        }
    }
    let mut seen: HashSet<&str> = HashSet::new();
    for vi in &graph.input {
        if !seen.insert(value_name(vi)) {
            return Err(ImportError::ListedTwice {
                tensor: value_name(vi).to_string(),
                list: "graph inputs",
            }
            .into());
        }
    }
    Ok(())
}

fn tensor_type_missing(
    elem_type: Option<i32>,
    shape: &Option<onnx::TensorShapeProto>,
) -> Option<&'static str> {
    if elem_type.is_none() {
        Some("its tensor type has no element type")
    } else if shape.is_none() {
        Some("its tensor type has no shape (ONNX requires one on graph inputs and outputs; an unknown dim is a dim without value)")
    } else {
        None
    }
}

/// Rule 3: every initializer, adding its name to `defined`.
fn check_initializers<'g>(
    proto: &onnx::ModelProto,
    graph: &'g onnx::GraphProto,
    dir: Option<&Path>,
    defined: &mut HashSet<&'g str>,
) -> Result<(), CheckError> {
    let ir = proto.ir_version.unwrap_or(0);
    let inputs: HashSet<&str> = graph.input.iter().map(value_name).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    for t in &graph.initializer {
        let name = t.name.as_deref().unwrap_or("");
        let bad = |what: &str| CheckError::Initializer {
            tensor: name.to_string(),
            what: what.to_string(),
        };
        if !seen.insert(name) {
            return Err(ImportError::ListedTwice {
                tensor: name.to_string(),
                list: "initializers",
            }
            .into());
        }
        if ir <= 3 && !inputs.contains(name) {
            return Err(bad(
                "it is not a graph input, which IR version 3 and below require of an initializer",
            ));
        }
        let dtype = tensor_dtype(name, t.data_type.unwrap_or(0))?;
        if dtype.is_none() {
            return Err(bad("its element type is UNDEFINED (0)"));
        }
        let shape = dims_shape(name, &t.dims)?;
        check_size(name, dtype, &shape)?;
        let fields = value_fields(t);
        if t.data_location == Some(DataLocation::External as i32) {
            if let Some(field) = fields.first() {
                return Err(bad(&format!(
                    "its data is external, yet it holds {field} too"
                )));
            }
        } else {
            let empty = t.dims.contains(&0);
            if empty && !fields.is_empty() {
                return Err(bad(&format!(
                    "it has 0 elements, yet it holds {}",
                    fields.join(" and ")
                )));
            }
            if !empty && fields.len() > 1 {
                return Err(bad(&format!(
                    "it holds {}; a tensor holds its data in one value field",
                    fields.join(" and ")
                )));
            }
            crate::wellformed::check_initializer_data(name, t, dtype)?;
        }
        init_data(name, t, dtype, &shape, Path::new(MODEL), dir)?;
        defined.insert(name);
    }
    Ok(())
}

/// The value fields of `t` that hold data, by their ONNX names.
fn value_fields(t: &onnx::TensorProto) -> Vec<&'static str> {
    [
        (!t.float_data.is_empty(), "float_data"),
        (!t.int32_data.is_empty(), "int32_data"),
        (!t.string_data.is_empty(), "string_data"),
        (!t.int64_data.is_empty(), "int64_data"),
        (
            t.raw_data.as_ref().is_some_and(|r| !r.is_empty()),
            "raw_data",
        ),
        (!t.double_data.is_empty(), "double_data"),
        (!t.uint64_data.is_empty(), "uint64_data"),
    ]
    .into_iter()
    .filter_map(|(held, name)| held.then_some(name))
    .collect()
}

/// Rule 4: the nodes in file order, each input defined before it and each output new.
fn check_nodes<'g>(
    proto: &onnx::ModelProto,
    graph: &'g onnx::GraphProto,
    defined: &mut HashSet<&'g str>,
    ordered: bool,
) -> Result<(), CheckError> {
    let imported: HashSet<String> = proto
        .opset_import
        .iter()
        .map(|o| normalise_domain(o.domain.as_deref().unwrap_or("")))
        .collect();
    let produced: HashSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    for (i, np) in graph.node.iter().enumerate() {
        let label = node_label(np, i);
        check_node(proto, np, &label, &imported)?;
        for input in np.input.iter().filter(|s| ordered && !s.is_empty()) {
            if defined.contains(input.as_str()) {
                continue;
            }
            if produced.contains(input.as_str()) {
                return Err(CheckError::UseBeforeDef {
                    node: label,
                    tensor: input.clone(),
                });
            }
            return Err(ImportError::UndefinedInput {
                node: label,
                op: np.op_type.clone().unwrap_or_default(),
                tensor: input.clone(),
            }
            .into());
        }
        for output in np.output.iter().filter(|s| !s.is_empty()) {
            if !defined.insert(output.as_str()) {
                return Err(ImportError::DuplicateProducer {
                    tensor: output.clone(),
                    first: first_definition(graph, output, i),
                    second: label,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// What defines `name` before node `before`: a graph input, an initializer or a node.
fn first_definition(graph: &onnx::GraphProto, name: &str, before: usize) -> String {
    if graph.input.iter().any(|v| value_name(v) == name) {
        return "the graph inputs".into();
    }
    if graph
        .initializer
        .iter()
        .any(|t| t.name.as_deref() == Some(name))
    {
        return "the initializers".into();
    }
    graph.node[..before]
        .iter()
        .enumerate()
        .find(|(_, n)| n.output.iter().any(|o| o == name))
        .map_or_else(String::new, |(i, n)| node_label(n, i))
}

/// One node's op, domain and attributes.
fn check_node(
    proto: &onnx::ModelProto,
    np: &onnx::NodeProto,
    label: &str,
    imported: &HashSet<String>,
) -> Result<(), CheckError> {
    let bad = |what: String| CheckError::Node {
        node: label.to_string(),
        what,
    };
    if np.op_type.as_deref().unwrap_or("").is_empty() {
        return Err(bad("it has no op type".into()));
    }
    if np.input.is_empty() && np.output.is_empty() {
        return Err(bad("it has no input and no output".into()));
    }
    crate::wellformed::check_attributes(np, label, proto.ir_version.unwrap_or(0))?;
    crate::wellformed::check_op(proto, np, label)?;
    crate::wellformed::check_schema(proto, np, label)?;
    let domain = normalise_domain(np.domain.as_deref().unwrap_or(""));
    if !imported.contains(&domain) {
        return Err(bad(format!("its domain `{domain}` has no opset import")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{attr_i, ModelBuilder};
    use crate::onnx::attribute_proto::AttributeType;
    use crate::DType;

    /// `y = Add(x, w)`, then `z = Neg(y)`: every rule met.
    fn model() -> onnx::ModelProto {
        ModelBuilder::new(17)
            .input("x", DType::F32, "2")
            .init_f32("w", &[2], &[1.0, 2.0])
            .node("Add", &["x", "w"], &["y"])
            .node("Neg", &["y"], &["z"])
            .output("z", DType::F32, "2")
            .build()
    }

    fn graph(m: &mut onnx::ModelProto) -> &mut onnx::GraphProto {
        m.graph.as_mut().unwrap()
    }

    /// The message of the rule `broken` breaks, after checking that the model met them all.
    fn broken(f: impl FnOnce(&mut onnx::ModelProto)) -> String {
        let mut m = model();
        check_model_rules(&m, None).unwrap();
        f(&mut m);
        check_model_rules(&m, None).unwrap_err().to_string()
    }

    fn assert_names(e: &str, parts: &[&str]) {
        for p in parts {
            assert!(e.contains(p), "`{p}` not in: {e}");
        }
    }

    #[test]
    fn a_tensor_assigned_twice_is_refused() {
        let e = broken(|m| graph(m).node[1].output[0] = "y".into());
        assert_names(&e, &["`y`", "assigned twice", "`Add_y`", "`Neg_z`"]);
        let e = broken(|m| graph(m).node[0].output[0] = "w".into());
        assert_names(&e, &["`w`", "the initializers"]);
        let e = broken(|m| graph(m).node[0].output[0] = "x".into());
        assert_names(&e, &["`x`", "the graph inputs"]);
    }

    #[test]
    fn a_graph_input_or_initializer_listed_twice_is_refused() {
        let e = broken(|m| {
            let x = graph(m).input[0].clone();
            graph(m).input.push(x);
        });
        assert_names(&e, &["`x`", "graph inputs"]);
        let e = broken(|m| {
            let w = graph(m).initializer[0].clone();
            graph(m).initializer.push(w);
        });
        assert_names(&e, &["`w`", "initializers"]);
    }

    #[test]
    fn nodes_out_of_topological_order_are_refused() {
        let e = broken(|m| graph(m).node.swap(0, 1));
        assert_names(&e, &["`Neg_z`", "`y`", "topological order"]);
        let e = broken(|m| graph(m).node[1].input[0] = "nowhere".into());
        assert_names(&e, &["`Neg_z`", "`nowhere`", "no node produces"]);
    }

    #[test]
    fn an_undefined_graph_output_is_refused() {
        let e = broken(|m| graph(m).output[0].name = Some("q".into()));
        assert_names(&e, &["`q`", "graph output"]);
    }

    #[test]
    fn unknown_domains_ops_and_opsets_are_refused() {
        let e = broken(|m| graph(m).node[1].op_type = Some("Negate".into()));
        assert_names(&e, &["`Neg_z`", "`Negate`", "no such operator"]);
        // Gelu exists from opset 20: at 17 it is unknown.
        let e = broken(|m| graph(m).node[1].op_type = Some("Gelu".into()));
        assert_names(&e, &["`Neg_z`", "from opset 20", "imports opset 17"]);
        let e = broken(|m| graph(m).node[1].domain = Some("my.domain".into()));
        assert_names(&e, &["`Neg_z`", "`my.domain`"]);
        let e = broken(|m| graph(m).node[1].domain = Some("com.microsoft".into()));
        assert_names(&e, &["`Neg_z`", "imports no opset"]);
        let e = broken(|m| graph(m).node[1].op_type = Some(String::new()));
        assert_names(&e, &["`Neg_z`", "no op type"]);
        let e = broken(|m| {
            graph(m).node[1].input.clear();
            graph(m).node[1].output.clear();
            graph(m).output[0].name = Some("y".into());
        });
        assert_names(&e, &["`Neg_z`", "no input and no output"]);
    }

    #[test]
    fn a_node_meets_its_ops_schema() {
        let e = broken(|m| graph(m).node[1].attribute.push(attr_i("axis", 0)));
        assert_names(
            &e,
            &["`Neg_z`", "Neg (opset 13)", "`axis`", "does not name"],
        );
        let e = broken(|m| {
            graph(m).node[1].op_type = Some("Softmax".into());
            graph(m).node[1]
                .attribute
                .push(crate::build::attr_f("axis", 0.0));
        });
        assert_names(&e, &["`Neg_z`", "`axis`", "type FLOAT", "says INT"]);
        let e = broken(|m| graph(m).node[1].op_type = Some("Cast".into()));
        assert_names(
            &e,
            &["`Neg_z`", "Cast (opset 13)", "required attribute `to`"],
        );
        let e = broken(|m| graph(m).node[0].input.push("x".into()));
        assert_names(&e, &["`Add_y`", "3 inputs, outside 2..=2"]);
        let e = broken(|m| graph(m).node[0].input[1] = String::new());
        assert_names(&e, &["`Add_y`", "inputs #1 is required, and empty"]);
        let e = broken(|m| {
            graph(m).node[1].attribute.push(attr_i("__internal", 0));
            graph(m).node[1].attribute.push(attr_i("__internal", 1));
        });
        assert_names(&e, &["`Neg_z`", "`__internal` appears twice"]);
        let e = broken(|m| {
            m.opset_import[0].version = Some(10);
            graph(m).node[1].op_type = Some("Upsample".into());
        });
        assert_names(&e, &["`Neg_z`", "deprecates Upsample from opset 10"]);
    }

    #[test]
    fn every_tensor_type_has_an_element_type() {
        let e = broken(|m| {
            let mut vi = crate::build::value_info("y", DType::F32, "2");
            if let Some(Some(Value::TensorType(t))) = vi.r#type.as_mut().map(|t| &mut t.value) {
                t.elem_type = Some(0);
            }
            graph(m).value_info.push(vi);
        });
        assert_names(&e, &["`y`", "value_info", "without an element type"]);
    }

    #[test]
    fn a_local_functions_domain_must_be_imported() {
        let e = broken(|m| {
            graph(m).node[1].domain = Some("my.fns".into());
            graph(m).node[1].op_type = Some("Twice".into());
            m.functions.push(onnx::FunctionProto {
                name: Some("Twice".into()),
                domain: Some("my.fns".into()),
                ..Default::default()
            });
        });
        assert_names(&e, &["`Neg_z`", "`my.fns`", "no opset import"]);
    }

    #[test]
    fn ir_version_and_opset_imports_must_agree() {
        let e = broken(|m| m.opset_import.clear());
        assert_names(&e, &["IR version 10", "no opset_import"]);
        let e = broken(|m| m.ir_version = Some(2));
        assert_names(&e, &["IR version 2", "opset_import"]);
        let e = broken(|m| m.ir_version = None);
        assert_names(&e, &["no ir_version"]);
        let e = broken(|m| m.ir_version = Some(99));
        assert_names(&e, &["ir_version 99"]);
        let e = broken(|m| m.opset_import[0].version = Some(27));
        assert_names(&e, &["`ai.onnx` version 27"]);
        let e = broken(|m| {
            let twin = m.opset_import[0].clone();
            m.opset_import.push(twin);
        });
        assert_names(&e, &["`ai.onnx`", "twice"]);
    }

    #[test]
    fn initializers_below_ir_4_are_graph_inputs() {
        let e = broken(|m| m.ir_version = Some(3));
        assert_names(&e, &["`w`", "not a graph input"]);
        let mut m = model();
        m.ir_version = Some(3);
        let w = crate::build::value_info("w", DType::F32, "2");
        graph(&mut m).input.push(w);
        check_model_rules(&m, None).unwrap();
    }

    #[test]
    fn attributes_are_named_typed_and_hold_their_type() {
        let attr = |f: fn(&mut onnx::AttributeProto)| {
            move |m: &mut onnx::ModelProto| {
                let mut a = attr_i("axis", 0);
                f(&mut a);
                graph(m).node[1].attribute.push(a);
            }
        };
        let e = broken(attr(|a| a.name = None));
        assert_names(&e, &["`Neg_z`", "no name"]);
        let e = broken(attr(|a| a.r#type = None));
        assert_names(&e, &["`Neg_z`", "`axis`", "no type"]);
        let e = broken(attr(|a| a.r#type = Some(AttributeType::Float as i32)));
        assert_names(&e, &["`Neg_z`", "`axis`", "type is FLOAT", "INT value"]);
        let e = broken(attr(|a| a.f = Some(1.0)));
        assert_names(&e, &["`Neg_z`", "`axis`", "2 value fields"]);
    }

    #[test]
    fn initializer_data_matches_dims_and_element_type() {
        let e = broken(|m| graph(m).initializer[0].dims = vec![3]);
        assert_names(&e, &["`w`", "holds 8 raw_data bytes", "needs 12"]);
        let e = broken(|m| {
            let w = &mut graph(m).initializer[0];
            w.raw_data = None;
            w.float_data = vec![1.0];
        });
        assert_names(&e, &["`w`", "holds 1 float_data values", "needs 2"]);
        let e = broken(|m| graph(m).initializer[0].float_data = vec![1.0, 2.0]);
        assert_names(&e, &["`w`", "float_data and raw_data", "one value field"]);
        let e = broken(|m| graph(m).initializer[0].dims = vec![0]);
        assert_names(&e, &["`w`", "0 elements", "raw_data"]);
        let e = broken(|m| graph(m).initializer[0].data_type = Some(0));
        assert_names(&e, &["`w`", "UNDEFINED"]);
        let e = broken(|m| graph(m).initializer[0].data_type = Some(99));
        assert_names(&e, &["`w`", "element type code 99"]);
        let e = broken(|m| graph(m).initializer[0].dims = vec![-2]);
        assert_names(&e, &["`w`", "negative dim -2"]);
    }

    /// `w` made external at `location` (and `length`), its data in `w.data` of a fresh folder.
    fn external(location: &str, length: Option<&str>) -> (tempfile::TempDir, onnx::ModelProto) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.data"), [0u8; 8]).unwrap();
        let mut m = model();
        let w = &mut graph(&mut m).initializer[0];
        w.raw_data = None;
        w.data_location = Some(DataLocation::External as i32);
        let entry = |k: &str, v: &str| onnx::StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v.into()),
        };
        w.external_data = vec![entry("location", location)];
        if let Some(l) = length {
            w.external_data.push(entry("length", l));
        }
        (dir, m)
    }

    #[test]
    fn external_data_is_relative_inside_the_folder_and_of_its_length() {
        let (dir, m) = external("w.data", Some("8"));
        check_model_rules(&m, Some(dir.path())).unwrap();
        let (dir, m) = external("./w.data", None);
        check_model_rules(&m, Some(dir.path())).unwrap();
        let e = check_model_rules(&m, None).unwrap_err().to_string();
        assert_names(&e, &["`w`", "model's directory"]);
        let (dir, m) = external("w.data", Some("12"));
        let e = check_model_rules(&m, Some(dir.path())).unwrap_err();
        assert_names(&e.to_string(), &["`w`", "length 12", "hold 8 bytes"]);
        let (dir, m) = external("/etc/passwd", None);
        let e = check_model_rules(&m, Some(dir.path())).unwrap_err();
        assert_names(&e.to_string(), &["`w`", "`/etc/passwd`", "outside"]);
        let (dir, m) = external("../w.data", None);
        let e = check_model_rules(&m, Some(dir.path())).unwrap_err();
        assert_names(&e.to_string(), &["`w`", "`../w.data`", "outside"]);
        let (dir, m) = external("v.data", None);
        let e = check_model_rules(&m, Some(dir.path())).unwrap_err();
        assert_names(&e.to_string(), &["`w`", "v.data", "does not exist"]);
        let (dir, mut m) = external("w.data", None);
        graph(&mut m).initializer[0].float_data = vec![1.0, 2.0];
        let e = check_model_rules(&m, Some(dir.path())).unwrap_err();
        assert_names(&e.to_string(), &["`w`", "external", "float_data"]);
    }

    #[test]
    fn graph_inputs_and_outputs_are_named_and_typed() {
        let e = broken(|m| graph(m).input[0].r#type = None);
        assert_names(&e, &["input #0 `x`", "no type"]);
        let e = broken(|m| {
            if let Some(Some(Value::TensorType(t))) =
                graph(m).output[0].r#type.as_mut().map(|t| &mut t.value)
            {
                t.shape = None;
            }
        });
        assert_names(&e, &["output #0 `z`", "no shape"]);
        let e = broken(|m| {
            if let Some(Some(Value::TensorType(t))) =
                graph(m).input[0].r#type.as_mut().map(|t| &mut t.value)
            {
                t.elem_type = None;
            }
        });
        assert_names(&e, &["input #0 `x`", "no element type"]);
        let e = broken(|m| graph(m).output.push(onnx::ValueInfoProto::default()));
        assert_names(&e, &["output #1", "no name"]);
    }

    #[test]
    fn the_header_rules_name_the_graph_and_metadata() {
        let e = broken(|m| graph(m).name = Some(String::new()));
        assert_names(&e, &["graph has no name"]);
        let e = broken(|m| {
            let p = onnx::StringStringEntryProto {
                key: Some("k".into()),
                value: Some("v".into()),
            };
            m.metadata_props = vec![p.clone(), p];
        });
        assert_names(&e, &["`k`", "twice"]);
        let e = broken(|m| m.graph = None);
        assert_names(&e, &["has no graph"]);
    }
}
