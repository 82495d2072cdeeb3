//! ORT's view of a patched graph's shapes, resolved from its base's (`resolved_shapes_after`)
//! exactly as from scratch, names of unknown dims included: a recompute clone whose shape rule
//! names a dim after its node gets its own name, not its original's.

use std::path::Path;

use ckpt_ir::build::ModelBuilder;
use ckpt_ir::{import_bytes, DType, NewNode, NewTensor, Patch, Rewire, TensorRef};
use ckpt_passes::ort_view::{resolved_shapes, resolved_shapes_after};

/// `x` reshaped to a shape fed at run time (`s`): its dims are unknown, named after the node.
/// `r` is read twice, once through `Neg`.
fn graph() -> ckpt_ir::Graph {
    let bytes = ModelBuilder::new(17)
        .input("x", DType::F32, "24")
        .input("s", DType::I64, "2")
        .node("Reshape", &["x", "s"], &["r"])
        .node("Neg", &["r"], &["a"])
        .node("Mul", &["a", "r"], &["c"])
        .output("c", DType::F32, "4,6")
        .bytes();
    import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap()
}

/// `r` recomputed for `Mul` (a copy of its `Reshape`), and, with `rewire_neg`, for `Neg` too.
fn recompute_r(g: &ckpt_ir::Graph, rewire_neg: bool) -> Patch {
    let r = g.tensor_id("r").unwrap();
    let (x, s) = (g.tensor_id("x").unwrap(), g.tensor_id("s").unwrap());
    let reshape = g.tensor(r).producer().unwrap();
    let (neg, mul) = (g.nodes()[1], g.nodes()[2]);
    let mut rewires = vec![Rewire {
        node: mul,
        slot: 1,
        from: r,
        to: TensorRef::New(0),
    }];
    if rewire_neg {
        rewires.push(Rewire {
            node: neg,
            slot: 0,
            from: r,
            to: TensorRef::New(0),
        });
    }
    Patch {
        label: "recompute r".into(),
        tensors: vec![NewTensor {
            name: "r.recompute".into(),
            like: Some(r),
        }],
        nodes: vec![NewNode {
            name: "Reshape_r.recompute".into(),
            copy_of: reshape,
            inputs: vec![Some(TensorRef::Existing(x)), Some(TensorRef::Existing(s))],
            outputs: vec![Some(TensorRef::New(0))],
            before: neg,
        }],
        rewires,
        moves: vec![],
        metadata: vec![],
        guards: vec![],
        forget_value_info: vec![],
        substitutes: vec![],
        removals: vec![],
        constants: vec![],
        fresh: vec![],
    }
}

#[test]
fn a_clone_names_its_own_unknown_dims() {
    for rewire_neg in [false, true] {
        let g = graph();
        let base = resolved_shapes(&g);
        let r = g.tensor_id("r").unwrap();
        let (_, original) = base.get(r).unwrap();
        assert!(
            original.dims().iter().all(|d| !d.symbols().is_empty()),
            "the reshape's dims are unknown: {original:?}"
        );
        let mut g2 = g.clone();
        recompute_r(&g, rewire_neg).apply(&mut g2).unwrap();
        let clone = g2.tensor_id("r.recompute").unwrap();
        let scratch = resolved_shapes(&g2);
        let after = resolved_shapes_after(&g2, &g, &base);
        let (_, copy) = after.get(clone).unwrap();
        assert_ne!(copy, original, "the clone's dims are named after the clone");
        for t in g2.tensor_ids() {
            assert_eq!(
                after.get(t),
                scratch.get(t),
                "{} (rewire_neg {rewire_neg})",
                g2.tensor(t).name
            );
        }
    }
}
