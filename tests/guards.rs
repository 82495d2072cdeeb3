//! Reuse guards (`ckpt_passes::guards`): which constant shapes are guarded, and what guarding
//! does to ONNX Runtime's need, predicted to the byte against ORT under the default profile.

use ckpt_ir::build::{attr_i, attr_ints, ModelBuilder};
use ckpt_ir::profile::Profile;
use ckpt_ir::{Bindings, DType, Graph, NodeOrigin};
use ckpt_passes::guards::reuse_guards;
use ckpt_validate::inputs::InputOverrides;

mod common;

fn import(bytes: &[u8]) -> Graph {
    let g = ckpt_ir::import_bytes(
        bytes.to_vec().into(),
        std::path::Path::new("guards.onnx"),
        None,
    )
    .unwrap();
    ckpt_planner::with_inferred_types(g).unwrap().0
}

/// (predicted, measured) arena need of `g` under the default profile.
/// Under outputs released: the graph's output `d` is the buffer ORT reuses, which a bound
/// output would take out of the arena.
fn need(g: &Graph) -> (u64, u64) {
    let p = ckpt_ir::Profile {
        caller_outputs: ckpt_ir::profile::CallerOutputs::Released,
        ..ckpt_ir::Profile::default()
    };
    common::profile_need(g, "guards", &p)
}

const S: u64 = 512 * 1024 * 4;

/// `a = Neg(x); b = Exp(a); d = Exp(Reshape(b, k))` with `w = Concat(b, b)` running between
/// `a`'s death and `d`: with a constant target `k`, ORT resolves `d`'s shape, hands it `a`'s
/// freed buffer, and that buffer sits allocated and empty under `w`.
fn idle_buffer_graph(declare: bool) -> Vec<u8> {
    let mut m = ModelBuilder::new(17)
        .input("x", DType::F32, "512,1024")
        .init_i64("k", &[2], &[512, 1024])
        .node("Neg", &["x"], &["a"])
        .node("Exp", &["a"], &["b"])
        .node("Reshape", &["b", "k"], &["r"])
        .node("Exp", &["r"], &["d"])
        .node_with("ReduceSum", &["d"], &["y"], vec![attr_i("keepdims", 0)])
        .node_with("Concat", &["b", "b"], &["w"], vec![attr_i("axis", 0)])
        .node_with("ReduceSum", &["w"], &["z"], vec![attr_i("keepdims", 0)])
        .output("y", DType::F32, "")
        .output("z", DType::F32, "");
    if declare {
        m = m
            .value_info("r", DType::F32, "512,1024")
            .value_info("d", DType::F32, "512,1024");
    }
    m.bytes()
}

/// Guarded, `d` has dims ORT leaves unknown: it gets a buffer of its own after `a`'s went back
/// to the arena, and the run needs at least one buffer less (the arena's regions round the
/// rest) — also where the file declared `d`'s shape (the guards drop that entry). Each need
/// predicted to the byte.
#[test]
fn a_guarded_reshape_target_keeps_a_freed_buffer_out_of_reuse() {
    for declare in [false, true] {
        let g = import(&idle_buffer_graph(declare));
        let (p, m) = need(&g);
        assert_eq!(
            p, m,
            "unguarded (declared {declare}): predicted {p}, measured {m}"
        );
        let patch = reuse_guards(&g, "guards");
        assert_eq!(patch.guards.len(), 1, "{patch}");
        assert_eq!(
            patch.forget_value_info.len(),
            if declare { 2 } else { 0 },
            "{patch}"
        );
        let mut guarded = g.clone();
        patch.apply(&mut guarded).unwrap();
        let (pg, mg) = need(&guarded);
        assert_eq!(
            pg, mg,
            "guarded (declared {declare}): predicted {pg}, measured {mg}"
        );
        assert!(
            mg + S <= m,
            "guarded (declared {declare}): {mg} B, not at least one idle buffer less than {m} B"
        );
    }
}

