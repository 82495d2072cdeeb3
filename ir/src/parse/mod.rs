//! Text form → [`Graph`]: [`parse_graph`] reads what [`crate::print_graph`] writes, so that
//! print → parse → print is the identity, and test graphs are written as text.
//!
//! One fact a line, as the printer writes them (see its module doc); blank lines and lines
//! starting with `#` are skipped, and spaces between tokens are free:
//!
//! ```text
//! ir_version 10                                  (optional: 10 when absent)
//! opset ai.onnx 17                               (one per imported domain)
//! input %0 "x": f32[batch,4]                     (a graph input)
//! input+init %1 "s": f32[] = [0.5]               (an initializer also listed as an input)
//! init %2 "w": f32[4,4] = [..]                   (up to 8 values; none: type only)
//! init %3 "e": f32[4] external("w.bin", offset=0, length=16)
//! %4 "h": f32[batch,4] = MatMul(%0, %2) {transB=0}  # n0 "mm" [forward]
//! %5 "y": ?[?], _ = com.microsoft::Op(%4, _)     (`_`: an omitted optional slot)
//! output %4 "h"                                  (the name is optional and checked)
//! ```
//!
//! Rules:
//! - `%N` numbers a tensor once, on the line that defines it; a node may read only tensors
//!   of earlier lines, and nodes are in file order as written. The numbers need not be dense:
//!   tensor ids are given in line order, so a printed graph reads back with the same numbers.
//! - dtype `?` is unknown, shape `[?]` an unknown rank; a dim is a number, a symbol (any
//!   characters but `,[]()*+` and space: `seq`, `?1`) or a parenthesised polynomial
//!   (`(2*batch*seq + 4)`) as the shape printer writes it.
//! - Attributes: `1` int, `1.0` float (Rust's float form: `1e-5`, `NaN`, `inf`), `"s"` string,
//!   `[1, 2]` ints, `[1.0]` floats, `["a"]` strings, `ints[]`/`floats[]`/`strings[]` empty
//!   lists, `f32[2, 3] [..]` a tensor (values as for initializers), `@name` a reference to a
//!   function attribute, `?` untyped. Subgraphs, tensor lists, sparse tensors and type protos
//!   print as a count or kind only (`graph(3 nodes)`, `tensors(2)`, `sparse`, `type`) and
//!   read back as that many empty entries: the text form is not meant for them.
//! - The comment after a node gives its id (`n7`) and name; both are optional, and the
//!   rest of the line (a phase note) is ignored. Ids written must be distinct and below
//!   twice the node count (a graph a patch removed nodes from prints ids past its count;
//!   the ids no line takes are left empty); unwritten ones take the smallest free ids in
//!   line order.
//! - A parsed graph keeps the values that were printed and no others: planning needs types
//!   only; a model to run needs every constant it reads printed (small ones are).
//!
//! This module reads lines into a graph (the [`Parser`]'s lines, node ids settled at the end,
//! the graph verified); `cursor.rs` owns the tokens of one line, `attr.rs` attribute values.

mod attr;
mod cursor;

use std::collections::{HashMap, HashSet};

use crate::dtype::DType;
use crate::graph::{normalise_domain, Graph, InitData, Node, NodeOrigin, Tensor, TensorSource};
use crate::ids::{NodeId, TensorId};
use crate::onnx;
use crate::shape::Shape;
use cursor::Cur;

/// Why text is not a graph: where (1-based line and column, in characters), what the parser
/// expected there, and what it found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: expected {expected}, found {found}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub expected: String,
    pub found: String,
}

/// Read the text form of a graph.
pub fn parse_graph(text: &str) -> Result<Graph, ParseError> {
    let mut p = Parser::default();
    let mut last = 0;
    for (i, line) in text.lines().enumerate() {
        last = i + 1;
        let mut c = Cur {
            line: i + 1,
            text: line,
            pos: 0,
        };
        c.ws();
        if c.at_end() || c.peek() == Some('#') {
            continue;
        }
        p.line(&mut c)?;
    }
    p.finish(last + 1)
}

/// What a reader of the text form returns.
type R<T> = Result<T, ParseError>;

/// A node line, before node ids are settled.
struct PendingNode {
    line: usize,
    /// The id written in its comment, and its column.
    id: Option<(usize, usize)>,
    node: Node,
}

