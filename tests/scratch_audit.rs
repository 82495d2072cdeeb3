//! Kernel scratch audit (`docs/design/ort-internals.md` §2.7): single-op graphs whose inputs are
//! graph inputs and whose output is the graph output, so ORT's arena holds only the output
//! and the kernel's temporaries. The predicted peak (exact arena) equals ORT's measured one
//! to the byte, and for the ops with a scratch rule the rule is what makes it so.

use ckpt_ir::build::{attr_i, attr_ints, ModelBuilder};
use ckpt_ir::onnx::AttributeProto;
use ckpt_ir::{Bindings, DType};
use ckpt_passes::memory::{schedule, simulate};
use ckpt_runtime::{measure_peak, Arena, Model, OptLevel, SessionConfig};
use ckpt_validate::inputs::{make_inputs, InputOverrides};

/// (predicted peak, measured peak, predicted scratch bytes of the one node).
fn peaks(m: ModelBuilder) -> (u64, u64, u64) {
    let bytes = m.bytes();
    let g =
        ckpt_ir::import_bytes(bytes.clone().into(), std::path::Path::new("op.onnx"), None).unwrap();
    let (g, _) = ckpt_planner::with_inferred_types(g).unwrap();
    let b = Bindings::new();
    let s = schedule(&g).unwrap();
    let sim = simulate(&g, &s, &b).unwrap();
    let scratch = ckpt_ir::ops::kernel_scratch(&g, s.order[0], &b, 1).bytes();
    let o = InputOverrides::parse(&[], &[]).unwrap();
    let inputs = make_inputs(&g, &b, 7, &o, &[]).unwrap().0;
    let cfg = SessionConfig {
        opt_level: OptLevel::Disable,
        arena: Arena::Exact,
        ..Default::default()
    };
    let measured = measure_peak(Model::new("op", &bytes), &inputs, &cfg)
        .unwrap()
        .peak_bytes;
    (sim.peak_live, measured, scratch)
}

