//! ONNX wire types, import/export and the graph IR.
