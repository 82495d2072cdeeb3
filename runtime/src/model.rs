//! A model as it crosses this crate's API: serialized ONNX bytes, a label for errors, and the
//! directory its external data lives in.
//!
//! Sessions are created from the bytes, so ORT would resolve external data against the
//! process's current directory; with a directory, every session is told it
//! (`session.model_external_initializers_file_folder_path`), so a `w.data` in the cwd is never
//! read. A model with external data must carry its directory.

use std::path::Path;

/// A serialized ONNX model, the label errors call it by (usually its file name), and the
/// directory its external data resolves against (`None`: the model has none).
#[derive(Debug, Clone, Copy)]
pub struct Model<'a> {
    pub label: &'a str,
    pub bytes: &'a [u8],
    pub dir: Option<&'a Path>,
}

impl<'a> Model<'a> {
    pub fn new(label: &'a str, bytes: &'a [u8]) -> Model<'a> {
        Model {
            label,
            bytes,
            dir: None,
        }
    }

    /// The same model, its external data resolved against `dir`.
    pub fn in_dir(self, dir: Option<&'a Path>) -> Model<'a> {
        Model { dir, ..self }
    }
}

impl<'a> From<&'a [u8]> for Model<'a> {
    fn from(bytes: &'a [u8]) -> Model<'a> {
        Model {
            label: "<in-memory model>",
            bytes,
            dir: None,
        }
    }
}

impl<'a> From<&'a Vec<u8>> for Model<'a> {
    fn from(bytes: &'a Vec<u8>) -> Model<'a> {
        Model::from(bytes.as_slice())
    }
}
