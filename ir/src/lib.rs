//! ONNX wire types, import/export and the graph IR.
//!
//! `import_file` reads a model into a [`Graph`] (typed ids, first-class tensors with
//! dtypes and symbolic shapes); `export` writes it back, losslessly for everything no
//! patch changed; [`Patch`] is the only way to change a graph's structure, and
//! [`verify`] checks the invariants after each one; [`check_model_rules`] checks an exported
//! model against ONNX's rules before it is written; [`print_graph`] is the stable text
//! form snapshot tests compare, and [`parse_graph`] reads it back (test graphs are text).
//!
//! Stage by stage, from `main` to the receipt: `docs/design/pipeline.md`.

/// The ONNX protobuf messages, generated from `proto/onnx.proto`.
#[allow(clippy::all, missing_docs)]
pub mod onnx {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub mod build;
mod check;
pub mod deployment;
mod dtype;
mod error;
mod export;
mod graph;
mod ids;
mod import;
pub mod ops;
pub mod opset;
pub mod ort;
mod parse;
mod patch;
pub mod profile;
mod replace;
mod shape;
mod text;
mod verify;
mod wellformed;

pub use check::check_model_rules;
pub use deployment::Deployment;
pub use dtype::DType;
pub use error::{CheckError, ExportError, ImportError, VerifyError};
pub use export::{
    check_output_target, export, export_bytes, external_data_files, remove_temp_files,
    write_atomic, write_model, DataPlacement, Staging, Written,
};
pub use graph::{
    normalise_domain, Graph, InitData, Node, NodeOrigin, Tensor, TensorSource, ONNX_DOMAIN,
};
pub use ids::{NodeId, TensorId};
pub use import::{
    embed_small_external, import_bytes, import_file, import_model, normalise_location,
    read_external_value, MAX_EXTERNAL_VALUE_BYTES, MAX_IR_VERSION,
};
pub use parse::{parse_graph, ParseError};
pub use patch::{
    Applied, FreshNode, Guard, Move, NewConstant, NewNode, NewTensor, Patch, PatchError, Rewire,
    Substitute, TensorRef,
};
pub use profile::Profile;
pub use shape::{Bindings, Dim, Poly, Shape, ShapeError};
pub use text::{print_graph, print_graph_with, print_patch, type_str, Numbering};
pub use verify::verify;
pub use wellformed::check_type_constraints;

pub use bytes::Bytes;
pub use prost::Message;
