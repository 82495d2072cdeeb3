//! File → [`Graph`]. Decodes the ModelProto without copying raw tensor bytes, builds
//! first-class tensors with dtypes and (symbolic) shapes from inputs, outputs,
//! initializers and value_info, and rejects malformed graphs with an error that names
//! the node or tensor. External data is located and checked: its location must name a
//! regular file inside the model's directory (lexically, `x/../w.data` stays inside; and
//! canonically, so a symlink cannot leave), other than the model file itself, holding the
//! bytes the tensor claims. Only the few bytes of small integer constants that shape
//! inference needs (axes, shapes, pads, slice bounds; at most [`MAX_EXTERNAL_VALUE_BYTES`])
//! are ever read, by [`read_external_value`], never a whole weight file.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use petgraph::stable_graph::StableDiGraph;
use prost::Message;

use crate::dtype::DType;
use crate::error::ImportError;
use crate::graph::{normalise_domain, Graph, InitData, Node, NodeOrigin, Tensor, TensorSource};
use crate::ids::{NodeId, TensorId};
use crate::onnx;
use crate::shape::{Dim, Shape};

/// The newest ONNX IR version the schema in `proto/onnx.proto` covers.
pub const MAX_IR_VERSION: i64 = 11;

/// Read and import the model at `path`.
pub fn import_file(path: &Path) -> Result<Graph, ImportError> {
    let data = std::fs::read(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let dir = path.parent().map(|p| {
        if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        }
    });
    import_bytes(Bytes::from(data), path, dir)
}

/// Import a serialized model. `path` is only used in messages; `dir` is where external
/// data is looked for (`None`: external data is an error).
pub fn import_bytes(data: Bytes, path: &Path, dir: Option<&Path>) -> Result<Graph, ImportError> {
    if data.is_empty() {
        return Err(ImportError::Empty {
            path: path.to_path_buf(),
        });
    }
    let model = onnx::ModelProto::decode(data).map_err(|source| ImportError::Decode {
        path: path.to_path_buf(),
        source,
    })?;
    import_model(model, path, dir)
}

/// Import a decoded model: its header checked, then the graph's inputs, initializers, nodes
/// (outputs first, then inputs, then the cycle check), outputs and value_info, in that order;
/// then the rest of ONNX's rules ([`crate::check_model_rules`]).
pub fn import_model(
    model: onnx::ModelProto,
    path: &Path,
    dir: Option<&Path>,
) -> Result<Graph, ImportError> {
    let proto_graph = check_header(&model, path)?.clone();
    crate::wellformed::check_elem_types(&proto_graph)?;
    let mut graph = Graph {
        model: std::sync::Arc::new(model),
        model_decls: Default::default(),
        g: StableDiGraph::new(),
        tensors: Vec::new(),
        by_name: Default::default(),
        added_names: HashMap::new(),
        order: Vec::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        added_value_info: Vec::new(),
        dir: dir.map(Path::to_path_buf),
        removed: Default::default(),
    };
    let mut unknown_dims = 0usize;
    add_inputs(&mut graph, &proto_graph, &mut unknown_dims)?;
    add_initializers(&mut graph, &proto_graph, path)?;
    let ids = add_nodes(&mut graph, &proto_graph)?;
    connect_inputs(&mut graph, &proto_graph, &ids)?;
    if graph.has_cycle() {
        return Err(ImportError::Cycle {
            nodes: cycle_names(&graph),
        });
    }
    add_outputs(&mut graph, &proto_graph, &mut unknown_dims)?;
    // value_info for intermediates.
    for vi in &proto_graph.value_info {
        let name = vi.name.clone().unwrap_or_default();
        if let Some(&id) = graph.by_name.get(&name) {
            apply_type(&mut graph, id, vi, &mut unknown_dims)?;
        }
    }
    // The rest of ONNX's rules, which the steps above do not apply: the model imported is one
    // onnx's checker accepts, as every output written is.
    crate::check::check_rules(graph.model(), dir, false)
        .map_err(|e| ImportError::Rules(Box::new(e)))?;
    Ok(graph)
}

