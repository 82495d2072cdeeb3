//! Transposes folded into their readers (`ckpt_passes::fold`): a 2-D swap every reader of
//! which (MatMuls and Gemms of 2-D f32/f64 operands, Transposes back) can do without.

use std::path::Path;

use ckpt_ir::build::{attr_ints, ModelBuilder};
use ckpt_ir::{import_bytes, DType};
use ckpt_passes::fold::fold_transposes;

fn swap(m: ModelBuilder, from: &str, to: &str) -> ModelBuilder {
    m.node_with(
        "Transpose",
        &[from],
        &[to],
        vec![attr_ints("perm", &[1, 0])],
    )
}

/// Five MatMuls: one folds its first operand (`y1`), one its second (`y2`, default perm);
/// one reads a transpose another node reads too, one a transpose that is a graph output, one
/// i64 operands: none of those three folds.
#[test]
fn only_a_swap_one_matmul_reads_alone_is_folded() {
    let m = ModelBuilder::new(20)
        .input("a", DType::F32, "4,3")
        .input("b", DType::F32, "4,5")
        .input("c", DType::F32, "5,4")
        .input("d", DType::F32, "2,4")
        .input("i", DType::I64, "4,3")
        .input("j", DType::I64, "4,5");
    let m = swap(m, "a", "ta").node("MatMul", &["ta", "b"], &["y1"]);
    let m = m
        .node("Transpose", &["c"], &["tc"])
        .node("MatMul", &["d", "tc"], &["y2"]);
    let m = swap(m, "b", "tb")
        .node("MatMul", &["tb", "a"], &["y3"])
        .node("Neg", &["tb"], &["y4"]);
    let m = swap(m, "c", "tc2").node("MatMul", &["tc2", "c"], &["y5"]);
    let m = swap(m, "i", "ti").node("MatMul", &["ti", "j"], &["y6"]);
    let bytes = m
        .output("y1", DType::F32, "3,5")
        .output("y2", DType::F32, "2,5")
        .output("y3", DType::F32, "5,3")
        .output("y4", DType::F32, "5,4")
        .output("tc2", DType::F32, "4,5")
        .output("y5", DType::F32, "4,4")
        .output("y6", DType::I64, "3,5")
        .bytes();
    let mut g = import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap();
    ckpt_ir::ops::infer_into(&mut g).unwrap();
    let patch = fold_transposes(&g, "folded");
    let reader = |y: &str| g.tensor(g.tensor_id(y).unwrap()).producer().unwrap();
    let folded: Vec<_> = patch.substitutes.iter().map(|s| s.node).collect();
    assert_eq!(folded, [reader("y1"), reader("y2")], "{patch}");
    assert_eq!(patch.removals, [reader("ta"), reader("tc")], "{patch}");
    assert!(patch.to_string().contains("{transB=1}"), "{patch}");
    patch.apply(&mut g).unwrap();
    assert_eq!(g.node_count(), 9);
}

/// On the GPT-2 fixture every linear layer's products read their operands untransposed: the
/// 9 weight gradients (the language-model head's among them) and the 9 forward products
/// become Gemms, the 9 backward products that read the weight transposed back read the
/// weight itself, and 27 Transposes go (of the gradients, of the weights, and back).
#[test]
fn gpt2s_linear_layers_read_their_operands_untransposed() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpt2_d0_aot.onnx");
    let g = ckpt_ir::import_file(&path).unwrap();
    let patch = fold_transposes(&g, "folded");
    assert_eq!(
        (
            patch.substitutes.len(),
            patch.rewires.len(),
            patch.removals.len()
        ),
        (18, 9, 27)
    );
    let trans_b = patch
        .substitutes
        .iter()
        .filter(|s| {
            s.attributes
                .iter()
                .any(|a| a.name.as_deref() == Some("transB"))
        })
        .count();
    assert_eq!(trans_b, 9, "{patch}");
    let mut folded = g.clone();
    patch.apply(&mut folded).unwrap();
    assert_eq!(folded.node_count(), g.node_count() - 27);
    assert!(folded
        .nodes()
        .iter()
        .all(|&n| folded.node(n).op_type != "Transpose"
            || folded
                .node(n)
                .attr_ints("perm")
                .is_some_and(|p| p.len() != 2)));
}

/// A weight read transposed by a product and by a Transpose back: both readers keep the
/// values and read the weight itself; a Gemm's own flags flip; a transpose read by a Neg, or
/// whose transpose back a Transpose reads, stays.
#[test]
fn a_transpose_every_reader_does_without_is_folded() {
    let m = ModelBuilder::new(20)
        .input("w", DType::F32, "3,4")
        .input("x", DType::F32, "2,4")
        .input("dy", DType::F32, "2,3")
        .input("v", DType::F32, "4,3")
        .input("u", DType::F32, "3,4");
    // The forward product and its transpose back.
    let m = swap(m, "w", "wt").node("MatMul", &["x", "wt"], &["y"]);
    let m = swap(m, "wt", "w_back").node("MatMul", &["dy", "w_back"], &["dx"]);
    // A Gemm already transposing its A reads a transposed A: both flips cancel.
    let m = swap(m, "v", "vt").node_with(
        "Gemm",
        &["vt", "w"],
        &["g"],
        vec![ckpt_ir::build::attr_i("transA", 1)],
    );
    // Not folded: a Neg reads it; a Transpose reads its transpose back.
    let m = swap(m, "u", "ut")
        .node("MatMul", &["x", "ut"], &["z"])
        .node("Neg", &["ut"], &["nz"]);
    let m = swap(m, "w", "w2t");
    let m = swap(m, "w2t", "w2").node("MatMul", &["x", "w2t"], &["z2"]);
    let m = swap(m, "w2", "w3");
    let bytes = m
        .output("y", DType::F32, "2,3")
        .output("dx", DType::F32, "2,4")
        .output("g", DType::F32, "4,4")
        .output("z", DType::F32, "2,3")
        .output("nz", DType::F32, "4,3")
        .output("z2", DType::F32, "2,3")
        .output("w3", DType::F32, "4,3")
        .bytes();
    let mut g = import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap();
    ckpt_ir::ops::infer_into(&mut g).unwrap();
    let patch = fold_transposes(&g, "folded");
    let writer = |y: &str| g.tensor(g.tensor_id(y).unwrap()).producer().unwrap();
    let text = patch.to_string();
    assert_eq!(
        patch.removals,
        [writer("w_back"), writer("wt"), writer("vt")],
        "{text}"
    );
    let substituted: Vec<_> = patch.substitutes.iter().map(|s| s.node).collect();
    assert_eq!(substituted, [writer("y"), writer("g")], "{text}");
    // The Gemm's transA and the folded one cancel: it reads v as it is, no flag.
    assert!(patch.substitutes[1].attributes.is_empty(), "{text}");
    assert_eq!(patch.rewires.len(), 1, "{text}");
    let dx = writer("dx");
    assert_eq!(patch.rewires[0].node, dx);
    patch.apply(&mut g).unwrap();
    assert_eq!(g.node(dx).inputs[1], g.tensor_id("w"));
}