/// The lines read so far: the model's facts, the tensors by number, the nodes in line order.
#[derive(Default)]
struct Parser {
    ir_version: Option<i64>,
    opsets: Vec<onnx::OperatorSetIdProto>,
    tensors: Vec<Tensor>,
    by_num: HashMap<usize, TensorId>,
    names: HashSet<String>,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    initializers: Vec<onnx::TensorProto>,
    nodes: Vec<PendingNode>,
}

impl Parser {
    fn line(&mut self, c: &mut Cur) -> R<()> {
        if matches!(c.peek(), Some('%' | '=' | '_')) {
            return self.node(c);
        }
        let start = c.pos;
        match c.word() {
            "ir_version" => {
                self.ir_version = Some(c.number("an IR version")?);
                c.end()
            }
            "opset" => {
                let d = c.take(|ch| !ch.is_whitespace());
                if d.is_empty() {
                    return Err(c.err("a domain"));
                }
                let v = c.number("an opset version")?;
                let d = normalise_domain(d);
                self.opsets.push(onnx::OperatorSetIdProto {
                    domain: Some(if d == crate::ONNX_DOMAIN {
                        String::new()
                    } else {
                        d
                    }),
                    version: Some(v),
                });
                c.end()
            }
            kw @ ("input" | "input+init" | "init") => {
                let (num, at) = c.tref()?;
                let name = c.string()?;
                c.expect(":")?;
                let (dtype, shape) = c.ty()?;
                let mut proto = onnx::TensorProto {
                    name: Some(name.clone()),
                    data_type: dtype.map(DType::code),
                    dims: shape
                        .iter()
                        .flat_map(|s| s.dims())
                        .map(|d| d.known().map_or(0, |k| k as i64))
                        .collect(),
                    ..Default::default()
                };
                let mut data = InitData::Embedded;
                if kw != "input" {
                    if kw == "init" && c.eat("external(") {
                        let location = c.string()?;
                        c.expect(",")?;
                        c.expect("offset=")?;
                        let offset: u64 = c.number("an offset")?;
                        c.expect(",")?;
                        c.expect("length=")?;
                        let length: Option<u64> = if c.eat("?") {
                            None
                        } else {
                            Some(c.number("a length or `?`")?)
                        };
                        c.expect(")")?;
                        proto.data_location =
                            Some(onnx::tensor_proto::DataLocation::External as i32);
                        let mut entry = |k: &str, v: String| {
                            proto.external_data.push(onnx::StringStringEntryProto {
                                key: Some(k.to_string()),
                                value: Some(v),
                            })
                        };
                        entry("location", location.clone());
                        entry("offset", offset.to_string());
                        if let Some(l) = length {
                            entry("length", l.to_string());
                        }
                        data = InitData::External {
                            location,
                            offset,
                            length,
                        };
                    } else if c.eat("=") {
                        proto.raw_data = Some(c.values(dtype)?.into());
                    }
                }
                c.end()?;
                let source = match kw {
                    "input" => TensorSource::GraphInput,
                    _ => TensorSource::Initializer {
                        data,
                        overridable: kw == "input+init",
                    },
                };
                let id = self.define(c, num, at, name, dtype, shape, source)?;
                if kw != "init" {
                    self.inputs.push(id);
                }
                if kw != "input" {
                    self.initializers.push(proto);
                }
                Ok(())
            }
            "output" => {
                let (num, at) = c.tref()?;
                let id = self.get(c, num, at)?;
                c.ws();
                if c.peek() == Some('"') {
                    let name_at = c.pos;
                    let name = c.string()?;
                    if name != self.tensors[id.index()].name {
                        return Err(c.err_at(
                            name_at,
                            format!("the name of %{num}, {:?}", self.tensors[id.index()].name),
                        ));
                    }
                }
                c.end()?;
                self.tensors[id.index()].is_output = true;
                self.outputs.push(id);
                Ok(())
            }
            _ => Err(c.err_at(
                start,
                "a line: ir_version, opset, input, input+init, init, output or a node `%N \"name\": type = Op(…)`",
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn define(
        &mut self,
        c: &Cur,
        num: usize,
        at: usize,
        name: String,
        dtype: Option<DType>,
        shape: Option<Shape>,
        source: TensorSource,
    ) -> R<TensorId> {
        if self.by_num.contains_key(&num) {
            return Err(c.err_at(at, format!("a tensor number not used above (%{num} is)")));
        }
        if !self.names.insert(name.clone()) {
            return Err(c.err_at(at, format!("a tensor name not used above ({name:?} is)")));
        }
        let id = TensorId::from_index(self.tensors.len());
        self.tensors.push(Tensor {
            name,
            dtype,
            shape,
            source,
            is_output: false,
            consumers: Vec::new(),
        });
        self.by_num.insert(num, id);
        Ok(id)
    }

    fn get(&self, c: &Cur, num: usize, at: usize) -> R<TensorId> {
        self.by_num.get(&num).copied().ok_or_else(|| {
            c.err_at(
                at,
                format!("a tensor defined on an earlier line (%{num} is not)"),
            )
        })
    }

    fn node(&mut self, c: &mut Cur) -> R<()> {
        let line = c.line;
        let mut defs = Vec::new();
        c.ws();
        if c.peek() != Some('=') {
            loop {
                if c.eat("_") {
                    defs.push(None);
                } else {
                    let (num, at) = c.tref()?;
                    let name = c.string()?;
                    c.expect(":")?;
                    let (dtype, shape) = c.ty()?;
                    defs.push(Some((num, at, name, dtype, shape)));
                }
                if !c.eat(",") {
                    break;
                }
            }
        }
        c.expect("=")?;
        c.ws();
        let op_at = c.pos;
        let label = c.take(|ch| ch.is_alphanumeric() || "_.:".contains(ch));
        let (domain, op_type) = match label.rsplit_once("::") {
            Some((d, o)) => (d, o),
            None => ("", label),
        };
        if op_type.is_empty() {
            return Err(c.err_at(op_at, "an op (`MatMul`, `com.microsoft::Op`)"));
        }
        c.expect("(")?;
        let mut inputs = Vec::new();
        if !c.eat(")") {
            loop {
                if c.eat("_") {
                    inputs.push(None);
                } else {
                    let (num, at) = c.tref()?;
                    inputs.push(Some(self.get(c, num, at)?));
                }
                if c.eat(")") {
                    break;
                }
                c.expect(",")?;
            }
        }
        let mut attribute = Vec::new();
        if c.eat("{") {
            loop {
                attribute.push(c.attr()?);
                if c.eat("}") {
                    break;
                }
                c.expect(",")?;
            }
        }
        let mut id = None;
        let mut name = String::new();
        if c.eat("#") {
            c.ws();
            let at = c.pos;
            if c.rest().starts_with('n')
                && c.rest()[1..].starts_with(|ch: char| ch.is_ascii_digit())
            {
                c.bump();
                let column = c.text[..at].chars().count() + 1;
                id = Some((c.number("a node id `nN`")?, column));
            }
            c.ws();
            if c.peek() == Some('"') {
                name = c.string()?;
            }
        } else {
            c.end()?;
        }
        // Outputs are defined after the inputs are read: a node cannot read its own output.
        let mut outputs = Vec::new();
        for d in defs {
            outputs.push(match d {
                None => None,
                Some((num, at, tname, dtype, shape)) => {
                    Some(self.define(c, num, at, tname, dtype, shape, TensorSource::GraphInput)?)
                }
            });
        }
        let dom = normalise_domain(domain);
        let names = |v: &[Option<TensorId>], t: &[Tensor]| -> Vec<String> {
            v.iter()
                .map(|x| x.map_or_else(String::new, |x| t[x.index()].name.clone()))
                .collect()
        };
        let proto = onnx::NodeProto {
            input: names(&inputs, &self.tensors),
            output: names(&outputs, &self.tensors),
            name: (!name.is_empty()).then(|| name.clone()),
            op_type: Some(op_type.to_string()),
            domain: Some(if dom == crate::ONNX_DOMAIN {
                String::new()
            } else {
                dom.clone()
            }),
            attribute,
            ..Default::default()
        };
        self.nodes.push(PendingNode {
            line,
            id,
            node: Node {
                name,
                domain: dom,
                op_type: op_type.to_string(),
                inputs,
                outputs,
                origin: NodeOrigin::Imported,
                proto: std::sync::Arc::new(proto),
                def: Default::default(),
            },
        });
        Ok(())
    }

    fn finish(self, end_line: usize) -> R<Graph> {
        // Node ids run to the node count, or past it where a printed graph had nodes a
        // patch removed (ids no line takes are left empty), up to twice the count.
        let count = self.nodes.len();
        let limit = 2 * count + 1;
        let bound = self
            .nodes
            .iter()
            .filter_map(|pn| pn.id.map(|(id, _)| id + 1))
            .filter(|&b| b <= limit)
            .max()
            .unwrap_or(0)
            .max(count);
        // Settle node ids: written ones, then the smallest free ones in line order.
        let mut slot: Vec<Option<usize>> = vec![None; bound];
        for (i, pn) in self.nodes.iter().enumerate() {
            if let Some((id, column)) = pn.id {
                if id >= bound || slot[id].is_some() {
                    return Err(ParseError {
                        line: pn.line,
                        column,
                        expected: format!(
                            "a node id below twice the node count {count}, used by no other line"
                        ),
                        found: format!("`n{id}`"),
                    });
                }
                slot[id] = Some(i);
            }
        }
        let mut free = (0..bound)
            .filter(|&k| slot[k].is_none())
            .collect::<Vec<_>>()
            .into_iter();
        let mut ids = vec![0usize; count];
        for (i, pn) in self.nodes.iter().enumerate() {
            ids[i] = match pn.id {
                Some((id, _)) => id,
                None => free.next().unwrap_or(0),
            };
            slot[ids[i]] = Some(i);
        }
        let model = onnx::ModelProto {
            ir_version: Some(self.ir_version.unwrap_or(10)),
            opset_import: self.opsets,
            graph: Some(onnx::GraphProto {
                name: Some("g".into()),
                input: self
                    .inputs
                    .iter()
                    .map(|&t| value_info(&self.tensors[t.index()]))
                    .collect(),
                output: self
                    .outputs
                    .iter()
                    .map(|&t| value_info(&self.tensors[t.index()]))
                    .collect(),
                initializer: self.initializers,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut graph = Graph {
            model: std::sync::Arc::new(model),
            model_decls: Default::default(),
            g: Default::default(),
            tensors: Vec::new(),
            by_name: Default::default(),
            added_names: HashMap::new(),
            order: Vec::new(),
            inputs: self.inputs,
            outputs: self.outputs,
            added_value_info: Vec::new(),
            dir: None,
            removed: Default::default(),
        };
        for t in self.tensors {
            graph.add_tensor(t);
        }
        let mut nodes: Vec<Option<PendingNode>> = self.nodes.into_iter().map(Some).collect();
        let mut inputs: Vec<Vec<Option<TensorId>>> = vec![Vec::new(); bound];
        for (k, s) in slot.iter().enumerate() {
            // An empty id holds a node in no file order, reading and writing nothing, as a
            // node a patch removed is held.
            let Some(pn) = s.and_then(|i| nodes[i].take()) else {
                let id = graph.add_node(empty_node());
                debug_assert_eq!(id.index(), k);
                continue;
            };
            let mut node = pn.node;
            inputs[k] = std::mem::take(&mut node.inputs);
            let id = graph.add_node(node);
            debug_assert_eq!(id.index(), k);
        }
        for &k in &ids {
            let id = NodeId::from_index(k);
            for &t in inputs[k].iter().flatten() {
                graph.connect(t, id);
            }
            graph.node_mut(id).inputs = std::mem::take(&mut inputs[k]);
            graph.order.push(id);
        }
        crate::verify(&graph).map_err(|e| ParseError {
            line: end_line,
            column: 1,
            expected: "a valid graph".to_string(),
            found: e.to_string(),
        })?;
        Ok(graph)
    }
}

/// A node in no file order, reading and writing nothing: what an id no line takes holds.
fn empty_node() -> crate::graph::Node {
    crate::graph::Node {
        name: String::new(),
        domain: crate::graph::ONNX_DOMAIN.to_string(),
        op_type: String::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        origin: crate::graph::NodeOrigin::Imported,
        proto: Default::default(),
        def: Default::default(),
    }
}

/// The value_info of a graph input or output, as typed in the text.
fn value_info(t: &Tensor) -> onnx::ValueInfoProto {
    crate::build::tensor_value_info(&t.name, t.dtype, t.shape.as_ref())
}