/// The model's graph, once its IR version, its opset imports and the graph itself are there.
pub(crate) fn check_header<'m>(
    model: &'m onnx::ModelProto,
    path: &Path,
) -> Result<&'m onnx::GraphProto, ImportError> {
    let ir = model.ir_version.ok_or_else(|| ImportError::NoIrVersion {
        path: path.to_path_buf(),
    })?;
    if ir > MAX_IR_VERSION {
        return Err(ImportError::IrVersionTooNew {
            path: path.to_path_buf(),
            found: ir,
            max: MAX_IR_VERSION,
        });
    }
    crate::opset::check_opset_imports(model, path)?;
    model.graph.as_ref().ok_or_else(|| ImportError::NoGraph {
        path: path.to_path_buf(),
    })
}

/// The graph inputs, each named once.
fn add_inputs(
    graph: &mut Graph,
    proto_graph: &onnx::GraphProto,
    unknown_dims: &mut usize,
) -> Result<(), ImportError> {
    for vi in &proto_graph.input {
        let name = vi.name.clone().unwrap_or_default();
        if graph.by_name.contains_key(&name) {
            return Err(ImportError::ListedTwice {
                tensor: name,
                list: "graph inputs",
            });
        }
        let (dtype, shape) = value_type(vi, unknown_dims)?;
        let id = graph.add_tensor(Tensor {
            name,
            dtype,
            shape,
            source: TensorSource::GraphInput,
            is_output: false,
            consumers: Vec::new(),
        });
        graph.inputs.push(id);
    }
    Ok(())
}

/// The initializers, their data checked and located (an initializer that is also a graph
/// input is overridable), then the sparse ones not named already.
fn add_initializers(
    graph: &mut Graph,
    proto_graph: &onnx::GraphProto,
    path: &Path,
) -> Result<(), ImportError> {
    for init in &proto_graph.initializer {
        let name = init.name.clone().unwrap_or_default();
        let dtype = tensor_dtype(&name, init.data_type.unwrap_or(0))?;
        let shape = dims_shape(&name, &init.dims)?;
        check_size(&name, dtype, &shape)?;
        if init.data_location != Some(onnx::tensor_proto::DataLocation::External as i32) {
            crate::wellformed::check_initializer_data(&name, init, dtype)?;
        }
        let data = init_data(&name, init, dtype, &shape, path, graph.dir.as_deref())?;
        match graph.by_name.get(&name).copied() {
            Some(id) if !graph.tensor(id).is_graph_input() => {
                return Err(ImportError::ListedTwice {
                    tensor: name,
                    list: "initializers",
                });
            }
            Some(id) => {
                let t = graph.tensor_mut(id);
                if unlike((t.dtype, t.shape.as_ref()), (dtype, Some(&shape))) {
                    return Err(ImportError::TypedTwoWays {
                        first_list: "the graph inputs",
                        first: type_text(t.dtype, t.shape.as_ref()),
                        second_list: "the initializers",
                        second: type_text(dtype, Some(&shape)),
                        tensor: name,
                    });
                }
                t.source = TensorSource::Initializer {
                    data,
                    overridable: true,
                };
                t.dtype = t.dtype.or(dtype);
                if t.shape.is_none() {
                    t.shape = Some(shape);
                }
            }
            None => {
                graph.add_tensor(Tensor {
                    name,
                    dtype,
                    shape: Some(shape),
                    source: TensorSource::Initializer {
                        data,
                        overridable: false,
                    },
                    is_output: false,
                    consumers: Vec::new(),
                });
            }
        }
    }
    for sp in &proto_graph.sparse_initializer {
        if let Some(values) = &sp.values {
            let name = values.name.clone().unwrap_or_default();
            let dtype = tensor_dtype(&name, values.data_type.unwrap_or(0))?;
            let shape = dims_shape(&name, &sp.dims)?;
            if !graph.by_name.contains_key(&name) {
                graph.add_tensor(Tensor {
                    name,
                    dtype,
                    shape: Some(shape),
                    source: TensorSource::Initializer {
                        data: InitData::Embedded,
                        overridable: false,
                    },
                    is_output: false,
                    consumers: Vec::new(),
                });
            }
        }
    }
    Ok(())
}

