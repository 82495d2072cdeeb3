//! The registry's ORT facts beyond shapes and FLOPs, one pinned per test: aliasing, in
//! place, kernel scratch, training-only kernels, optimizer steps, optional outputs,
//! pass-through, index use, random seeds, load-time folding, kernels that race over threads,
//! and the ORT constants.

mod ops_common;

use ckpt_ir::build::{attr_i, attr_ints, attr_s, ModelBuilder};
use ckpt_ir::ops::{
    alias, folded_at_load, index_use, kernel_scratch, may_inplace, optimizer_step, optional_tail,
    pass_through, races_on_threads, seed_attr, training_only, IndexUse, OptimizerStep, SeedAttr,
    MS_DOMAIN,
};
use ckpt_ir::{ort, DType, ONNX_DOMAIN};
use ops_common::{bind, graph, producer};

/// `y = op(x)`; a `Reshape` also reads its shape `s`.
fn unary(op: &str) -> ckpt_ir::Graph {
    let inputs: &[&str] = if op == "Reshape" { &["x", "s"] } else { &["x"] };
    graph(
        ModelBuilder::new(17)
            .input("x", DType::F32, "b,8")
            .init_i64("s", &[2], &[8, -1])
            .node(op, inputs, &["y"])
            .output("y", DType::F32, "")
            .build(),
    )
}

#[test]
fn reshape_output_is_its_input_buffer() {
    let g = unary("Reshape");
    assert_eq!(alias(&g, producer(&g, "y")), Some((0, 0)));
}

#[test]
fn relu_may_run_in_place_and_does_not_alias() {
    let g = unary("Relu");
    let n = producer(&g, "y");
    assert_eq!(may_inplace(&g, n), Some((0, 0)));
    assert_eq!(alias(&g, n), None);
}

#[test]
fn selu_celu_thresholded_relu_shrink_may_run_in_place() {
    for op in ["Selu", "Celu", "ThresholdedRelu", "Shrink"] {
        let g = unary(op);
        assert_eq!(may_inplace(&g, producer(&g, "y")), Some((0, 0)), "{op}");
    }
}

#[test]
fn accumulator_v2_aliases_only_when_its_buffer_output_is_present() {
    let build = |outs: &[&str]| {
        graph(
            ModelBuilder::new(17)
                .opset(MS_DOMAIN, 1)
                .input("buf", DType::F32, "4")
                .input("g", DType::F32, "4")
                .node_in(
                    MS_DOMAIN,
                    "InPlaceAccumulatorV2",
                    &["buf", "g"],
                    outs,
                    vec![],
                )
                .output("flag", DType::Bool, "1")
                .build(),
        )
    };
    let g = build(&["flag"]);
    assert_eq!(alias(&g, producer(&g, "flag")), None);
    let g = build(&["flag", "out"]);
    assert_eq!(alias(&g, producer(&g, "flag")), Some((1, 0)));
}

fn where_graph() -> ckpt_ir::Graph {
    graph(
        ModelBuilder::new(17)
            .input("c", DType::Bool, "b,1,4")
            .input("x", DType::F32, "1,3,4")
            .input("y", DType::F32, "")
            .node("Where", &["c", "x", "y"], &["z"])
            .output("z", DType::F32, "")
            .build(),
    )
}

#[test]
fn where_copies_x_and_y_broadcast_to_the_condition_before_its_output() {
    let g = where_graph();
    let s = kernel_scratch(&g, producer(&g, "z"), &bind(&[("b", 2)]), 1);
    // X: [1,3,4] against cond [2,1,4] = 24 f32; Y: a scalar against cond = 8 f32.
    assert_eq!(s.before, vec![96, 32]);
    assert!(s.after.is_empty());
    assert_eq!(s.bytes(), 2 * ort::ALLOC_ALIGN);
}

#[test]
fn where_with_unbound_dims_takes_no_scratch() {
    let g = where_graph();
    let s = kernel_scratch(&g, producer(&g, "z"), &bind(&[]), 1);
    assert!(s.before.is_empty() && s.after.is_empty());
}

fn softmax(opset: i64, axis: i64) -> ckpt_ir::Graph {
    graph(
        ModelBuilder::new(opset)
            .input("x", DType::F32, "2,3,100")
            .node_with("Softmax", &["x"], &["y"], vec![attr_i("axis", axis)])
            .output("y", DType::F32, "")
            .build(),
    )
}

#[test]
fn softmax_over_a_middle_axis_takes_two_input_sized_temporaries_after_its_output() {
    let g = softmax(13, 1);
    let s = kernel_scratch(&g, producer(&g, "y"), &bind(&[]), 1);
    assert_eq!(s.after, vec![2400, 2400]);
    assert!(s.before.is_empty());
}