/// `a = Neg(x)`, read only by `b = ReduceMax(a)` (one column), then `w = Tile(b)` (a
/// quarter of `a`) and `v = Concat(w, w)` (half of `a`), and only after them `zeros`, a table
/// of `a`'s shape made by `op` from the constant shape `k` (`ConstantOfShape(k)`, or
/// `Expand(0, k)` as an exported `zeros_like`): with `k` seen, ORT hands `zeros` `a`'s freed
/// buffer, which sits allocated and empty under `w` and `v`, and they go above it.
fn idle_zeros_graph(op: &str) -> Vec<u8> {
    let m = ModelBuilder::new(17)
        .input("x", DType::F32, "512,1024")
        .init_i64("k", &[2], &[512, 1024])
        .init_f32("zero", &[], &[0.0])
        .init_i64("reps", &[2], &[1, 256]);
    let m = match op {
        "Expand" => m.node("Expand", &["zero", "k"], &["zeros"]),
        _ => m.node("ConstantOfShape", &["k"], &["zeros"]),
    };
    m.node_with("ReduceSum", &["zeros"], &["y"], vec![attr_i("keepdims", 0)])
        .node("Neg", &["x"], &["a"])
        .node_with(
            "ReduceMax",
            &["a"],
            &["b"],
            vec![attr_ints("axes", &[1]), attr_i("keepdims", 1)],
        )
        .node("Tile", &["b", "reps"], &["w"])
        .node_with("Concat", &["w", "w"], &["v"], vec![attr_i("axis", 1)])
        .node_with("ReduceSum", &["v"], &["z"], vec![attr_i("keepdims", 0)])
        .output("y", DType::F32, "")
        .output("z", DType::F32, "")
        .bytes()
}

/// One run's in-use peak of `g` on ORT's always-splitting arena (level disable), predicted
/// and measured: where an idle buffer shows byte for byte, the arena's layout aside.
fn in_use_peak(g: &Graph) -> (u64, u64) {
    use ckpt_runtime::{measure_peak, Arena, Model, OptLevel, SessionConfig};
    let b = Bindings::new();
    let sim =
        ckpt_passes::memory::simulate(g, &ckpt_passes::memory::schedule(g).unwrap(), &b).unwrap();
    let o = InputOverrides::parse(&[], &[]).unwrap();
    let inputs = ckpt_validate::inputs::make_inputs(g, &b, 7, &o, &[])
        .unwrap()
        .0;
    let cfg = SessionConfig {
        opt_level: OptLevel::Disable,
        arena: Arena::Exact,
        ..Default::default()
    };
    let bytes = ckpt_ir::export_bytes(g);
    let measured = measure_peak(Model::new("guards", &bytes), &inputs, &cfg).unwrap();
    (sim.peak_live, measured.peak_bytes)
}

/// The shape a `ConstantOfShape` or an `Expand` reads is guarded like a reshape target: its
/// zeros get a buffer of their own after `a`'s went back to the arena, and `w` and `v` are
/// then the run's only values at its peak: ORT's in-use peak drops by `a`'s idle buffer, less
/// what the zeros' own step holds, predicted to the byte; the default profile's need is
/// predicted to the byte on both graphs.
#[test]
fn a_guarded_zeros_shape_keeps_a_freed_buffer_out_of_reuse() {
    for op in ["ConstantOfShape", "Expand"] {
        let g = import(&idle_zeros_graph(op));
        let patch = reuse_guards(&g, "guards");
        let guarded: Vec<&str> = patch
            .guards
            .iter()
            .map(|gd| g.node(gd.node).op_type.as_str())
            .collect();
        assert_eq!(guarded, [op], "{patch}");
        let mut g2 = g.clone();
        patch.apply(&mut g2).unwrap();
        let (p, m) = in_use_peak(&g);
        assert_eq!(
            p, m,
            "{op} unguarded in-use peak: predicted {p}, measured {m}"
        );
        // What the unguarded run holds at its peak names the idle buffer by the value last
        // read in it and the one it is held for.
        let a = ckpt_planner::analyse(g.clone(), &ckpt_planner::AnalyseOptions::default()).unwrap();
        let held = ckpt_passes::ledger::held(&a.graph, &a.class, &a.sim, &a.ledger, true);
        assert_eq!(
            held.largest.first(),
            Some(&("held empty", "a -> zeros".to_string(), S)),
            "{held:?}"
        );
        assert!(held.lines.contains(&("held empty", S)), "{held:?}");
        let (pg, mg) = in_use_peak(&g2);
        assert_eq!(
            pg, mg,
            "{op} guarded in-use peak: predicted {pg}, measured {mg}"
        );
        // Unguarded: a's idle buffer (S) + w (S/4) + v (S/2) + b; guarded: the zeros (S)
        // and y.
        assert!(
            mg + S / 2 <= m,
            "{op} guarded: in-use peak {mg} B, not at least S/2 under the unguarded {m} B"
        );
        for (label, graph) in [("unguarded", &g), ("guarded", &g2)] {
            let (p, m) = need(graph);
            assert_eq!(p, m, "{op} {label} need: predicted {p}, measured {m}");
        }
    }
}

