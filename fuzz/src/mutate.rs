//! The model mutators, seeded by one xorshift generator ([`Rng`]): a model file is mutated as
//! bytes (bits flipped, bytes set, inserted, cut) or, decoded, as structure (inputs rewired,
//! nodes dropped, ops swapped, dims, dtypes and attributes broken, initializers and outputs
//! removed, opsets and external-data lengths broken, long chains spliced in). The same seed
//! gives the same mutations.

use ckpt_ir::onnx::{self, ModelProto};

/// A xorshift64 generator: the fuzzer's only source of randomness.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced: xorshift stays at 0).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `0..n` (0 for `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// One to four byte-level mutations: flip a bit, set a byte, insert a byte, cut the tail.
pub fn mutate_bytes(bytes: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..1 + rng.below(4) {
        if bytes.is_empty() {
            bytes.push(rng.next_u64() as u8);
            continue;
        }
        let at = rng.below(bytes.len());
        match rng.below(4) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes[at] = rng.next_u64() as u8,
            2 => bytes.insert(at, rng.next_u64() as u8),
            _ => bytes.truncate(at.max(1)),
        }
    }
}

/// One structural mutation: the model still decodes, but its graph is wrong in one of many ways.
pub fn mutate_structure(model: &mut ModelProto, rng: &mut Rng) {
    mutate_structure_up_to(model, rng, LONGEST_CHAIN);
}

/// The longest chain [`mutate_structure`] splices in (1 time in 256).
pub const LONGEST_CHAIN: usize = 100_000;

/// [`mutate_structure`] with spliced chains cut to `longest_chain` links (the generator draws
/// the same numbers: the other mutations are the same).
pub fn mutate_structure_up_to(model: &mut ModelProto, rng: &mut Rng, longest_chain: usize) {
    let Some(g) = model.graph.as_mut() else {
        return;
    };
    let names: Vec<String> = g
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(g.input.iter().filter_map(|v| v.name.clone()))
        .collect();
    match rng.below(12) {
        9 => mutate_opsets(model, rng),
        10 => mutate_external_length(g, rng),
        11 => lengthen_chain(g, rng, longest_chain),
        0 if !g.node.is_empty() => {
            let k = rng.below(g.node.len());
            let n = &mut g.node[k];
            if !n.input.is_empty() {
                let slot = rng.below(n.input.len());
                n.input[slot] = if rng.below(3) == 0 || names.is_empty() {
                    "nonexistent".into()
                } else {
                    names[rng.below(names.len())].clone()
                };
            }
        }
        1 if !g.node.is_empty() => {
            let k = rng.below(g.node.len());
            g.node.remove(k);
        }
        2 if !g.node.is_empty() => {
            const OPS: [&str; 10] = [
                "MatMul",
                "Add",
                "Relu",
                "Reshape",
                "Gather",
                "Softmax",
                "Transpose",
                "Concat",
                "Where",
                "NoSuchOp",
            ];
            let k = rng.below(g.node.len());
            g.node[k].op_type = Some(OPS[rng.below(OPS.len())].into());
        }
        3 => {
            let vis: Vec<&mut onnx::ValueInfoProto> = g
                .value_info
                .iter_mut()
                .chain(g.input.iter_mut())
                .chain(g.output.iter_mut())
                .collect();
            let n = vis.len();
            let k = rng.below(n);
            if let Some(vi) = vis.into_iter().nth(k) {
                if let Some(onnx::type_proto::Value::TensorType(t)) =
                    vi.r#type.as_mut().and_then(|t| t.value.as_mut())
                {
                    if let Some(shape) = t.shape.as_mut() {
                        if !shape.dim.is_empty() {
                            let d = rng.below(shape.dim.len());
                            let v = [0i64, 1, -3, 1 << 40, 7][rng.below(5)];
                            shape.dim[d].value =
                                Some(onnx::tensor_shape_proto::dimension::Value::DimValue(v));
                        }
                    }
                    if rng.below(4) == 0 {
                        t.elem_type = Some([0, 7, 9, 16, 99][rng.below(5)]);
                    }
                }
            }
        }
        4 if !g.initializer.is_empty() => {
            let k = rng.below(g.initializer.len());
            g.initializer.remove(k);
        }
        5 => {
            let attrs: Vec<&mut onnx::AttributeProto> = g
                .node
                .iter_mut()
                .flat_map(|n| n.attribute.iter_mut())
                .collect();
            let n = attrs.len();
            let k = rng.below(n);
            if let Some(a) = attrs.into_iter().nth(k) {
                a.i = Some([-9i64, 0, 5, 1 << 40][rng.below(4)]);
                if !a.ints.is_empty() {
                    let k = rng.below(a.ints.len());
                    a.ints[k] = [-9i64, 0, 99][rng.below(3)];
                }
            }
        }
        6 if g.node.len() > 1 => {
            let (a, b) = (rng.below(g.node.len()), rng.below(g.node.len()));
            if let (Some(o), true) = (
                g.node[a].output.first().cloned(),
                !g.node[b].output.is_empty(),
            ) {
                g.node[b].output[0] = o;
            }
        }
        7 if !g.initializer.is_empty() => {
            let k = rng.below(g.initializer.len());
            let t = &mut g.initializer[k];
            match rng.below(3) {
                0 => t.raw_data = Some(Vec::new().into()),
                1 => t.dims.push(3),
                _ => t.data_type = Some(99),
            }
        }
        _ => {
            if !g.output.is_empty() {
                let k = rng.below(g.output.len());
                g.output.remove(k);
            }
        }
    }
}

