//! A model as it crosses this crate's API: serialized ONNX bytes and a label for errors.

/// A serialized ONNX model and the label errors call it by (usually its file name).
#[derive(Debug, Clone, Copy)]
pub struct Model<'a> {
    pub label: &'a str,
    pub bytes: &'a [u8],
}

impl<'a> Model<'a> {
    pub fn new(label: &'a str, bytes: &'a [u8]) -> Model<'a> {
        Model { label, bytes }
    }
}

impl<'a> From<&'a [u8]> for Model<'a> {
    fn from(bytes: &'a [u8]) -> Model<'a> {
        Model {
            label: "<in-memory model>",
            bytes,
        }
    }
}

impl<'a> From<&'a Vec<u8>> for Model<'a> {
    fn from(bytes: &'a Vec<u8>) -> Model<'a> {
        Model::from(bytes.as_slice())
    }
}