/// The nodes, checked, with their outputs (so that the producer of every name is known
/// before any input is read), in file order; their ids in that order.
fn add_nodes(
    graph: &mut Graph,
    proto_graph: &onnx::GraphProto,
) -> Result<Vec<NodeId>, ImportError> {
    let mut producer_label: HashMap<TensorId, String> = HashMap::new();
    let mut ids: Vec<NodeId> = Vec::with_capacity(proto_graph.node.len());
    for (i, np) in proto_graph.node.iter().enumerate() {
        let label = node_label(np, i);
        crate::wellformed::check_op(graph.model(), np, &label)?;
        let ir_version = graph.model().ir_version.unwrap_or(0);
        crate::wellformed::check_attributes(np, &label, ir_version)?;
        crate::wellformed::check_schema(graph.model(), np, &label)?;
        let mut outputs = Vec::with_capacity(np.output.len());
        for out in &np.output {
            if out.is_empty() {
                outputs.push(None);
                continue;
            }
            if let Some(&existing) = graph.by_name.get(out) {
                let first = match &graph.tensors[existing.index()].source {
                    TensorSource::GraphInput => "the graph inputs".to_string(),
                    TensorSource::Initializer { .. } => "the initializers".to_string(),
                    TensorSource::Node(_) => {
                        producer_label.get(&existing).cloned().unwrap_or_default()
                    }
                };
                return Err(ImportError::DuplicateProducer {
                    tensor: out.clone(),
                    first,
                    second: label,
                });
            }
            let id = graph.add_tensor(Tensor {
                name: out.clone(),
                dtype: None,
                shape: None,
                source: TensorSource::GraphInput, // replaced by add_node
                is_output: false,
                consumers: Vec::new(),
            });
            producer_label.insert(id, label.clone());
            outputs.push(Some(id));
        }
        let id = graph.add_node(Node {
            name: np.name.clone().unwrap_or_default(),
            domain: normalise_domain(np.domain.as_deref().unwrap_or("")),
            op_type: np.op_type.clone().unwrap_or_default(),
            inputs: Vec::new(),
            outputs,
            origin: NodeOrigin::Imported,
            proto: std::sync::Arc::new(np.clone()),
            def: Default::default(),
        });
        ids.push(id);
        graph.order.push(id);
    }
    Ok(ids)
}

/// Each node's inputs, every name defined somewhere in the graph; an edge per distinct
/// input tensor.
fn connect_inputs(
    graph: &mut Graph,
    proto_graph: &onnx::GraphProto,
    ids: &[NodeId],
) -> Result<(), ImportError> {
    for (i, np) in proto_graph.node.iter().enumerate() {
        let id = ids[i];
        let mut inputs = Vec::with_capacity(np.input.len());
        for name in &np.input {
            if name.is_empty() {
                inputs.push(None);
                continue;
            }
            match graph.by_name.get(name) {
                Some(&t) => inputs.push(Some(t)),
                None => {
                    return Err(ImportError::UndefinedInput {
                        node: node_label(np, i),
                        op: np.op_type.clone().unwrap_or_default(),
                        tensor: name.clone(),
                    })
                }
            }
        }
        let mut connected: Vec<TensorId> = Vec::with_capacity(inputs.len());
        for &t in inputs.iter().flatten() {
            if !connected.contains(&t) {
                connected.push(t);
                graph.connect_new(t, id);
            }
        }
        graph.node_mut(id).inputs = inputs;
    }
    Ok(())
}

/// The graph outputs, each a tensor defined in the graph, typed by their value_info.
fn add_outputs(
    graph: &mut Graph,
    proto_graph: &onnx::GraphProto,
    unknown_dims: &mut usize,
) -> Result<(), ImportError> {
    for vi in &proto_graph.output {
        let name = vi.name.clone().unwrap_or_default();
        let id = *graph
            .by_name
            .get(&name)
            .ok_or_else(|| ImportError::UndefinedOutput {
                tensor: name.clone(),
            })?;
        graph.tensor_mut(id).is_output = true;
        graph.outputs.push(id);
        apply_type(graph, id, vi, unknown_dims)?;
    }
    Ok(())
}

pub(crate) fn node_label(np: &onnx::NodeProto, index: usize) -> String {
    match np.name.as_deref() {
        Some(n) if !n.is_empty() => format!("`{n}`"),
        _ => format!("#{index} ({})", np.op_type.as_deref().unwrap_or("?")),
    }
}