#[test]
fn softmax_over_the_last_axis_or_before_opset_13_takes_no_scratch() {
    for (opset, axis) in [(13, -1), (13, 2), (12, 1)] {
        let g = softmax(opset, axis);
        let s = kernel_scratch(&g, producer(&g, "y"), &bind(&[]), 1);
        assert_eq!(s, Default::default(), "opset {opset} axis {axis}");
    }
}

#[test]
fn relu_takes_no_scratch() {
    let g = unary("Relu");
    let s = kernel_scratch(&g, producer(&g, "y"), &bind(&[("b", 2)]), 1);
    assert_eq!(s.bytes(), 0);
}

#[test]
fn gradient_and_optimizer_kernels_are_training_only_in_their_domain() {
    assert!(training_only(MS_DOMAIN, "InPlaceAccumulatorV2"));
    assert!(training_only(MS_DOMAIN, "GeluGrad"));
    assert!(training_only(MS_DOMAIN, "SoftmaxCrossEntropyLossInternal"));
    assert!(training_only(MS_DOMAIN, "BatchNormalizationInternal"));
    // Not in the registry: ORT's naming rule for gradient kernels.
    assert!(training_only(MS_DOMAIN, "SomeFutureGrad"));
    assert!(!training_only(MS_DOMAIN, "FusedMatMul"));
    assert!(!training_only(MS_DOMAIN, "Gelu"));
    assert!(!training_only(ONNX_DOMAIN, "InPlaceAccumulatorV2"));
    assert!(!training_only(ONNX_DOMAIN, "SomeGrad"));
}

#[test]
fn accumulators_and_optimizers_are_optimizer_steps() {
    let build = |op: &str| {
        graph(
            ModelBuilder::new(17)
                .opset(MS_DOMAIN, 1)
                .input("buf", DType::F32, "4")
                .input("g", DType::F32, "4")
                .value_info("o", DType::F32, "4")
                .node_in(MS_DOMAIN, op, &["buf", "g"], &["o"], vec![])
                .output("o", DType::F32, "4")
                .build(),
        )
    };
    let step = |op: &str| {
        let g = build(op);
        optimizer_step(&g, producer(&g, "o"))
    };
    assert_eq!(step("InPlaceAccumulator"), Some(OptimizerStep::Accumulate));
    assert_eq!(step("ZeroGradient"), Some(OptimizerStep::Update));
    assert_eq!(step("AdamOptimizer"), Some(OptimizerStep::Update));
    assert_eq!(step("ClipGradNorm"), None);
    let g = unary("Relu");
    assert_eq!(optimizer_step(&g, producer(&g, "y")), None);
}

#[test]
fn layer_norm_has_optional_trailing_outputs_and_relu_has_none() {
    let g = graph(
        ModelBuilder::new(17)
            .input("x", DType::F32, "2,8")
            .init_f32("w", &[8], &[1.0; 8])
            .node("LayerNormalization", &["x", "w"], &["y", "mean", "inv"])
            .node("Relu", &["y"], &["r"])
            .output("r", DType::F32, "")
            .build(),
    );
    assert!(optional_tail(&g, producer(&g, "y")));
    assert!(!optional_tail(&g, producer(&g, "r")));
}

#[test]
fn where_passes_x_and_y_through_and_reshape_its_data() {
    let g = where_graph();
    assert_eq!(pass_through(&g, producer(&g, "z")), &[1, 2]);
    let g = unary("Reshape");
    assert_eq!(pass_through(&g, producer(&g, "y")), &[0]);
    let g = unary("Relu");
    assert!(pass_through(&g, producer(&g, "y")).is_empty());
}

#[test]
fn gather_indexes_its_data_and_the_losses_read_class_labels() {
    let g = graph(
        ModelBuilder::new(17)
            .input("table", DType::F32, "10,4")
            .input("ids", DType::I64, "3")
            .input("labels", DType::I64, "3")
            .node("Gather", &["table", "ids"], &["e"])
            .node("ReduceSum", &["e"], &["logits"])
            .node("SoftmaxCrossEntropyLoss", &["e", "labels"], &["loss"])
            .output("loss", DType::F32, "")
            .build(),
    );
    assert_eq!(index_use(&g, producer(&g, "e")), Some(IndexUse::Indices));
    assert_eq!(index_use(&g, producer(&g, "loss")), Some(IndexUse::Labels));
    assert_eq!(index_use(&g, producer(&g, "logits")), None);
}

#[test]
fn random_ops_state_their_seed_type() {
    assert_eq!(seed_attr(ONNX_DOMAIN, "Dropout"), Some(SeedAttr::Int));
    assert_eq!(
        seed_attr(ONNX_DOMAIN, "RandomUniformLike"),
        Some(SeedAttr::Float)
    );
    assert_eq!(seed_attr(ONNX_DOMAIN, "Multinomial"), Some(SeedAttr::Float));
    assert_eq!(seed_attr(MS_DOMAIN, "BitmaskDropout"), Some(SeedAttr::Int));
    assert_eq!(seed_attr(MS_DOMAIN, "Dropout"), None);
    assert_eq!(seed_attr(ONNX_DOMAIN, "Relu"), None);
}

