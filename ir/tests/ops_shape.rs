//! Shape ops on hand-built graphs: symbolic shape values through Shape → Gather → Mul →
//! Concat → Reshape, -1 by exact division, Slice/Split/Expand/ConstantOfShape/Range/Pad.

mod ops_common;

use ckpt_ir::build::{attr_i, attr_ints, ModelBuilder};
use ckpt_ir::ops::{alias, may_inplace};
use ckpt_ir::DType;
use ops_common::{producer, run, try_run, ty, val};

#[test]
fn shape_values_flow_into_reshape() {
    // x: [batch, seq, 64] → reshape to [batch*seq, 64] through shape arithmetic.
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "batch,seq,64")
        .init_i64("i0", &[], &[0])
        .init_i64("i1", &[], &[1])
        .init_i64("ax", &[1], &[0])
        .init_i64("c64", &[1], &[64])
        .node("Shape", &["x"], &["s"])
        .node_with("Gather", &["s", "i0"], &["b"], vec![attr_i("axis", 0)])
        .node_with("Gather", &["s", "i1"], &["q"], vec![attr_i("axis", 0)])
        .node("Mul", &["b", "q"], &["bq"])
        .node("Unsqueeze", &["bq", "ax"], &["bq1"])
        .node_with(
            "Concat",
            &["bq1", "c64"],
            &["target"],
            vec![attr_i("axis", 0)],
        )
        .node("Reshape", &["x", "target"], &["y"])
        .output("y", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "s"), "i64[3]");
    assert_eq!(val(&g, &t, "s").as_deref(), Some("batch,seq,64"));
    assert_eq!(ty(&g, &t, "b"), "i64[]");
    assert_eq!(val(&g, &t, "bq").as_deref(), Some("(batch*seq)"));
    assert_eq!(val(&g, &t, "target").as_deref(), Some("(batch*seq),64"));
    assert_eq!(ty(&g, &t, "y"), "f32[(batch*seq),64]");
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
}

#[test]
fn reshape_minus_one_divides_symbolically_and_zero_copies() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "batch,seq,128")
        .init_i64("t1", &[3], &[0, -1, 64])
        .init_i64("t2", &[2], &[-1, 32])
        .node("Reshape", &["x", "t1"], &["a"])
        .node("Reshape", &["x", "t2"], &["b"])
        .output("a", DType::F32, "")
        .output("b", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "a"), "f32[batch,(2*seq),64]");
    assert_eq!(ty(&g, &t, "b"), "f32[(4*batch*seq),32]");
}

#[test]
fn reshape_that_cannot_divide_gets_a_fresh_symbol_and_a_warning() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "n,3")
        .init_i64("t", &[2], &[-1, 2])
        .node("Reshape", &["x", "t"], &["y"])
        .output("y", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert!(ty(&g, &t, "y").starts_with("f32[?n"), "{}", ty(&g, &t, "y"));
    assert_eq!(t.warnings().len(), 1);
    assert!(t.warnings()[0].contains("Reshape_y"), "{:?}", t.warnings());
}

#[test]
fn squeeze_unsqueeze_flatten_transpose() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,1,s,4")
        .init_i64("a1", &[1], &[1])
        .init_i64("a2", &[2], &[0, -1])
        .node("Squeeze", &["x", "a1"], &["sq"])
        .node("Unsqueeze", &["sq", "a2"], &["un"])
        .node_with("Flatten", &["x"], &["fl"], vec![attr_i("axis", 2)])
        .node_with(
            "Transpose",
            &["x"],
            &["tr"],
            vec![attr_ints("perm", &[2, 0, 3, 1])],
        )
        .node("Transpose", &["x"], &["rev"])
        .output("un", DType::F32, "")
        .output("fl", DType::F32, "")
        .output("tr", DType::F32, "")
        .output("rev", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "sq"), "f32[b,s,4]");
    assert_eq!(ty(&g, &t, "un"), "f32[1,b,s,4,1]");
    assert_eq!(ty(&g, &t, "fl"), "f32[b,(4*s)]");
    assert_eq!(ty(&g, &t, "tr"), "f32[s,b,4,1]");
    assert_eq!(ty(&g, &t, "rev"), "f32[4,s,1,b]");
    // Reshape-like ops alias their input in ORT's CPU EP; Transpose copies.
    assert_eq!(alias(&g, producer(&g, "sq")), Some((0, 0)));
    assert_eq!(alias(&g, producer(&g, "un")), Some((0, 0)));
    assert_eq!(alias(&g, producer(&g, "fl")), Some((0, 0)));
    assert_eq!(alias(&g, producer(&g, "tr")), None);
    assert_eq!(may_inplace(&g, producer(&g, "tr")), None);
}