fn apply_type(
    graph: &mut Graph,
    id: TensorId,
    vi: &onnx::ValueInfoProto,
    unknown: &mut usize,
) -> Result<(), ImportError> {
    let (dtype, shape) = value_type(vi, unknown)?;
    let t = graph.tensor_mut(id);
    if unlike((t.dtype, t.shape.as_ref()), (dtype, shape.as_ref())) {
        return Err(ImportError::TypedTwoWays {
            tensor: t.name.clone(),
            first_list: match t.source {
                TensorSource::GraphInput => "the graph inputs",
                TensorSource::Initializer { .. } => "the initializers",
                TensorSource::Node(_) => "the graph outputs",
            },
            first: type_text(t.dtype, t.shape.as_ref()),
            second_list: "the value_info",
            second: type_text(dtype, shape.as_ref()),
        });
    }
    if t.dtype.is_none() {
        t.dtype = dtype;
    }
    if t.shape.is_none() {
        t.shape = shape;
    }
    Ok(())
}

/// Whether two typings of one tensor disagree: both element types known and different, or
/// both shapes known with other ranks or other numbers on an axis.
fn unlike(a: (Option<DType>, Option<&Shape>), b: (Option<DType>, Option<&Shape>)) -> bool {
    let dims = match (a.1, b.1) {
        (Some(x), Some(y)) => {
            x.rank() != y.rank()
                || x.dims()
                    .iter()
                    .zip(y.dims())
                    .any(|(d, e)| matches!((d.known(), e.known()), (Some(p), Some(q)) if p != q))
        }
        _ => false,
    };
    dims || matches!((a.0, b.0), (Some(x), Some(y)) if x != y)
}

/// A typing as errors print it: `f32[2,3]`, `?` for an unknown part.
fn type_text(d: Option<DType>, s: Option<&Shape>) -> String {
    format!(
        "{}{}",
        d.map_or("?".into(), |d| d.to_string()),
        s.map_or("[?]".into(), |s| s.to_string())
    )
}

/// dtype and shape of a value_info; non-tensor types give `(None, None)`.
fn value_type(
    vi: &onnx::ValueInfoProto,
    unknown: &mut usize,
) -> Result<(Option<DType>, Option<Shape>), ImportError> {
    let name = vi.name.as_deref().unwrap_or("");
    let Some(onnx::type_proto::Value::TensorType(tt)) =
        vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Ok((None, None));
    };
    let dtype = tensor_dtype(name, tt.elem_type.unwrap_or(0))?;
    let shape = match &tt.shape {
        None => None,
        Some(sp) => {
            let mut dims = Vec::with_capacity(sp.dim.len());
            for (axis, d) in sp.dim.iter().enumerate() {
                use onnx::tensor_shape_proto::dimension::Value;
                dims.push(match &d.value {
                    Some(Value::DimValue(v)) if *v < 0 => {
                        return Err(ImportError::NegativeDim {
                            tensor: name.to_string(),
                            axis,
                            value: *v,
                        })
                    }
                    Some(Value::DimValue(v)) => Dim::Known(*v as u64),
                    Some(Value::DimParam(p)) if !p.is_empty() => Dim::Sym(p.clone()),
                    _ => {
                        *unknown += 1;
                        Dim::Sym(format!("?{unknown}"))
                    }
                });
            }
            Some(Shape(dims))
        }
    };
    if let Some(s) = &shape {
        check_size(name, dtype, s)?;
    }
    Ok((dtype, shape))
}

pub(crate) fn tensor_dtype(tensor: &str, code: i32) -> Result<Option<DType>, ImportError> {
    if code == 0 {
        return Ok(None);
    }
    DType::from_code(code)
        .map(Some)
        .ok_or_else(|| ImportError::UnknownDType {
            tensor: tensor.to_string(),
            code,
        })
}

pub(crate) fn dims_shape(tensor: &str, dims: &[i64]) -> Result<Shape, ImportError> {
    let mut out = Vec::with_capacity(dims.len());
    for (axis, &v) in dims.iter().enumerate() {
        if v < 0 {
            return Err(ImportError::NegativeDim {
                tensor: tensor.to_string(),
                axis,
                value: v,
            });
        }
        out.push(Dim::Known(v as u64));
    }
    Ok(Shape(out))
}