#[test]
fn constant_is_folded_at_load_and_constant_of_shape_is_not() {
    let g = graph(
        ModelBuilder::new(17)
            .init_i64("s", &[1], &[4])
            .node_with("Constant", &[], &["c"], vec![])
            .node("ConstantOfShape", &["s"], &["z"])
            .output("z", DType::F32, "")
            .build(),
    );
    assert!(folded_at_load(&g, producer(&g, "c")));
    assert!(!folded_at_load(&g, producer(&g, "z")));
}

#[test]
fn ort_allocations_round_to_256_bytes() {
    assert_eq!(ort::ALLOC_ALIGN, 256);
    assert_eq!(ort::alloc_rounded(1), 256);
    assert_eq!(ort::alloc_rounded(256), 256);
    assert_eq!(ort::alloc_rounded(257), 512);
}

fn conv(x: &str, w: &str, attrs: Vec<ckpt_ir::onnx::AttributeProto>) -> ckpt_ir::Graph {
    graph(
        ModelBuilder::new(17)
            .input("x", DType::F32, x)
            .input("w", DType::F32, w)
            .node_with("Conv", &["x", "w"], &["y"], attrs)
            .output("y", DType::F32, "")
            .build(),
    )
}

/// ViT's patch convolution (64 filters over a 4×4 output, K = 3·8·8): more filters than
/// output positions, so MLAS expands the whole input (OutputSize·K = 16·192 floats) after the
/// output, whatever the thread count.
#[test]
fn conv_with_more_filters_than_outputs_takes_a_full_im2col() {
    let g = conv(
        "2,3,32,32",
        "64,3,8,8",
        vec![
            attr_ints("strides", &[8, 8]),
            attr_ints("kernel_shape", &[8, 8]),
        ],
    );
    for threads in [1, 2, 8] {
        let s = kernel_scratch(&g, producer(&g, "y"), &bind(&[]), threads);
        assert_eq!(s.after, vec![16 * 192 * 4], "{threads} threads");
        assert!(s.before.is_empty());
    }
}

/// ViT's weight-gradient convolution (64 filters over an 8×8 output, K = 2·4·4, dilation 8):
/// MLAS segments the GEMM over threads, one 16384-float buffer each: 64 KiB with one
/// intra-op thread, 128 KiB with two (ORT's default on 2 cores; the 131,072 B the issue
/// measured on a tiny ViT).
#[test]
fn segmented_conv_takes_one_buffer_per_thread() {
    let g = conv(
        "3,2,32,32",
        "64,2,4,4",
        vec![
            attr_ints("dilations", &[8, 8]),
            attr_ints("kernel_shape", &[4, 4]),
        ],
    );
    let bytes = |threads| kernel_scratch(&g, producer(&g, "y"), &bind(&[]), threads).after;
    assert_eq!(bytes(1), vec![65536]);
    assert_eq!(bytes(2), vec![131072]);
    // Complexity 64·64·32 asks for 3 threads, but 16-aligned slices of the 64 outputs are 32
    // wide: two of them cover it, so two buffers however many threads there are.
    assert_eq!(bytes(8), vec![131072]);
}

/// A pointwise convolution (1×1, stride 1, no padding) is a plain GEMM: no scratch.
#[test]
fn pointwise_conv_takes_no_scratch() {
    let g = conv("2,16,8,8", "32,16,1,1", vec![]);
    let s = kernel_scratch(&g, producer(&g, "y"), &bind(&[]), 2);
    assert_eq!(s, ckpt_ir::ops::Scratch::default());
}

/// ScatterND with a reduction races on repeated indices over several intra-op threads
/// (`docs/design/ort-internals.md` 2.7); without one (last write wins, by the spec) it is not listed.
#[test]
fn scatter_nd_races_over_threads_only_with_a_reduction() {
    let scatter = |reduction: Option<&str>| {
        graph(
            ModelBuilder::new(18)
                .input("d", DType::F32, "2,4")
                .input("i", DType::I64, "8,1")
                .input("u", DType::F32, "8,4")
                .node_with(
                    "ScatterND",
                    &["d", "i", "u"],
                    &["y"],
                    reduction
                        .map(|r| vec![attr_s("reduction", r)])
                        .unwrap_or_default(),
                )
                .output("y", DType::F32, "")
                .build(),
        )
    };
    for r in ["add", "mul", "max", "min"] {
        let g = scatter(Some(r));
        assert!(races_on_threads(&g, producer(&g, "y")).is_some(), "{r}");
    }
    for r in [Some("none"), None] {
        let g = scatter(r);
        assert_eq!(races_on_threads(&g, producer(&g, "y")), None, "{r:?}");
    }
}
