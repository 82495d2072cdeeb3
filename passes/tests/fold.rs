//! Transposes folded into their readers (`ckpt_passes::fold`): only a 2-D swap that one
//! MatMul of 2-D f32/f64 operands reads alone.

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

/// On the GPT-2 fixture every weight gradient of a linear layer and the language-model
/// head's is folded: 18 Gemms, 18 Transposes fewer.
#[test]
fn gpt2s_weight_gradients_read_their_operands_untransposed() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpt2_d0_aot.onnx");
    let g = ckpt_ir::import_file(&path).unwrap();
    let patch = fold_transposes(&g, "folded");
    assert_eq!((patch.substitutes.len(), patch.removals.len()), (18, 18));
    let mut folded = g.clone();
    patch.apply(&mut folded).unwrap();
    assert_eq!(folded.node_count(), g.node_count() - 18);
}
