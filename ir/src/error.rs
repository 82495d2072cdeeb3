//! Errors of reading, checking and writing graphs. Every message names the file, node or
//! tensor at fault.

use std::path::PathBuf;

/// Why a model could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A tensor typed two ways: a graph input and the initializer that overrides it, or a
    /// declaration and a value_info entry, of other element types or shapes.
    #[error("tensor `{tensor}` is {first} in {first_list} but {second} in {second_list}; ONNX's checker and ONNX Runtime refuse a tensor typed two ways")]
    TypedTwoWays {
        tensor: String,
        first_list: &'static str,
        first: String,
        second_list: &'static str,
        second: String,
    },
    /// A rule of ONNX's checker that the import's own steps do not apply
    /// ([`crate::check_model_rules`]): a graph output without a type, a node without an op
    /// type, an initializer holding two value fields.
    #[error("{0}")]
    Rules(Box<CheckError>),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is empty: expected an ONNX model (a serialized ModelProto)")]
    Empty { path: PathBuf },
    #[error("{path} is not a valid ONNX model (protobuf decoding failed: {source}); is the file truncated or of another format?")]
    Decode {
        path: PathBuf,
        source: prost::DecodeError,
    },
    #[error("{path} has ir_version {found}, newer than the {max} this build understands; re-export with an older ONNX or upgrade ckpt-opt")]
    IrVersionTooNew { path: PathBuf, found: i64, max: i64 },
    #[error("{path} has ir_version {found}: ONNX IR versions start at 1")]
    IrVersionInvalid { path: PathBuf, found: i64 },
    #[error("{path} has IR version {ir} and opset_import entries, which ONNX allows from IR version 3 on; set ir_version to 3 or newer")]
    OpsetsBeforeIr3 { path: PathBuf, ir: i64 },
    #[error("{path} imports opset `{domain}` version {version}, outside the versions this build knows ({known}); re-export the model at a released opset")]
    OpsetOutOfRange {
        path: PathBuf,
        domain: String,
        version: i64,
        known: String,
    },
    #[error("{path} imports opset `{domain}` twice; each domain may be imported once")]
    OpsetTwice { path: PathBuf, domain: String },
    #[error("{path} has no ir_version: not an ONNX model")]
    NoIrVersion { path: PathBuf },
    #[error("{path} has no graph")]
    NoGraph { path: PathBuf },
    #[error("node `{node}` ({op}) reads tensor `{tensor}`, which no node produces and is neither a graph input nor an initializer")]
    UndefinedInput {
        node: String,
        op: String,
        tensor: String,
    },
    #[error("tensor `{tensor}` is assigned twice: by {first} and by {second}")]
    DuplicateProducer {
        tensor: String,
        first: String,
        second: String,
    },
    #[error("tensor `{tensor}` is listed twice among the {list}; each name is assigned once")]
    ListedTwice { tensor: String, list: &'static str },
    #[error("node `{node}` uses op `{op}` of domain `{domain}`, which no registry knows: {why}")]
    UnknownOp {
        node: String,
        op: String,
        domain: String,
        why: String,
    },
    #[error("node {node} does not meet the schema of {op} (opset {version}) that ONNX's checker and ONNX Runtime verify: {what}")]
    SchemaMismatch {
        node: String,
        op: String,
        version: i64,
        what: String,
    },
    #[error("node `{node}` has attribute `{attribute}` whose type and data disagree: {what}")]
    AttributeMismatch {
        node: String,
        attribute: String,
        what: String,
    },
    #[error("initializer `{tensor}` ({dtype}, dims {shape}) holds {found} {unit} where its shape needs {expected}; the data is truncated or the dims are wrong")]
    InitializerDataSize {
        tensor: String,
        shape: String,
        dtype: &'static str,
        found: u64,
        expected: u64,
        unit: String,
    },
    #[error("the graph has a cycle through nodes {}", nodes.join(" -> "))]
    Cycle { nodes: Vec<String> },
    #[error("tensor `{tensor}` has unknown element type code {code} (this build knows codes 1..=23, ONNX IR <= 11)")]
    UnknownDType { tensor: String, code: i32 },
    #[error("`{tensor}` ({list}) is typed as {kind}; ckpt-opt plans graphs whose values are all dense tensors")]
    NotATensor {
        tensor: String,
        list: &'static str,
        kind: &'static str,
    },
    #[error("tensor `{tensor}` ({list}) has a tensor type without an element type (or UNDEFINED, 0), which ONNX Runtime refuses to load")]
    UndefinedElemType { tensor: String, list: &'static str },
    #[error("tensor `{tensor}` has a negative dim {value} at axis {axis}")]
    NegativeDim {
        tensor: String,
        axis: usize,
        value: i64,
    },
    #[error("tensor `{tensor}` with shape {shape} has a byte size that overflows 64 bits")]
    SizeOverflow { tensor: String, shape: String },
    #[error("initializer `{tensor}` has external data at `{location}`, which resolves outside the model directory {dir}; external data must live beside the model")]
    ExternalOutsideDir {
        tensor: String,
        location: String,
        dir: PathBuf,
    },
    #[error("initializer `{tensor}` has external data file {path}, which does not exist")]
    ExternalMissing { tensor: String, path: PathBuf },
    #[error("initializer `{tensor}` declares external data length {declared}, but its shape {shape} and element type hold {size} bytes; fix or remove the `length` entry")]
    ExternalLengthMismatch {
        tensor: String,
        declared: u64,
        size: u64,
        shape: String,
    },
    #[error("initializer `{tensor}` has external data file {path} with {links} hard links; a data file must have one link (a hard link can bring in a file from outside the model's directory), so copy it instead")]
    ExternalHardLinked {
        tensor: String,
        path: PathBuf,
        links: u64,
    },
    #[error("initializer `{tensor}` has malformed external data: {what}")]
    ExternalMalformed { tensor: String, what: String },
    #[error("graph output `{tensor}` is not produced by any node, input or initializer")]
    UndefinedOutput { tensor: String },
}

/// An ONNX rule a model breaks, found by [`crate::check_model_rules`]. Each message names
/// the node, tensor or field at fault and the rule.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A rule the importer enforces on every input.
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error("the model has IR version {ir} and no opset_import; from IR version 3 on, a model imports the ONNX opset it uses")]
    NoOpsetImport { ir: i64 },
    #[error("metadata_props has the key `{key}` twice; each key is set once")]
    MetadataKeyTwice { key: String },
    #[error("the graph has no name; ONNX requires a non-empty graph name")]
    GraphUnnamed,
    #[error("graph {list} #{index} `{name}`: {what}")]
    ValueInfo {
        list: &'static str,
        index: usize,
        name: String,
        what: String,
    },
    #[error("initializer `{tensor}`: {what}")]
    Initializer { tensor: String, what: String },
    #[error("node {node}: {what}")]
    Node { node: String, what: String },
    #[error("node {node} reads tensor `{tensor}` before any earlier node, graph input or initializer defines it; ONNX requires the nodes in topological order")]
    UseBeforeDef { node: String, tensor: String },
}

/// Why a graph could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("refusing to overwrite the input model {path}; choose another output path")]
    WouldOverwriteInput { path: PathBuf },
    #[error("refusing to write {path}: it is {kind}, not a regular file (a rename would replace it); choose a file path")]
    NotARegularFile { path: PathBuf, kind: &'static str },
    #[error(
        "cannot write {path}: the graph has external data but no model directory to read it from"
    )]
    NoExternalDataDir { path: PathBuf },
    #[error("the output staged for {path} does not read back: {what}")]
    ReadBack { path: PathBuf, what: String },
    #[error("cannot copy external data of `{tensor}` from {from} to {to}: {source}")]
    ExternalCopy {
        tensor: String,
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
}

/// A broken graph invariant, found by [`crate::verify`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("node {node} reads tensor `{tensor}` before it is defined in file order")]
    UseBeforeDef { node: String, tensor: String },
    #[error("tensor `{tensor}` has {count} producers")]
    MultipleProducers { tensor: String, count: usize },
    #[error("the graph has a cycle")]
    Cycle,
    #[error("tensor `{tensor}`: {what}")]
    Inconsistent { tensor: String, what: String },
}
