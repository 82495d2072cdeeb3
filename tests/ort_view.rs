//! ORT's own view of shapes decides reuse and in-place sharing (`passes::ort_view`,
//! `docs/design/ort-internals.md` §2.6): hand-built graphs where ONNX Runtime cannot resolve a
//! dim, and the same graphs with the dim declared, predicted to the byte under the default
//! deployment profile against ORT's measured need.

use ckpt_ir::build::{attr_i, attr_ints, ModelBuilder};
use ckpt_ir::profile::{CallerOutputs, Profile};
use ckpt_ir::{Bindings, DType};
use ckpt_passes::device::device_need;
use ckpt_passes::memory::{schedule, simulate};
use ckpt_passes::ort_view::resolved_shapes;
use ckpt_runtime::{measure_need, Model};
use ckpt_validate::inputs::{make_inputs, InputOverrides};
use ckpt_validate::memory::session_config;

/// (predicted, measured) arena need under the default profile, and the graph as analysed
/// with its simulated live peak (the always-splitting arena's).
fn need(bytes: &[u8], b: &Bindings) -> (u64, u64, (ckpt_ir::Graph, u64)) {
    let g = ckpt_ir::import_bytes(
        bytes.to_vec().into(),
        std::path::Path::new("ort_view.onnx"),
        None,
    )
    .unwrap();
    let (g, _) = ckpt_planner::with_inferred_types(g).unwrap();
    let sim = simulate(&g, &schedule(&g).unwrap(), b).unwrap();
    let p = Profile::default();
    let o = InputOverrides::parse(&[], &[]).unwrap();
    let inputs = make_inputs(&g, b, 7, &o, &[]).unwrap().0;
    let predicted = device_need(&sim, &p);
    let measured = measure_need(
        Model::new("ort_view", bytes),
        &inputs,
        &session_config(&p),
        p.steps as usize,
        p.caller_outputs == CallerOutputs::Held,
        Some(predicted.failing_end),
    )
    .unwrap();
    (
        predicted.arena_bytes,
        measured.arena_bytes,
        (g, sim.peak_live),
    )
}

/// `[n, m]` as a shape string and its bindings (`n=512, m=1024` when symbolic).
fn x_shape(symbolic: bool) -> (&'static str, Bindings) {
    if symbolic {
        let b = Bindings::from([("n".to_string(), 512), ("m".to_string(), 1024)]);
        ("n,m", b)
    } else {
        ("512,1024", Bindings::new())
    }
}

/// The target shape `c` of a Reshape, computed from `src`'s shape by `chain`.
fn shape_chain(m: ModelBuilder, src: &str, chain: &str) -> ModelBuilder {
    match chain {
        "slice" => m
            .init_i64("st0", &[1], &[0])
            .init_i64("en0", &[1], &[1])
            .init_i64("st1", &[1], &[1])
            .init_i64("en1", &[1], &[2])
            .node("Shape", &[src], &["s"])
            .node("Slice", &["s", "st0", "en0"], &["s0"])
            .node("Slice", &["s", "st1", "en1"], &["s1"])
            .node_with("Concat", &["s0", "s1"], &["c"], vec![attr_i("axis", 0)]),
        "gather_scalar" => m
            .init_i64("i0", &[], &[0])
            .init_i64("i1", &[], &[1])
            .init_i64("ax", &[1], &[0])
            .node("Shape", &[src], &["s"])
            .node("Gather", &["s", "i0"], &["g0"])
            .node("Gather", &["s", "i1"], &["g1"])
            .node("Unsqueeze", &["g0", "ax"], &["u0"])
            .node("Unsqueeze", &["g1", "ax"], &["u1"])
            .node_with("Concat", &["u0", "u1"], &["c"], vec![attr_i("axis", 0)]),
        "gather_1d" => m
            .init_i64("ix", &[2], &[0, 1])
            .node("Shape", &[src], &["s"])
            .node("Gather", &["s", "ix"], &["c"]),
        "shape" => m.node("Shape", &[src], &["c"]),
        // A `Constant` node is an initializer when ORT infers: its data is seen.
        "constant" => m.node_with(
            "Constant",
            &[],
            &["c"],
            vec![attr_ints("value_ints", &[512, 1024])],
        ),
        // An Identity of an initializer hides its data (Identity propagates no values).
        "identity" => m
            .init_i64("k", &[2], &[512, 1024])
            .node("Identity", &["k"], &["c"]),
        other => panic!("no chain {other}"),
    }
}

/// `a = Neg(x); r = Reshape(a, c); b = Sigmoid(r); y = ReduceSum(b)`: Sigmoid runs in place
/// on `r` only when ORT's shapes of `r` and `b` are the same size.
fn in_place_graph(chain: &str, symbolic: bool, declare: bool) -> Vec<u8> {
    let (xs, _) = x_shape(symbolic);
    let mut m = ModelBuilder::new(17)
        .input("x", DType::F32, xs)
        .node("Neg", &["x"], &["a"]);
    m = shape_chain(m, "a", chain)
        .node("Reshape", &["a", "c"], &["r"])
        .node("Sigmoid", &["r"], &["b"])
        .node_with("ReduceSum", &["b"], &["y"], vec![attr_i("keepdims", 0)])
        .output("y", DType::F32, "");
    if declare {
        m = m
            .value_info("r", DType::F32, xs)
            .value_info("b", DType::F32, xs);
    }
    m.bytes()
}

