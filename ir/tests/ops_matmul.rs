//! Contractions: batched MatMul with numpy promotion, Gemm, FusedMatMul, Conv.

mod ops_common;

use ckpt_ir::build::{attr_f, attr_i, attr_ints, ModelBuilder};
use ckpt_ir::DType;
use ops_common::{run, try_run, ty};

#[test]
fn matmul_batches_broadcast_and_promote_vectors() {
    let m = ModelBuilder::new(20)
        .input("a", DType::F32, "b,h,s,d")
        .input("bt", DType::F32, "b,h,d,s")
        .input("w", DType::F32, "d,64")
        .input("v", DType::F32, "d")
        .node("MatMul", &["a", "bt"], &["scores"])
        .node("MatMul", &["a", "w"], &["proj"])
        .node("MatMul", &["a", "v"], &["mv"])
        .node("MatMul", &["v", "w"], &["vm"])
        .output("scores", DType::F32, "")
        .output("proj", DType::F32, "")
        .output("mv", DType::F32, "")
        .output("vm", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "scores"), "f32[b,h,s,s]");
    assert_eq!(ty(&g, &t, "proj"), "f32[b,h,s,64]");
    assert_eq!(ty(&g, &t, "mv"), "f32[b,h,s]");
    assert_eq!(ty(&g, &t, "vm"), "f32[64]");
}

#[test]
fn matmul_contraction_mismatch_is_an_error() {
    let m = ModelBuilder::new(20)
        .input("a", DType::F32, "2,3")
        .input("b", DType::F32, "4,5")
        .node("MatMul", &["a", "b"], &["c"])
        .output("c", DType::F32, "")
        .build();
    let e = try_run(m).unwrap_err().to_string();
    assert!(e.contains("MatMul_c") && e.contains("3 vs 4"), "{e}");
}

#[test]
fn gemm_and_fused_matmul_transposes() {
    let m = ModelBuilder::new(17)
        .opset("com.microsoft", 1)
        .input("x", DType::F32, "n,32")
        .input("w", DType::F32, "64,32")
        .input("bias", DType::F32, "64")
        .input("dy", DType::F32, "b,s,64")
        .input("p", DType::F32, "h,b,s,k")
        .node_with(
            "Gemm",
            &["x", "w", "bias"],
            &["y"],
            vec![attr_i("transB", 1)],
        )
        .node_with("Gemm", &["x", "y"], &["gw"], vec![attr_i("transA", 1)])
        .node_in(
            "com.microsoft",
            "FusedMatMul",
            &["dy", "w"],
            &["dx"],
            vec![attr_i("transB", 0), attr_f("alpha", 1.0)],
        )
        .node_in(
            "com.microsoft",
            "FusedMatMul",
            &["dy", "dy"],
            &["ata"],
            vec![attr_i("transA", 1)],
        )
        .node_in(
            "com.microsoft",
            "FusedMatMul",
            &["p", "p"],
            &["tb"],
            vec![
                attr_i("transBatchA", 1),
                attr_i("transB", 1),
                attr_i("transBatchB", 1),
            ],
        )
        .output("gw", DType::F32, "")
        .output("dx", DType::F32, "")
        .output("ata", DType::F32, "")
        .output("tb", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "y"), "f32[n,64]");
    assert_eq!(ty(&g, &t, "gw"), "f32[32,64]");
    assert_eq!(ty(&g, &t, "dx"), "f32[b,s,32]");
    assert_eq!(ty(&g, &t, "ata"), "f32[b,64,64]");
    // transBatch moves p's leading h to before the matrix dims: [b,s,h,k] · [b,s,k,h].
    assert_eq!(ty(&g, &t, "tb"), "f32[b,s,h,h]");
}

#[test]
fn conv_output_dims() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "n,3,32,32")
        .input("w", DType::F32, "16,3,3,3")
        .input("xs", DType::F32, "n,3,h,w")
        .node_with(
            "Conv",
            &["x", "w"],
            &["y"],
            vec![
                attr_ints("pads", &[1, 1, 1, 1]),
                attr_ints("strides", &[2, 2]),
            ],
        )
        .node_with(
            "Conv",
            &["xs", "w"],
            &["ys"],
            vec![attr_ints("pads", &[1, 1, 1, 1])],
        )
        .output("y", DType::F32, "")
        .output("ys", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "y"), "f32[n,16,16,16]");
    assert_eq!(ty(&g, &t, "ys"), "f32[n,16,h,w]");
}

#[test]
fn pools() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "n,8,32,32")
        .node_with(
            "MaxPool",
            &["x"],
            &["y", "idx"],
            vec![
                attr_ints("kernel_shape", &[2, 2]),
                attr_ints("strides", &[2, 2]),
            ],
        )
        .node_with(
            "AveragePool",
            &["x"],
            &["a"],
            vec![
                attr_ints("kernel_shape", &[3, 3]),
                attr_ints("pads", &[1, 1, 1, 1]),
            ],
        )
        .node("GlobalAveragePool", &["x"], &["g"])
        .output("y", DType::F32, "")
        .output("a", DType::F32, "")
        .output("g", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "y"), "f32[n,8,16,16]");
    assert_eq!(ty(&g, &t, "idx"), "i64[n,8,16,16]");
    assert_eq!(ty(&g, &t, "a"), "f32[n,8,32,32]");
    assert_eq!(ty(&g, &t, "g"), "f32[n,8,1,1]");
}

#[test]
fn einsum_shapes_and_flops() {
    use ckpt_ir::build::attr_s;
    use ckpt_ir::ops::flops;
    let m = ModelBuilder::new(20)
        .input("q", DType::F32, "b,h,s,d")
        .input("k", DType::F32, "b,h,t,d")
        .input("x", DType::F32, "b,s,64")
        .input("w", DType::F32, "64,32")
        .node_with(
            "Einsum",
            &["q", "k"],
            &["att"],
            vec![attr_s("equation", "bhsd,bhtd->bhst")],
        )
        .node_with(
            "Einsum",
            &["x", "w"],
            &["proj"],
            vec![attr_s("equation", "...i,ij->...j")],
        )
        .node_with("Einsum", &["w"], &["wt"], vec![attr_s("equation", "ij")])
        .node_with("Einsum", &["w"], &["tr"], vec![attr_s("equation", "ji")])
        .output("att", DType::F32, "")
        .output("proj", DType::F32, "")
        .output("wt", DType::F32, "")
        .output("tr", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "att"), "f32[b,h,s,t]");
    assert_eq!(ty(&g, &t, "proj"), "f32[b,s,32]");
    assert_eq!(ty(&g, &t, "wt"), "f32[64,32]");
    assert_eq!(
        ty(&g, &t, "tr"),
        "f32[32,64]",
        "implicit output: letters sorted"
    );
    let b = ops_common::bind(&[("b", 2), ("h", 4), ("s", 8), ("t", 8), ("d", 16)]);
    let att = ops_common::producer(&g, "att");
    assert_eq!(
        flops(&g, att, &t, &b).expect("flops"),
        2 * 2 * 4 * 8 * 8 * 16
    );
}