/// An opset import's version set outside the registry's range or to its edge (0, -1, 1, 26,
/// 27, 2^40, `i64::MAX`), a domain imported twice, or the IR version set below 3.
fn mutate_opsets(model: &mut ModelProto, rng: &mut Rng) {
    match rng.below(4) {
        0 => model.ir_version = Some([0i64, 1, 2][rng.below(3)]),
        1 if !model.opset_import.is_empty() => {
            let k = rng.below(model.opset_import.len());
            let twin = model.opset_import[k].clone();
            model.opset_import.push(twin);
        }
        _ if !model.opset_import.is_empty() => {
            let k = rng.below(model.opset_import.len());
            let v = [0i64, -1, 1, 26, 27, 1 << 40, i64::MAX][rng.below(7)];
            model.opset_import[k].version = Some(v);
        }
        _ => {}
    }
}

/// An initializer's external-data `length` removed, or set to a wrong, negative, huge or
/// malformed value (an embedded one is made external first).
fn mutate_external_length(g: &mut onnx::GraphProto, rng: &mut Rng) {
    if g.initializer.is_empty() {
        return;
    }
    let k = rng.below(g.initializer.len());
    let t = &mut g.initializer[k];
    if t.data_location != Some(onnx::tensor_proto::DataLocation::External as i32) {
        t.raw_data = None;
        t.data_location = Some(onnx::tensor_proto::DataLocation::External as i32);
        t.external_data = vec![onnx::StringStringEntryProto {
            key: Some("location".into()),
            value: Some("w.data".into()),
        }];
    }
    t.external_data
        .retain(|e| e.key.as_deref() != Some("length"));
    let value = ["0", "100", "-1", "18446744073709551615", "abc"][rng.below(5)];
    if rng.below(6) != 0 {
        t.external_data.push(onnx::StringStringEntryProto {
            key: Some("length".into()),
            value: Some(value.into()),
        });
    }
}

/// A chain of `Neg` nodes spliced in front of one node input: 10 to 1,000 nodes, and 1 time
/// in 256 a chain of 100,000 (deeper than any recursive walk survives).
fn lengthen_chain(g: &mut onnx::GraphProto, rng: &mut Rng, longest: usize) {
    let Some(k) = (!g.node.is_empty()).then(|| rng.below(g.node.len())) else {
        return;
    };
    if g.node[k].input.is_empty() {
        return;
    }
    let slot = rng.below(g.node[k].input.len());
    let links = if rng.below(256) == 0 {
        LONGEST_CHAIN
    } else {
        [10, 100, 1000][rng.below(3)]
    }
    .min(longest);
    ckpt_ir::build::splice_neg_chain(g, k, slot, links, "fuzz_chain_");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_seeded() {
        let base: Vec<u8> = (0..64).collect();
        let run = |seed| {
            let mut rng = Rng::new(seed);
            let mut b = base.clone();
            mutate_bytes(&mut b, &mut rng);
            b
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), base);
    }
}