/// `a = Neg(x); b = Exp(a); w = Concat(b, b)` and `d = Exp(Reshape(b, c))`, `w` running
/// between `a`'s death and `d`: `d` takes `a`'s freed buffer only when ORT's shapes of `a`
/// and `d` are the same size, and that buffer then sits idle under `w`.
fn reuse_graph(chain: &str, symbolic: bool, declare: bool) -> Vec<u8> {
    let (xs, _) = x_shape(symbolic);
    let mut m = ModelBuilder::new(17)
        .input("x", DType::F32, xs)
        .node("Neg", &["x"], &["a"])
        .node("Exp", &["a"], &["b"]);
    m = shape_chain(m, "b", chain)
        .node("Reshape", &["b", "c"], &["r"])
        .node("Exp", &["r"], &["d"])
        .node_with("ReduceSum", &["d"], &["y"], vec![attr_i("keepdims", 0)])
        .node_with("Concat", &["b", "b"], &["w"], vec![attr_i("axis", 0)])
        .node_with("ReduceSum", &["w"], &["z"], vec![attr_i("keepdims", 0)])
        .output("y", DType::F32, "")
        .output("z", DType::F32, "");
    if declare {
        m = m
            .value_info("r", DType::F32, xs)
            .value_info("d", DType::F32, xs);
    }
    m.bytes()
}

/// Whether ORT's view of `name` in `g` is fully resolved.
fn resolved(g: &ckpt_ir::Graph, name: &str) -> bool {
    resolved_shapes(g).is_resolved(g.tensor_id(name).unwrap())
}

const S: u64 = 512 * 1024 * 4;

/// A Reshape whose target comes from Shape → Slice → Concat: ORT cannot resolve its dims,
/// so the Sigmoid on it does not run in place (2 buffers where our concrete shapes say 1)
/// and the Exp after it does not take the freed buffer (which our concrete shapes would keep
/// idle under the Concat). Declaring the dims in value_info gives back both. Each predicted
/// to the byte.
#[test]
fn unresolved_reshape_blocks_in_place_and_reuse_and_value_info_restores_them() {
    let b = Bindings::new();
    let (p, m, (g, live)) = need(&in_place_graph("slice", false, false), &b);
    assert!(!resolved(&g, "r") && !resolved(&g, "b"));
    assert_eq!(p, m, "in place, unresolved: predicted {p}, measured {m}");
    let (pd, md, (g, live_d)) = need(&in_place_graph("slice", false, true), &b);
    assert!(resolved(&g, "r") && resolved(&g, "b"));
    assert_eq!(pd, md, "in place, declared: predicted {pd}, measured {md}");
    assert_eq!(live, 2 * S, "not in place: a and b coexist");
    assert!(live_d < 2 * S, "in place: one buffer ({live_d})");

    let (p, m, (g, live)) = need(&reuse_graph("slice", false, false), &b);
    assert!(!resolved(&g, "d"));
    assert_eq!(p, m, "reuse, unresolved: predicted {p}, measured {m}");
    let (pd, md, (_, live_d)) = need(&reuse_graph("slice", false, true), &b);
    assert_eq!(pd, md, "reuse, declared: predicted {pd}, measured {md}");
    assert_eq!(live_d, live + S, "reuse: a's buffer idle under w");
}

/// What ORT's data propagation resolves (integers only): Shape → Reshape, and Shape →
/// scalar Gather → Unsqueeze → Concat on a static shape; not a Gather with 1-D indices, and
/// nothing from the shape of a tensor with a symbolic dim. A `Constant` node's data is seen
/// (ORT made it an initializer), an Identity of an initializer's is not. Each predicted to
/// the byte.
#[test]
fn ort_resolves_integer_shape_values_only() {
    for (chain, symbolic, expect) in [
        ("shape", false, true),
        ("constant", false, true),
        ("identity", false, false),
        ("gather_scalar", false, true),
        ("gather_1d", false, false),
        ("shape", true, false),
        ("gather_scalar", true, false),
    ] {
        let (_, b) = x_shape(symbolic);
        let (p, m, (g, _)) = need(&in_place_graph(chain, symbolic, false), &b);
        assert_eq!(
            resolved(&g, "b"),
            expect,
            "{chain} (symbolic {symbolic}): resolved"
        );
        assert_eq!(
            p, m,
            "{chain} (symbolic {symbolic}): predicted {p}, measured {m}"
        );
        let (p, m, _) = need(&reuse_graph(chain, symbolic, false), &b);
        assert_eq!(
            p, m,
            "{chain} reuse (symbolic {symbolic}): predicted {p}, measured {m}"
        );
    }
}