/// Known shapes must have a byte size that fits in 64 bits.
pub(crate) fn check_size(
    tensor: &str,
    dtype: Option<DType>,
    shape: &Shape,
) -> Result<(), ImportError> {
    if shape.dims().iter().all(|d| d.known().is_some()) {
        let bits = dtype.map_or(8, DType::bits);
        if shape.bytes_under(bits, &Default::default()).is_err() {
            return Err(ImportError::SizeOverflow {
                tensor: tensor.to_string(),
                shape: shape.to_string(),
            });
        }
    }
    Ok(())
}

/// The bytes an initializer of `dtype` and `shape` holds in external data: dims × element
/// size; `None` for strings and an unknown element type, which have no fixed size.
pub fn external_byte_len(dtype: Option<DType>, shape: &Shape) -> Option<u64> {
    let dtype = dtype.filter(|d| *d != DType::String)?;
    shape.bytes_under(dtype.bits(), &Default::default()).ok()
}

/// The bytes `t` holds in external data, from its dims and element type (`None` for a
/// negative dim, strings, an unknown element type or a size past 64 bits).
pub(crate) fn proto_byte_len(t: &onnx::TensorProto) -> Option<u64> {
    let dtype = DType::from_code(t.data_type.unwrap_or(0))?;
    let dims: Option<Vec<Dim>> = t
        .dims
        .iter()
        .map(|&d| u64::try_from(d).ok().map(Dim::Known))
        .collect();
    external_byte_len(Some(dtype), &Shape(dims?))
}

/// Where an initializer's bytes live. External data must hold exactly the tensor's bytes
/// (dims × element size): a declared `length` that disagrees is refused, an absent one is
/// taken to be that size; the data file must be a regular file with one link (a hard link
/// could make a file outside the model's directory look inside, as onnx's checker says).
pub(crate) fn init_data(
    name: &str,
    init: &onnx::TensorProto,
    dtype: Option<DType>,
    shape: &Shape,
    model_path: &Path,
    dir: Option<&Path>,
) -> Result<InitData, ImportError> {
    use std::os::unix::fs::MetadataExt;
    if init.data_location != Some(onnx::tensor_proto::DataLocation::External as i32) {
        return Ok(InitData::Embedded);
    }
    let malformed = |what: String| ImportError::ExternalMalformed {
        tensor: name.to_string(),
        what,
    };
    let size = external_byte_len(dtype, shape).ok_or_else(|| {
        malformed("external data needs a numeric element type of fixed size".to_string())
    })?;
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for e in &init.external_data {
        let value = e.value.clone().unwrap_or_default();
        match e.key.as_deref() {
            Some("location") => location = Some(value),
            Some("offset") => {
                offset = value
                    .parse()
                    .map_err(|_| malformed(format!("offset `{value}` is not a number")))?
            }
            Some("length") => {
                length = Some(
                    value
                        .parse()
                        .map_err(|_| malformed(format!("length `{value}` is not a number")))?,
                )
            }
            _ => {}
        }
    }
    if let Some(declared) = length.filter(|&l| l != size) {
        return Err(ImportError::ExternalLengthMismatch {
            tensor: name.to_string(),
            declared,
            size,
            shape: shape.to_string(),
        });
    }
    let location = location.ok_or_else(|| malformed("no `location` entry".to_string()))?;
    let dir =
        dir.ok_or_else(|| malformed("external data needs the model's directory".to_string()))?;
    let outside = || ImportError::ExternalOutsideDir {
        tensor: name.to_string(),
        location: location.clone(),
        dir: dir.to_path_buf(),
    };
    let inside = normalise_location(&location).ok_or_else(outside)?;
    if inside.as_os_str().is_empty() {
        return Err(malformed(format!(
            "location `{location}` names the model's directory, not a data file"
        )));
    }
    let full: PathBuf = dir.join(Path::new(&location));
    let meta = std::fs::metadata(&full).map_err(|_| ImportError::ExternalMissing {
        tensor: name.to_string(),
        path: full.clone(),
    })?;
    if !meta.is_file() {
        return Err(malformed(format!(
            "location `{location}` ({}) is not a regular file",
            full.display()
        )));
    }
    if meta.nlink() > 1 {
        return Err(ImportError::ExternalHardLinked {
            tensor: name.to_string(),
            path: full.clone(),
            links: meta.nlink(),
        });
    }
    // A symlink may still point outside: compare canonical paths.
    if let (Ok(cdir), Ok(cfile)) = (dir.canonicalize(), full.canonicalize()) {
        if !cfile.starts_with(&cdir) {
            return Err(outside());
        }
        if model_path.canonicalize().is_ok_and(|m| m == cfile) {
            return Err(malformed(format!(
                "location `{location}` is the model file itself"
            )));
        }
    }
    let end = offset
        .checked_add(size)
        .ok_or_else(|| malformed("offset + length overflows".to_string()))?;
    if end > meta.len() {
        return Err(malformed(format!(
            "bytes {offset}..{end} lie beyond the end of {} ({} bytes)",
            full.display(),
            meta.len()
        )));
    }
    Ok(InitData::External {
        location,
        offset,
        length,
    })
}