#[test]
fn slice_split_concat_symbolic() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,s,192")
        .init_i64("z", &[1], &[0])
        .init_i64("m1", &[1], &[-1])
        .init_i64("one", &[1], &[1])
        .init_i64("big", &[1], &[i64::MAX])
        .init_i64("st2", &[1], &[2])
        .init_i64("sizes", &[3], &[64, 64, 64])
        .node("Slice", &["x", "z", "m1", "one", "one"], &["head"]) // x[:, :-1]
        .node("Slice", &["x", "one", "big", "one", "one"], &["tail"]) // x[:, 1:]
        .node("Slice", &["x", "z", "big", "m1", "st2"], &["even"]) // x[..., ::2]
        .node_with(
            "Split",
            &["x", "sizes"],
            &["q", "k", "v"],
            vec![attr_i("axis", 2)],
        )
        .node_with(
            "Split",
            &["x"],
            &["h0", "h1"],
            vec![attr_i("axis", 1), attr_i("num_outputs", 2)],
        )
        .node_with("Concat", &["q", "v"], &["qv"], vec![attr_i("axis", -1)])
        .node_with(
            "Concat",
            &["head", "tail"],
            &["ht"],
            vec![attr_i("axis", 1)],
        )
        .output("head", DType::F32, "")
        .output("tail", DType::F32, "")
        .output("even", DType::F32, "")
        .output("k", DType::F32, "")
        .output("h1", DType::F32, "")
        .output("qv", DType::F32, "")
        .output("ht", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "head"), "f32[b,(s - 1),192]");
    assert_eq!(ty(&g, &t, "tail"), "f32[b,(s - 1),192]");
    assert_eq!(ty(&g, &t, "even"), "f32[b,s,96]");
    assert_eq!(ty(&g, &t, "k"), "f32[b,s,64]");
    assert!(
        ty(&g, &t, "h1").starts_with("f32[b,?"),
        "s/2 is not exact: {}",
        ty(&g, &t, "h1")
    );
    assert_eq!(ty(&g, &t, "qv"), "f32[b,s,128]");
    assert_eq!(ty(&g, &t, "ht"), "f32[b,(2*s - 2),192]");
}

#[test]
fn slice_and_gather_of_known_values() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "2,3,5,7")
        .init_i64("st", &[1], &[1])
        .init_i64("en", &[1], &[3])
        .init_i64("idx", &[2], &[-1, 0])
        .node("Shape", &["x"], &["s"])
        .node("Slice", &["s", "st", "en"], &["mid"])
        .node_with("Gather", &["s", "idx"], &["ends"], vec![attr_i("axis", 0)])
        .node_with("Shape", &["x"], &["tailshape"], vec![attr_i("start", -2)])
        .node("ConstantOfShape", &["mid"], &["zeros"])
        .output("ends", DType::I64, "")
        .output("tailshape", DType::I64, "")
        .output("zeros", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(val(&g, &t, "mid").as_deref(), Some("3,5"));
    assert_eq!(val(&g, &t, "ends").as_deref(), Some("7,2"));
    assert_eq!(val(&g, &t, "tailshape").as_deref(), Some("5,7"));
    assert_eq!(ty(&g, &t, "zeros"), "f32[3,5]");
}