/// Only constant shapes are guarded (a Reshape's target, a ConstantOfShape's or an Expand's
/// shape): an initializer and a `Constant` node's output, not a shape the caller feeds, nor
/// one computed at run time, nor one already guarded.
#[test]
fn only_constant_shapes_are_guarded() {
    let bytes = ModelBuilder::new(17)
        .input("x", DType::F32, "4,6")
        .input("fed", DType::I64, "2")
        .init_i64("k", &[2], &[6, 4])
        .node_with(
            "Constant",
            &[],
            &["c"],
            vec![attr_ints("value_ints", &[3, 8])],
        )
        .node("Reshape", &["x", "k"], &["r1"])
        .node("Reshape", &["r1", "c"], &["r2"])
        .node("Reshape", &["r2", "fed"], &["r3"])
        .node("Shape", &["x"], &["s"])
        .node("Reshape", &["r3", "s"], &["r4"])
        .init_f32("zero", &[], &[0.0])
        .node("ConstantOfShape", &["k"], &["z1"])
        .node("ConstantOfShape", &["fed"], &["z2"])
        .node("Expand", &["zero", "c"], &["z3"])
        .node("Expand", &["zero", "s"], &["z4"])
        .output("r4", DType::F32, "4,6")
        .output("z1", DType::F32, "6,4")
        .output("z2", DType::F32, "p,q")
        .output("z3", DType::F32, "3,8")
        .output("z4", DType::F32, "4,6")
        .bytes();
    let g = import(&bytes);
    let patch = reuse_guards(&g, "guards");
    let guarded: Vec<(&str, &str)> = patch
        .guards
        .iter()
        .map(|gd| {
            let n = g.node(gd.node);
            (
                n.op_type.as_str(),
                g.tensor(n.inputs[gd.slot].unwrap()).name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        guarded,
        [
            ("Reshape", "k"),
            ("Reshape", "c"),
            ("ConstantOfShape", "k"),
            ("Expand", "c")
        ]
    );
    let mut g2 = g.clone();
    patch.apply(&mut g2).unwrap();
    let identities = g2
        .nodes()
        .iter()
        .filter(|&&n| g2.node(n).origin == NodeOrigin::Guard)
        .count();
    assert_eq!(identities, 4);
    assert!(reuse_guards(&g2, "again").guards.is_empty());
}

/// gpt2_d0_aot at 72% of its footprint (its copies folded and order moves alone fit 73%): the
/// plan guards the graph's reshape targets, and the rewrite validates on ORT under the
/// default profile: the same losses and gradients bit for bit, measured within the ceiling
/// and in an arena capped at it, predicted within 1%.
#[test]
fn a_guarded_plan_validates_under_its_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let model = common::root().join("tests/fixtures/gpt2_d0_aot.onnx");
    let r = common::validated_run(&model, "72%", &out, &[]);
    common::assert_validated_rewrite(&r, "gpt2_d0_aot at 72%");
    let patch = r["patch"].as_str().unwrap();
    assert!(patch.contains("through Identity"), "{patch}");
    let g = ckpt_ir::import_file(&out).unwrap();
    let guards = g
        .nodes()
        .iter()
        .filter(|&&n| g.node(n).op_type == "Identity" && g.node(n).name.contains(".guard"))
        .count();
    assert!(guards > 0, "the output has no guard");
}

/// Every standard fixture and the bundled example, guarded: the predicted need under the
/// default profile is ORT's to the byte (the guarded graph is a variant the planner may pick,
/// so its prediction must be as good as the given graph's).
#[test]
fn every_fixture_guarded_is_predicted_to_the_byte() {
    let mut files: Vec<_> = common::std_fixtures().into_iter().map(|f| f.path).collect();
    files.push(common::root().join("examples/gpt2_4l_train.onnx"));
    let _p = Profile::default();
    let _b = Bindings::new();
    let _overrides = InputOverrides::parse(&[], &["attention_mask=1:2".to_string()]).unwrap();
    let mut misses = Vec::new();
    let mut guarded_any = 0;
    for f in &files {
        let g = ckpt_ir::import_file(f).unwrap();
        let patch = reuse_guards(&g, "guards");
        if patch.guards.is_empty() {
            continue;
        }
        guarded_any += 1;
        let mut g2 = g.clone();
        patch.apply(&mut g2).unwrap();
        let (predicted, measured) = need(&g2);
        if predicted != measured {
            misses.push(format!(
                "{}: predicted {predicted}, measured {measured}",
                f.display()
            ));
        }
    }
    assert!(
        guarded_any >= 10,
        "only {guarded_any} fixtures have a guard"
    );
    assert!(misses.is_empty(), "{misses:#?}");
}