/// An external-data location as a path inside the model's directory, resolved lexically
/// (`x/../w.data` is `w.data`); `None` when it is absolute or climbs out.
pub fn normalise_location(location: &str) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in Path::new(location).components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// Embed every external initializer of at most [`MAX_EXTERNAL_VALUE_BYTES`] (its exact byte
/// range read from `dir`), leaving larger ones external. ONNX Runtime (1.31) cannot create a
/// session for a model whose shape constants (Slice bounds, Reshape shapes, axes) are
/// external ("Cannot parse data from external tensors"), so every model handed to it, and
/// every model written, has them embedded. Returns how many were embedded.
pub fn embed_small_external(model: &mut onnx::ModelProto, dir: &Path) -> usize {
    let mut count = 0;
    for t in model
        .graph
        .iter_mut()
        .flat_map(|g| g.initializer.iter_mut())
    {
        if t.data_location != Some(onnx::tensor_proto::DataLocation::External as i32) {
            continue;
        }
        let entry = |key: &str| {
            t.external_data
                .iter()
                .find(|e| e.key.as_deref() == Some(key))
                .and_then(|e| e.value.clone())
        };
        let Some(location) = entry("location") else {
            continue;
        };
        let offset = entry("offset").and_then(|v| v.parse().ok()).unwrap_or(0);
        let length = entry("length").and_then(|v| v.parse().ok());
        if let Some(raw) = read_external_value(dir, t, &location, offset, length) {
            t.raw_data = Some(raw.into());
            t.data_location = None;
            t.external_data.clear();
            count += 1;
        }
    }
    count
}

/// The most bytes of external data [`read_external_value`] reads for one tensor.
pub const MAX_EXTERNAL_VALUE_BYTES: u64 = 64 * 8;

/// The raw bytes of an external initializer small enough for shape inference to track (at
/// most [`MAX_EXTERNAL_VALUE_BYTES`], fixed-width element type): exactly its byte range of the
/// data file, read from `dir` (import checked the location). `None` for anything larger, or a
/// file that no longer holds the bytes.
pub fn read_external_value(
    dir: &Path,
    t: &onnx::TensorProto,
    location: &str,
    offset: u64,
    length: Option<u64>,
) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let dtype = DType::from_code(t.data_type?)?;
    let bits = dtype.bits();
    if dtype == DType::String || bits % 8 != 0 {
        return None;
    }
    let elems = t
        .dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))?;
    let bytes = elems.checked_mul(bits / 8)?;
    if bytes > MAX_EXTERNAL_VALUE_BYTES || length.is_some_and(|l| l != bytes) {
        return None;
    }
    let mut f = std::fs::File::open(dir.join(location)).ok()?;
    f.seek(SeekFrom::Start(offset)).ok()?;
    let mut buf = vec![0u8; bytes as usize];
    f.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// Names of nodes on some cycle, for the error message (Kosaraju's iterative walk).
fn cycle_names(graph: &Graph) -> Vec<String> {
    let sccs = petgraph::algo::kosaraju_scc(&graph.g);
    for scc in sccs {
        let self_loop = scc.len() == 1 && graph.g.find_edge(scc[0], scc[0]).is_some();
        if scc.len() > 1 || self_loop {
            let mut names: Vec<String> = scc
                .iter()
                .map(|&i| {
                    let id = NodeId(i.index() as u32);
                    graph.node(id).display_name(id)
                })
                .collect();
            names.sort();
            return names;
        }
    }
    Vec::new()
}
