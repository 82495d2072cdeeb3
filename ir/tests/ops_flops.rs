//! The FLOP table: one line per rule, with the constants of `ckpt_ir::ops::cost`.

mod ops_common;

use ckpt_ir::build::{attr_i, attr_ints, attr_s, ModelBuilder};
use ckpt_ir::ops::{cost, flops, FlopError};
use ckpt_ir::DType;
use ops_common::{bind, producer, run};

#[test]
fn flop_table() {
    let m = ModelBuilder::new(20)
        .opset("com.microsoft", 1)
        .input("x", DType::F32, "b,s,64")
        .input("w", DType::F32, "64,256")
        .input("a", DType::F32, "b,h,s,16")
        .input("bt", DType::F32, "b,h,16,s")
        .input("m", DType::F32, "n,32")
        .input("wt", DType::F32, "64,32")
        .input("bias", DType::F32, "64")
        .input("lnw", DType::F32, "64")
        .input("img", DType::F32, "2,6,10,10")
        .input("k", DType::F32, "8,3,3,3")
        .input("ids", DType::I64, "b,s")
        .init_i64("t", &[2], &[-1, 64])
        .node("MatMul", &["x", "w"], &["mm"])
        .node("MatMul", &["a", "bt"], &["bmm"])
        .node_with(
            "Gemm",
            &["m", "wt", "bias"],
            &["gemm"],
            vec![attr_i("transB", 1)],
        )
        .node_in(
            "com.microsoft",
            "FusedMatMul",
            &["mm", "w"],
            &["fmm"],
            vec![attr_i("transB", 1)],
        )
        .node_with(
            "Conv",
            &["img", "k"],
            &["conv"],
            vec![attr_i("group", 2), attr_ints("pads", &[1, 1, 1, 1])],
        )
        .node("Add", &["x", "bias"], &["add"])
        .node("Relu", &["add"], &["relu"])
        .node_with(
            "Gelu",
            &["add"],
            &["gelu"],
            vec![attr_s("approximate", "tanh")],
        )
        .node_with("Softmax", &["bmm"], &["sm"], vec![attr_i("axis", -1)])
        .node_with(
            "LayerNormalization",
            &["x", "lnw", "bias"],
            &["ln"],
            vec![attr_i("axis", -1)],
        )
        .node_with("ReduceSum", &["x"], &["rs"], vec![attr_i("keepdims", 0)])
        .node("Reshape", &["x", "t"], &["rsh"])
        .node("Transpose", &["x"], &["tr"])
        .node_with("Gather", &["w", "ids"], &["emb"], vec![attr_i("axis", 0)])
        .build();
    let (g, t) = run(m);
    let b = bind(&[("b", 2), ("s", 8), ("h", 4), ("n", 5)]);
    let f = |name: &str| {
        flops(&g, producer(&g, name), &t, &b).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let tokens = 2 * 8;
    assert_eq!(f("mm"), 2 * tokens * 256 * 64, "MatMul 2·m·n·k");
    assert_eq!(
        f("bmm"),
        2 * (2 * 4) * 8 * 8 * 16,
        "batched MatMul 2·batch·m·n·k"
    );
    assert_eq!(f("gemm"), 2 * 5 * 64 * 32 + 5 * 64, "Gemm 2·m·n·k + bias");
    assert_eq!(f("fmm"), 2 * tokens * 64 * 256, "FusedMatMul with transB");
    // Conv: 2·N·Cout·Hout·Wout·(Cin/g)·kH·kW (weights are [Cout, Cin/g, kH, kW]).
    assert_eq!(f("conv"), 2 * 2 * 8 * 10 * 10 * 3 * 3 * 3);
    assert_eq!(f("add"), tokens * 64 * cost::ELEMENTWISE);
    assert_eq!(f("relu"), tokens * 64 * cost::ELEMENTWISE);
    assert_eq!(f("gelu"), tokens * 64 * cost::GELU_TANH);
    assert_eq!(f("sm"), 2 * 4 * 8 * 8 * cost::SOFTMAX);
    assert_eq!(f("ln"), tokens * 64 * cost::LAYER_NORM);
    assert_eq!(
        f("rs"),
        tokens * 64 * cost::REDUCTION,
        "reductions count input elements"
    );
    assert_eq!(f("rsh"), 0, "alias ops write nothing");
    assert_eq!(
        f("tr"),
        tokens * 64 * cost::DATA_MOVEMENT,
        "copies cost one per element written"
    );
    assert_eq!(
        f("emb"),
        tokens * 256 * cost::DATA_MOVEMENT,
        "a gather writes its output"
    );
}

#[test]
fn per_element_constants() {
    // The constants the table above relies on, stated once.
    assert_eq!(cost::ELEMENTWISE, 1);
    assert_eq!(cost::GELU, 5);
    assert_eq!(cost::GELU_TANH, 9);
    assert_eq!(cost::SOFTMAX, 5);
    assert_eq!(cost::LAYER_NORM, 7);
    assert_eq!(cost::REDUCTION, 1);
    assert_eq!(cost::SOFTMAX_GRAD, 4);
    assert_eq!(cost::LAYER_NORM_GRAD, 18);
    assert_eq!(cost::GELU_GRAD, 14);
    assert_eq!(cost::ACTIVATION_GRAD, 3);
    assert_eq!(cost::SOFTMAX_CROSS_ENTROPY, 6);
    assert_eq!(cost::DROPOUT, 3);
    assert_eq!(cost::DATA_MOVEMENT, 1);
    // Derived: a fused bias or skip add costs one more op per element.
    assert_eq!(cost::BIAS_GELU, cost::GELU + cost::ELEMENTWISE);
    assert_eq!(cost::BIAS_SOFTMAX, cost::SOFTMAX + cost::ELEMENTWISE);
    assert_eq!(cost::RMS_NORM, 5);
    const { assert!(cost::GELU_GRAD > cost::GELU_TANH) };
    const { assert!(cost::LAYER_NORM_GRAD > cost::LAYER_NORM) };
}

#[test]
fn unbound_symbols_and_unknown_ops_are_errors() {
    let m = ModelBuilder::new(20)
        .opset("com.microsoft", 1)
        .input("x", DType::F32, "b,64")
        .node("Relu", &["x"], &["r"])
        .node_in("com.microsoft", "Inverse", &["r"], &["y"], vec![])
        .value_info("y", DType::F32, "b,64")
        .output("y", DType::F32, "b,64")
        .build();
    let (g, t) = run(m);
    let e = flops(&g, producer(&g, "r"), &t, &bind(&[])).unwrap_err();
    assert!(
        matches!(e, FlopError::Shape { .. }) && e.to_string().contains("--dim b="),
        "{e}"
    );
    let e = flops(&g, producer(&g, "y"), &t, &bind(&[("b", 1)])).unwrap_err();
    assert!(matches!(e, FlopError::NotInRegistry { .. }), "{e}");
}