#[test]
fn expand_tile_pad_range_constant() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,1,8")
        .input("y", DType::F32, "b,s")
        .init_i64("rep", &[3], &[1, 2, 3])
        .init_i64("pads", &[6], &[0, 0, 1, 0, 0, 2])
        .init_i64("zero", &[], &[0])
        .init_i64("one", &[], &[1])
        .init_i64("ax1", &[], &[1])
        .node("Shape", &["y"], &["ys"])
        .node_with("Gather", &["ys", "ax1"], &["slen"], vec![attr_i("axis", 0)])
        .node("Range", &["zero", "slen", "one"], &["pos"])
        .node_with(
            "Constant",
            &[],
            &["c"],
            vec![ckpt_ir::onnx::AttributeProto {
                name: Some("value_ints".into()),
                r#type: Some(ckpt_ir::onnx::attribute_proto::AttributeType::Ints as i32),
                ints: vec![1, 4, 1],
                ..Default::default()
            }],
        )
        .node("Expand", &["x", "c"], &["ex"])
        .node("Tile", &["x", "rep"], &["ti"])
        .node("Pad", &["x", "pads"], &["pd"])
        .output("pos", DType::I64, "")
        .output("ex", DType::F32, "")
        .output("ti", DType::F32, "")
        .output("pd", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "pos"), "i64[s]");
    assert_eq!(ty(&g, &t, "c"), "i64[3]");
    assert_eq!(ty(&g, &t, "ex"), "f32[b,4,8]");
    assert_eq!(ty(&g, &t, "ti"), "f32[b,2,24]");
    assert_eq!(ty(&g, &t, "pd"), "f32[b,1,11]");
}

#[test]
fn gathers_and_scatters() {
    let m = ModelBuilder::new(20)
        .input("emb", DType::F32, "256,64")
        .input("ids", DType::I64, "b,s")
        .input("m", DType::Bool, "2,32")
        .input("nd", DType::I64, "2,1,1,32,2")
        .input("ge", DType::I64, "b,1")
        .input("lp", DType::F32, "b,10")
        .node_with("Gather", &["emb", "ids"], &["e"], vec![attr_i("axis", 0)])
        .node("GatherND", &["m", "nd"], &["picked"])
        .node_with(
            "GatherElements",
            &["lp", "ge"],
            &["g1"],
            vec![attr_i("axis", 1)],
        )
        .node_with(
            "ScatterElements",
            &["lp", "ge", "g1"],
            &["sc"],
            vec![attr_i("axis", 1)],
        )
        .output("e", DType::F32, "")
        .output("picked", DType::Bool, "")
        .output("sc", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "e"), "f32[b,s,64]");
    assert_eq!(ty(&g, &t, "picked"), "bool[2,1,1,32]");
    assert_eq!(ty(&g, &t, "g1"), "f32[b,1]");
    assert_eq!(ty(&g, &t, "sc"), "f32[b,10]");
}

#[test]
fn a_non_constant_axes_input_is_an_error_naming_the_node() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,1")
        .input("axes", DType::I64, "1")
        .node("Squeeze", &["x", "axes"], &["y"])
        .output("y", DType::F32, "")
        .build();
    let e = try_run(m).unwrap_err().to_string();
    assert!(e.contains("Squeeze_y") && e.contains("axes"), "{e}");
}

#[test]
fn malformed_attributes_are_errors_not_panics() {
    use ckpt_ir::build::attr_ints;
    let conv = ModelBuilder::new(20)
        .input("x", DType::F32, "1,3,8,8")
        .input("w", DType::F32, "4,3,3,3")
        .node_with(
            "Conv",
            &["x", "w"],
            &["y"],
            vec![attr_ints("strides", &[0, 1])],
        )
        .output("y", DType::F32, "")
        .build();
    assert!(try_run(conv).unwrap_err().to_string().contains("positive"));
    let pads = ModelBuilder::new(20)
        .input("x", DType::F32, "1,3,8,8")
        .node_with(
            "MaxPool",
            &["x"],
            &["y"],
            vec![attr_ints("kernel_shape", &[2, 2]), attr_ints("pads", &[1])],
        )
        .output("y", DType::F32, "")
        .build();
    assert!(try_run(pads)
        .unwrap_err()
        .to_string()
        .contains("do not fit"));
    let split = ModelBuilder::new(20)
        .input("x", DType::F32, "6")
        .node_with("Split", &["x"], &["a"], vec![attr_i("num_outputs", 0)])
        .output("a", DType::F32, "")
        .build();
    assert!(try_run(split).is_err());
    let div = ModelBuilder::new(20)
        .init_i64("a", &[], &[i64::MIN])
        .init_i64("b", &[], &[-1])
        .node("Div", &["a", "b"], &["c"])
        .output("c", DType::I64, "")
        .build();
    let (g, t) = run(div);
    assert_eq!(
        val(&g, &t, "c").as_deref(),
        Some("9223372036854775808"),
        "exact as a polynomial, no i64 overflow"
    );
}