/// One `op` node over float graph inputs of shapes `ins`, its output `y` of shape `out`.
fn op(name: &str, ins: &[&str], out: &str, attrs: Vec<AttributeProto>) -> ModelBuilder {
    let mut m = ModelBuilder::new(17);
    let names: Vec<String> = (0..ins.len()).map(|i| format!("i{i}")).collect();
    for (n, s) in names.iter().zip(ins) {
        m = m.input(n, DType::F32, s);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    m.node_with(name, &refs, &["y"], attrs)
        .output("y", DType::F32, out)
}

/// Asserts predicted == measured and the scratch the registry gives.
fn check(what: &str, m: ModelBuilder, scratch: u64) {
    let (pred, meas, s) = peaks(m);
    assert_eq!(pred, meas, "{what}: predicted {pred}, measured {meas}");
    assert_eq!(s, scratch, "{what}: scratch");
}

const A: &str = "64,256";
const KA: u64 = 64 * 256 * 4;

#[test]
fn variadic_sum_max_min_mean_hold_one_temporary_from_three_inputs() {
    check("Sum of 2", op("Sum", &[A, A], A, vec![]), 0);
    check("Max of 2", op("Max", &[A, A], A, vec![]), 0);
    for n in [3, 4, 5] {
        check(
            &format!("Sum of {n}"),
            op("Sum", &vec![A; n], A, vec![]),
            KA,
        );
    }
    for name in ["Max", "Min", "Mean"] {
        check(&format!("{name} of 3"), op(name, &[A, A, A], A, vec![]), KA);
    }
    check("Mean of 4", op("Mean", &[A, A, A, A], A, vec![]), KA);
    // The temporary has the broadcast shape of all inputs but the last.
    check(
        "Sum [64,1]+[1,256]+[64,256]",
        op("Sum", &["64,1", "1,256", A], A, vec![]),
        KA,
    );
    check(
        "Sum [64,1]+[64,1]+[64,256]",
        op("Sum", &["64,1", "64,1", A], A, vec![]),
        64 * 4,
    );
}

#[test]
fn conv_transpose_takes_one_column_buffer() {
    let col = |m_per_group: u64, k: u64, image: u64| m_per_group * k * image * 4;
    check(
        "ConvTranspose 1x8x16x16, W 8x4x3x3",
        op(
            "ConvTranspose",
            &["1,8,16,16", "8,4,3,3"],
            "1,4,18,18",
            vec![],
        ),
        col(4, 9, 256),
    );
    check(
        "ConvTranspose stride 2",
        op(
            "ConvTranspose",
            &["1,8,16,16", "8,4,3,3"],
            "1,4,33,33",
            vec![attr_ints("strides", &[2, 2])],
        ),
        col(4, 9, 256),
    );
    check(
        "ConvTranspose group 2",
        op(
            "ConvTranspose",
            &["1,8,16,16", "8,2,3,3"],
            "1,4,18,18",
            vec![attr_i("group", 2)],
        ),
        col(2, 9, 256),
    );
    check(
        "ConvTranspose 1x1, batch 2",
        op(
            "ConvTranspose",
            &["2,8,16,16", "8,4,1,1"],
            "2,4,16,16",
            vec![],
        ),
        col(4, 1, 256),
    );
    check(
        "ConvTranspose batch 2 with bias",
        op(
            "ConvTranspose",
            &["2,8,16,16", "8,4,3,3", "4"],
            "2,4,18,18",
            vec![],
        ),
        col(4, 9, 256),
    );
}

#[test]
fn matmul_gemm_reduce_layernorm_expand_concat_take_no_scratch() {
    let cases: Vec<(&str, ModelBuilder)> = vec![
        ("MatMul", op("MatMul", &[A, "256,128"], "64,128", vec![])),
        (
            "MatMul batched",
            op("MatMul", &["4,64,256", "4,256,128"], "4,64,128", vec![]),
        ),
        (
            "MatMul broadcast",
            op(
                "MatMul",
                &["2,1,64,256", "1,3,256,128"],
                "2,3,64,128",
                vec![],
            ),
        ),
        (
            "MatMul vector",
            op("MatMul", &["256", "256,128"], "128", vec![]),
        ),
        ("Gemm", op("Gemm", &[A, "256,128", "128"], "64,128", vec![])),
        (
            "Gemm transA transB",
            op(
                "Gemm",
                &["256,64", "128,256", "64,128"],
                "64,128",
                vec![attr_i("transA", 1), attr_i("transB", 1)],
            ),
        ),
        (
            "LayerNormalization",
            op(
                "LayerNormalization",
                &["16,32,64", "64", "64"],
                "16,32,64",
                vec![],
            ),
        ),
        (
            "LayerNormalization axis 1",
            op(
                "LayerNormalization",
                &["16,32,64", "32,64", "32,64"],
                "16,32,64",
                vec![attr_i("axis", 1)],
            ),
        ),
        (
            "Concat axis 0",
            op("Concat", &[A, A, A], "192,256", vec![attr_i("axis", 0)]),
        ),
        (
            "Concat axis 1",
            op("Concat", &[A, A], "64,512", vec![attr_i("axis", 1)]),
        ),
        (
            "Expand",
            ModelBuilder::new(17)
                .input("i0", DType::F32, "1,256")
                .init_i64("s", &[3], &[4, 64, 256])
                .node("Expand", &["i0", "s"], &["y"])
                .output("y", DType::F32, "4,64,256"),
        ),
    ];
    for (what, m) in cases {
        check(what, m, 0);
    }
    let t = [16u64, 32, 64];
    for (name, axes, keep) in [
        ("ReduceMean", vec![0i64], 1),
        ("ReduceMean", vec![2], 1),
        ("ReduceMean", vec![0, 2], 0),
        ("ReduceMax", vec![1], 0),
        ("ReduceMin", vec![0, 1], 1),
        ("ReduceProd", vec![1], 1),
        ("ReduceLogSumExp", vec![0], 1),
        ("ReduceL1", vec![1], 1),
        ("ReduceL2", vec![0], 1),
        ("ReduceLogSum", vec![1], 1),
        ("ReduceSumSquare", vec![1], 1),
    ] {
        let out: Vec<String> = t
            .iter()
            .enumerate()
            .filter_map(|(i, d)| match (axes.contains(&(i as i64)), keep) {
                (false, _) => Some(d.to_string()),
                (true, 1) => Some("1".into()),
                (true, _) => None,
            })
            .collect();
        check(
            &format!("{name} {axes:?}"),
            op(
                name,
                &["16,32,64"],
                &out.join(","),
                vec![attr_ints("axes", &axes), attr_i("keepdims", keep)],
            ),
            0,
        );
    }
    let m = ModelBuilder::new(17)
        .input("i0", DType::F32, "16,32,64")
        .init_i64("ax", &[1], &[0])
        .node_with(
            "ReduceSum",
            &["i0", "ax"],
            &["y"],
            vec![attr_i("keepdims", 1)],
        )
        .output("y", DType::F32, "1,32,64");
    check("ReduceSum [0]", m, 0);
}

#[test]
fn softmax_on_a_non_last_axis_and_where_keep_their_known_scratch() {
    let t = "16,32,64";
    let k = 16 * 32 * 64 * 4;
    for name in ["Softmax", "LogSoftmax"] {
        check(
            &format!("{name} last axis"),
            op(name, &[t], t, vec![attr_i("axis", -1)]),
            0,
        );
        for axis in [0, 1] {
            check(
                &format!("{name} axis {axis}"),
                op(name, &[t], t, vec![attr_i("axis", axis)]),
                2 * k,
            );
        }
    }
    let m = ModelBuilder::new(17)
        .input("c", DType::Bool, A)
        .input("x", DType::F32, "64,1")
        .input("z", DType::F32, "1,256")
        .node("Where", &["c", "x", "z"], &["y"])
        .output("y", DType::F32, A);
    check("Where broadcast", m, 2 * KA);
}
