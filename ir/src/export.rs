//! [`Graph`] → ModelProto → file. The imported model is the template: only the node list
//! (in the graph's file order, names from its tensors) and the value_info of tensors that
//! patches created are regenerated, so an unchanged import exports to the same message.

use std::io::Write;
use std::path::{Path, PathBuf};

use prost::Message;

use crate::error::ExportError;
use crate::graph::Graph;
use crate::onnx;

/// The graph as a ModelProto.
pub fn export(graph: &Graph) -> onnx::ModelProto {
    let mut model = (*graph.model).clone();
    let g = model.graph.get_or_insert_with(Default::default);
    g.node = graph
        .order
        .iter()
        .map(|&id| {
            let node = graph.node(id);
            let mut p = (*node.proto).clone();
            p.input = node
                .inputs
                .iter()
                .map(|t| t.map_or_else(String::new, |t| graph.tensor(t).name.clone()))
                .collect();
            p.output = node
                .outputs
                .iter()
                .map(|t| t.map_or_else(String::new, |t| graph.tensor(t).name.clone()))
                .collect();
            p
        })
        .collect();
    g.value_info.extend(graph.added_value_info.iter().cloned());
    model
}

/// The graph serialized.
pub fn export_bytes(graph: &Graph) -> Vec<u8> {
    export(graph).encode_to_vec()
}

/// Write `bytes` to `path` atomically (temporary file in the same directory, then rename).
/// Refuses to overwrite `input` (the model the bytes were derived from).
/// Whether `path` may be written by [`write_atomic`]: absent, or a regular file (a symlink,
/// FIFO, device or directory would be replaced by the rename, or never be written at all).
pub fn check_output_target(path: &Path) -> Result<(), ExportError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let t = meta.file_type();
    let kind = if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        return Ok(());
    };
    Err(ExportError::NotARegularFile {
        path: path.to_path_buf(),
        kind,
    })
}

pub fn write_atomic(path: &Path, bytes: &[u8], input: Option<&Path>) -> Result<(), ExportError> {
    check_output_target(path)?;
    if let Some(input) = input {
        let same = match (path.canonicalize(), input.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => path == input,
        };
        if same {
            return Err(ExportError::WouldOverwriteInput {
                path: path.to_path_buf(),
            });
        }
    }
    let io = |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}