/// `keepdims` keeps the reduced axes only when it is 1, as ONNX's inference and ONNX Runtime's
/// kernels read it: any other value (a 2^40 a mutation made) prunes them.
#[test]
fn reductions_keep_their_axes_only_at_keepdims_1() {
    for (keepdims, shape) in [(1, "f32[1,64]"), (0, "f32[64]"), (1 << 40, "f32[64]")] {
        let m = ModelBuilder::new(18)
            .input("x", DType::F32, "34,64")
            .init_i64("axes", &[1], &[0])
            .node_with(
                "ReduceSum",
                &["x", "axes"],
                &["s"],
                vec![attr_i("keepdims", keepdims)],
            )
            .output("s", DType::F32, "")
            .build();
        let (g, t) = run(m);
        assert_eq!(ty(&g, &t, "s"), shape, "keepdims {keepdims}");
    }
}

/// A Softmax whose `axis` is outside the input's rank is an error, as ONNX's inference and
/// ONNX Runtime make it.
#[test]
fn softmax_axis_outside_the_rank_is_an_error() {
    for (axis, ok) in [(-1, true), (1, true), (2, false), (-3, false)] {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, "4,8")
            .node_with("Softmax", &["x"], &["y"], vec![attr_i("axis", axis)])
            .output("y", DType::F32, "4,8")
            .build();
        assert_eq!(try_run(m).is_ok(), ok, "axis {axis}");
    }
}

/// ONNX's Dropout takes its ratio and training mode as scalars (onnx's checker refuses a
/// ratio of shape `[1]`): another shape is an error naming the node and the input.
#[test]
fn a_dropout_ratio_that_is_not_a_scalar_is_an_error() {
    let dropout = |ratio_shape: &str| {
        ModelBuilder::new(13)
            .input("x", DType::F32, "2,3")
            .input("ratio", DType::F32, ratio_shape)
            .node("Dropout", &["x", "ratio"], &["y"])
            .output("y", DType::F32, "")
            .build()
    };
    let e = try_run(dropout("1")).unwrap_err().to_string();
    assert!(
        e.contains("Dropout_y") && e.contains("ratio (input #1) has shape [1]"),
        "{e}"
    );
    assert!(try_run(dropout("")).is_ok());
}

/// A reduction's `noop_with_empty_axes` other than 0 or 1 is an error naming the node: ONNX's
/// inference reads it as 1 (the output keeps the input's shape) and ONNX Runtime as 0 (all
/// axes are reduced), so an output planned from either reading is refused by the other.
#[test]
fn a_noop_with_empty_axes_other_than_0_or_1_is_an_error() {
    let reduce = |noop: i64| {
        ModelBuilder::new(20)
            .input("x", DType::F32, "4")
            .node_with(
                "ReduceSum",
                &["x"],
                &["y"],
                vec![attr_i("keepdims", 0), attr_i("noop_with_empty_axes", noop)],
            )
            .output("y", DType::F32, "")
            .build()
    };
    let e = try_run(reduce(1 << 40)).unwrap_err().to_string();
    assert!(
        e.contains("ReduceSum_y") && e.contains("noop_with_empty_axes is 1099511627776"),
        "{e}"
    );
    assert!(try_run(reduce(0)).is_ok() && try_run(reduce(1)).is_ok());
}
