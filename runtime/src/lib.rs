//! Running graphs on ONNX Runtime: paired comparison, peak memory, step time.
