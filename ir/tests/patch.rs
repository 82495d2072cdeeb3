//! Patches: applied in one place, verified after.

use std::path::Path;

use ckpt_ir::build::ModelBuilder;
use ckpt_ir::{
    export, export_bytes, import_bytes, print_graph, DType, Guard, Move, NewNode, NewTensor, Patch,
    PatchError, Rewire, TensorRef,
};

mod patch_common;
use patch_common::neg_graph;

fn graph() -> ckpt_ir::Graph {
    let bytes = ModelBuilder::new(20)
        .input("x", DType::F32, "8")
        .node("Relu", &["x"], &["a"])
        .node("Neg", &["a"], &["b"])
        .node("Mul", &["b", "a"], &["c"])
        .value_info("a", DType::F32, "8")
        .output("c", DType::F32, "8")
        .bytes();
    import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap()
}

/// `graph()`'s `a` recomputed for `Mul`: a copy of its `Relu` before `Mul`, which reads the
/// copy in slot 1.
fn recompute_a(g: &ckpt_ir::Graph, metadata: Vec<(String, String)>) -> Patch {
    let a = g.tensor_id("a").unwrap();
    let relu = g.tensor(a).producer().unwrap();
    let mul = g.nodes()[2];
    let x = g.tensor_id("x").unwrap();
    Patch {
        label: "recompute a".into(),
        tensors: vec![NewTensor {
            name: "a.recompute".into(),
            like: Some(a),
        }],
        nodes: vec![NewNode {
            name: "Relu_a.recompute".into(),
            copy_of: relu,
            inputs: vec![Some(TensorRef::Existing(x))],
            outputs: vec![Some(TensorRef::New(0))],
            before: mul,
        }],
        rewires: vec![Rewire {
            node: mul,
            slot: 1,
            from: a,
            to: TensorRef::New(0),
        }],
        moves: vec![],
        constants: vec![],
        fresh: vec![],
        metadata,
        guards: vec![],
        forget_value_info: vec![],
        substitutes: vec![],
        removals: vec![],
    }
}

#[test]
fn clone_and_rewire() {
    let mut g = graph();
    let a = g.tensor_id("a").unwrap();
    let patch = recompute_a(&g, vec![("k".into(), "v".into())]);
    insta::assert_snapshot!("patch_value", patch.to_string());
    let applied = patch.apply(&mut g).unwrap();
    assert_eq!(applied.nodes.len(), 1);
    assert_eq!(g.tensor(a).consumers(), &[g.nodes()[1]]);
    insta::assert_snapshot!("patched_graph", print_graph(&g));
    let m = export(&g);
    let vi = &m.graph.as_ref().unwrap().value_info;
    assert!(vi.iter().any(|v| v.name.as_deref() == Some("a.recompute")));
    // The clone shares its original's stored proto, and is exported under its own name; the
    // original keeps its own.
    let names: Vec<Option<&str>> = m
        .graph
        .as_ref()
        .unwrap()
        .node
        .iter()
        .map(|n| n.name.as_deref())
        .collect();
    assert_eq!(
        names,
        [
            Some("Relu_a"),
            Some("Neg_b"),
            Some("Relu_a.recompute"),
            Some("Mul_c")
        ]
    );
    assert_eq!(m.metadata_props[0].value.as_deref(), Some("v"));
}

/// A clone shares its graph's nodes, tensors, names and model until it changes one: a patch
/// applied to the clone copies what it changes and leaves the original as it was (its text,
/// its names, its consumers), and the clone still shares what the patch left alone.
#[test]
fn a_patched_clone_leaves_its_original_alone() {
    let g = graph();
    let before = print_graph(&g);
    let mut c = g.clone();
    let (a, b, x) = (
        g.tensor_id("a").unwrap(),
        g.tensor_id("b").unwrap(),
        g.tensor_id("x").unwrap(),
    );
    assert!(c.shares_model(&g) && c.shares_tensor(&g, a) && c.shares_tensor(&g, x));
    let mul = g.nodes()[2];
    recompute_a(&g, vec![]).apply(&mut c).unwrap();
    assert_eq!(print_graph(&g), before);
    assert_eq!(g.tensor_id("a.recompute"), None);
    let new = c.tensor_id("a.recompute").unwrap();
    assert_eq!(c.tensor(new).producer(), Some(c.nodes()[2]));
    assert_eq!(g.tensor(a).consumers(), &[g.nodes()[1], mul]);
    assert_eq!(c.tensor(a).consumers(), &[g.nodes()[1]]);
    // What the patch changed is copied (a lost a reader, x gained one); b is shared still.
    assert!(!c.shares_tensor(&g, a) && !c.shares_tensor(&g, x));
    assert!(c.shares_tensor(&g, b) && c.shares_model(&g));
    assert!(!c.shares_tensor(&g, new));
    assert_eq!(c.tensor_id("b"), Some(b));
}

#[test]
fn placing_a_clone_before_its_input_is_rejected() {
    let mut g = graph();
    let a = g.tensor_id("a").unwrap();
    let neg = g
        .tensor_id("b")
        .and_then(|b| g.tensor(b).producer())
        .unwrap();
    let relu = g.nodes()[0];
    let patch = Patch {
        label: "bad".into(),
        tensors: vec![NewTensor {
            name: "b2".into(),
            like: Some(a),
        }],
        nodes: vec![NewNode {
            name: "neg2".into(),
            copy_of: neg,
            inputs: vec![Some(TensorRef::Existing(a))],
            outputs: vec![Some(TensorRef::New(0))],
            before: relu,
        }],
        ..Default::default()
    };
    assert!(matches!(
        patch.apply(&mut g),
        Err(PatchError::Verify { .. })
    ));
}

#[test]
fn rewire_of_wrong_tensor_is_rejected() {
    let mut g = graph();
    let x = g.tensor_id("x").unwrap();
    let mul = g.nodes()[2];
    let patch = Patch {
        label: "wrong".into(),
        rewires: vec![Rewire {
            node: mul,
            slot: 0,
            from: x,
            to: TensorRef::Existing(x),
        }],
        ..Default::default()
    };
    assert!(matches!(
        patch.apply(&mut g),
        Err(PatchError::RewireMismatch { .. })
    ));
}

#[test]
fn duplicate_name_is_rejected() {
    let mut g = graph();
    let a = g.tensor_id("a").unwrap();
    let patch = Patch {
        label: "dup".into(),
        tensors: vec![NewTensor {
            name: "b".into(),
            like: Some(a),
        }],
        ..Default::default()
    };
    assert!(matches!(
        patch.apply(&mut g),
        Err(PatchError::NameTaken { .. })
    ));
}

/// A new node under a name a node of the graph holds (though no tensor does) is refused, and
/// so are two new nodes of one name: ONNX Runtime does not load either file.
#[test]
fn a_taken_node_name_is_rejected() {
    let mut g = graph();
    let mut once = recompute_a(&g, vec![]);
    once.nodes[0].name = g.node(g.nodes()[1]).name.clone();
    assert!(!once.nodes[0].name.is_empty());
    let e = once.apply(&mut g.clone());
    assert!(
        matches!(e, Err(PatchError::NodeNameTaken { ref name, .. }) if *name == once.nodes[0].name),
        "{e:?}"
    );
    let mut twice = recompute_a(&g, vec![]);
    twice.tensors.push(NewTensor {
        name: "a.recompute2".into(),
        like: g.tensor_id("a"),
    });
    let mut second = twice.nodes[0].clone();
    second.outputs = vec![Some(TensorRef::New(1))];
    twice.nodes.push(second);
    let e = twice.apply(&mut g);
    assert!(
        matches!(e, Err(PatchError::NodeNameTaken { ref name, .. }) if name == "Relu_a.recompute"),
        "{e:?}"
    );
}

/// x -> Relu a -> Neg b; Exp e (reads only x, placed early in the file) -> Mul c(b, e).
fn graph_with_early_node() -> ckpt_ir::Graph {
    let bytes = ModelBuilder::new(20)
        .input("x", DType::F32, "8")
        .node("Exp", &["x"], &["e"])
        .node("Relu", &["x"], &["a"])
        .node("Neg", &["a"], &["b"])
        .node("Mul", &["b", "e"], &["c"])
        .output("c", DType::F32, "8")
        .bytes();
    import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap()
}

#[test]
fn move_places_a_node_later_with_new_inputs() {
    let mut g = graph_with_early_node();
    let [exp, relu, neg, mul] = [0, 1, 2, 3].map(|i| g.nodes()[i]);
    let (x, a) = (g.tensor_id("x").unwrap(), g.tensor_id("a").unwrap());
    // Move Exp right before Mul, reading `a` instead of `x` (a different graph, but valid).
    let patch = Patch {
        label: "move".into(),
        moves: vec![Move {
            node: exp,
            inputs: vec![Some(TensorRef::Existing(a))],
            before: mul,
            after_new: 0,
        }],
        ..Default::default()
    };
    insta::assert_snapshot!("move_value", patch.to_string());
    patch.apply(&mut g).unwrap();
    assert_eq!(g.nodes(), &[relu, neg, exp, mul]);
    assert!(g.tensor(x).consumers().contains(&relu) && !g.tensor(x).consumers().contains(&exp));
    assert!(g.tensor(a).consumers().contains(&exp));
    let m = export(&g);
    let names: Vec<_> = m
        .graph
        .as_ref()
        .unwrap()
        .node
        .iter()
        .map(|n| n.op_type.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["Relu", "Neg", "Exp", "Mul"]);
    assert_eq!(m.graph.as_ref().unwrap().node[2].input, ["a"]);
}

#[test]
fn move_orders_after_the_new_nodes_it_follows() {
    let mut g = graph_with_early_node();
    let [exp, _, neg, mul] = [0, 1, 2, 3].map(|i| g.nodes()[i]);
    let e = g.tensor_id("e").unwrap();
    // A clone of Neg reading `e`, and Exp moved: with after_new = 0 the move lands before the
    // clone (valid); with after_new = 1 after it (the clone would read `e` too early).
    let patch = |after_new: usize| Patch {
        label: "order".into(),
        tensors: vec![NewTensor {
            name: "b2".into(),
            like: Some(e),
        }],
        nodes: vec![NewNode {
            name: "neg2".into(),
            copy_of: neg,
            inputs: vec![Some(TensorRef::Existing(e))],
            outputs: vec![Some(TensorRef::New(0))],
            before: mul,
        }],
        moves: vec![Move {
            node: exp,
            inputs: vec![g.node(exp).inputs[0].map(TensorRef::Existing)],
            before: mul,
            after_new,
        }],
        ..Default::default()
    };
    let mut g2 = g.clone();
    patch(0).apply(&mut g2).unwrap();
    assert!(matches!(
        patch(1).apply(&mut g),
        Err(PatchError::Verify { .. })
    ));
}

#[test]
fn bad_moves_are_rejected() {
    let g = graph_with_early_node();
    let exp = g.nodes()[0];
    let mul = g.nodes()[3];
    let twice = Patch {
        label: "twice".into(),
        moves: vec![
            Move {
                node: exp,
                inputs: vec![None],
                before: mul,
                after_new: 0
            };
            2
        ],
        ..Default::default()
    };
    assert!(matches!(
        twice.apply(&mut g.clone()),
        Err(PatchError::BadMove { .. })
    ));
    let arity = Patch {
        label: "arity".into(),
        moves: vec![Move {
            node: exp,
            inputs: vec![],
            before: mul,
            after_new: 0,
        }],
        ..Default::default()
    };
    assert!(matches!(
        arity.apply(&mut g.clone()),
        Err(PatchError::BadMove { .. })
    ));
}

fn reshape_graph() -> ckpt_ir::Graph {
    let bytes = ModelBuilder::new(20)
        .input("x", DType::F32, "2,4")
        .init_i64("shape", &[1], &[8])
        .node("Relu", &["x"], &["a"])
        .node("Reshape", &["a", "shape"], &["r"])
        .node("Neg", &["r"], &["y"])
        .value_info("a", DType::F32, "2,4")
        .value_info("r", DType::F32, "8")
        .output("y", DType::F32, "8")
        .bytes();
    import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap()
}

/// A guard makes a Reshape read its target through an `Identity` placed right before it;
/// the printed patch says so; forgotten value_info entries leave the exported file, the
/// others stay; the export imports again with the Identity in place.
#[test]
fn guard_reads_a_reshape_target_through_an_identity() {
    let mut g = reshape_graph();
    let reshape = g.nodes()[1];
    let shape = g.tensor_id("shape").unwrap();
    let r = g.tensor_id("r").unwrap();
    let patch = Patch {
        label: "guard".into(),
        guards: vec![Guard {
            node: reshape,
            slot: 1,
            name: "shape.guard".into(),
        }],
        forget_value_info: vec![r],
        ..Default::default()
    };
    let text = patch.to_string();
    assert!(
        text.contains(&format!(
            "guard {reshape}[1] through Identity -> \"shape.guard\""
        )) && text.contains(&format!("forget value_info {r}")),
        "{text}"
    );
    let applied = patch.apply(&mut g).unwrap();
    let [id] = applied.nodes[..] else {
        panic!("one new node: {applied:?}");
    };
    let guarded = g.tensor_id("shape.guard").unwrap();
    assert_eq!(g.node(id).op_type, "Identity");
    assert_eq!(g.node(id).inputs, vec![Some(shape)]);
    assert_eq!(g.node(id).outputs, vec![Some(guarded)]);
    assert_eq!(g.node(reshape).inputs[1], Some(guarded));
    assert_eq!(g.tensor(shape).consumers(), &[id]);
    assert_eq!(g.tensor(guarded).consumers(), &[reshape]);
    let pos = |n| g.nodes().iter().position(|&m| m == n).unwrap();
    assert_eq!(pos(id) + 1, pos(reshape));
    let m = export(&g);
    let declared: Vec<&str> = m
        .graph
        .as_ref()
        .unwrap()
        .value_info
        .iter()
        .filter_map(|v| v.name.as_deref())
        .collect();
    assert!(
        declared.contains(&"a") && !declared.contains(&"r"),
        "{declared:?}"
    );
    let again = import_bytes(export_bytes(&g).into(), Path::new("t2.onnx"), None).unwrap();
    let ops: Vec<&str> = again
        .nodes()
        .iter()
        .map(|&n| again.node(n).op_type.as_str())
        .collect();
    assert_eq!(ops, ["Relu", "Identity", "Reshape", "Neg"]);
}

/// A guard of a slot the node does not have, or of a name already taken, is refused.
#[test]
fn guard_of_a_missing_input_or_a_taken_name_is_refused() {
    let mut g = reshape_graph();
    let relu = g.nodes()[0];
    let reshape = g.nodes()[1];
    let guard = |node, slot, name: &str| Patch {
        label: "bad guard".into(),
        guards: vec![Guard {
            node,
            slot,
            name: name.into(),
        }],
        ..Default::default()
    };
    assert!(matches!(
        guard(relu, 1, "x.guard").apply(&mut g),
        Err(PatchError::BadGuard { slot: 1, .. })
    ));
    assert!(matches!(
        guard(reshape, 1, "a").apply(&mut g),
        Err(PatchError::NameTaken { .. })
    ));
}

/// `y = MatMul(Transpose(a), b)` with `t`'s value_info, and `z = Neg(t2)` where a second
/// Transpose is also a graph output.
fn transposed_matmul() -> ckpt_ir::Graph {
    use ckpt_ir::build::attr_ints;
    let bytes = ModelBuilder::new(20)
        .input("a", DType::F32, "4,3")
        .input("b", DType::F32, "4,5")
        .node_with(
            "Transpose",
            &["a"],
            &["t"],
            vec![attr_ints("perm", &[1, 0])],
        )
        .node("MatMul", &["t", "b"], &["y"])
        .value_info("t", DType::F32, "3,4")
        .output("y", DType::F32, "3,5")
        .bytes();
    import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap()
}

/// A substitute gives a node another op, attributes and inputs in its place; a removal takes
/// the unread Transpose out with its output, whose name no longer resolves and whose
/// value_info leaves the file. The patch prints both, and the export imports again.
#[test]
fn a_substitute_and_a_removal_fold_a_transpose_into_its_reader() {
    use ckpt_ir::build::attr_i;
    let mut g = transposed_matmul();
    let (transpose, matmul) = (g.nodes()[0], g.nodes()[1]);
    let (a, b, t) = (
        g.tensor_id("a").unwrap(),
        g.tensor_id("b").unwrap(),
        g.tensor_id("t").unwrap(),
    );
    let patch = Patch {
        substitutes: vec![ckpt_ir::Substitute {
            node: matmul,
            op_type: "Gemm".into(),
            attributes: vec![attr_i("transA", 1)],
            inputs: vec![Some(TensorRef::Existing(a)), Some(TensorRef::Existing(b))],
        }],
        removals: vec![transpose],
        ..Patch::new("fold")
    };
    let text = patch.to_string();
    assert!(
        text.contains(&format!(
            "substitute {matmul} = Gemm({a}, {b}) {{transA=1}}"
        )) && text.contains(&format!("remove {transpose}")),
        "{text}"
    );
    patch.apply(&mut g).unwrap();
    assert_eq!(g.nodes(), [matmul]);
    assert_eq!(g.node(matmul).op_type, "Gemm");
    assert!(g.tensor_id("t").is_none() && g.is_removed(t));
    assert!(g.tensor(a).consumers() == [matmul]);
    let m = export(&g);
    let gp = m.graph.as_ref().unwrap();
    assert_eq!(gp.node.len(), 1);
    assert_eq!(gp.node[0].op_type.as_deref(), Some("Gemm"));
    assert_eq!(gp.node[0].input, ["a", "b"]);
    assert!(gp
        .value_info
        .iter()
        .all(|vi| vi.name.as_deref() != Some("t")));
    let again = import_bytes(export_bytes(&g).into(), Path::new("t.onnx"), None).unwrap();
    assert_eq!(export_bytes(&again), export_bytes(&g));
    assert!(print_graph(&again).contains("= Gemm(%0, %1) {transA=1}"));
}

/// A removal of a node whose output is still read, or a substitute to an op the registry does
/// not know at the model's opset, is refused by name.
#[test]
fn a_removal_of_a_read_node_or_a_substitute_to_an_unknown_op_is_refused() {
    let g = transposed_matmul();
    let (transpose, matmul) = (g.nodes()[0], g.nodes()[1]);
    let removal = Patch {
        removals: vec![transpose],
        ..Patch::new("remove")
    };
    assert!(matches!(
        removal.apply(&mut g.clone()),
        Err(PatchError::BadRemoval { node, .. }) if node == transpose
    ));
    let unknown = Patch {
        substitutes: vec![ckpt_ir::Substitute {
            node: matmul,
            op_type: "NoSuchOp".into(),
            attributes: vec![],
            inputs: vec![],
        }],
        ..Patch::new("substitute")
    };
    let e = unknown.apply(&mut g.clone()).unwrap_err();
    assert!(
        matches!(&e, PatchError::BadSubstitute { node, .. } if *node == matmul),
        "{e}"
    );
}

/// i64 `values` as a 1-D TensorProto.
fn ints(values: &[i64]) -> ckpt_ir::onnx::TensorProto {
    ckpt_ir::onnx::TensorProto {
        dims: vec![values.len() as i64],
        data_type: Some(DType::I64.code()),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

/// A new constant is a `Constant` node placed before its anchor, its tensor typed by its
/// value, readable as a constant, printed, exported and imported again; a substitute reads it.
#[test]
fn a_constant_is_a_new_constant_node_a_substitute_can_read() {
    let mut g = neg_graph();
    let neg = g.nodes()[0];
    let x = g.tensor_id("x").unwrap();
    let patch = Patch {
        constants: vec![ckpt_ir::NewConstant {
            name: "pads".into(),
            value: ints(&[0, 0, 0, 1]),
            before: neg,
        }],
        substitutes: vec![ckpt_ir::Substitute {
            node: neg,
            op_type: "Pad".into(),
            attributes: vec![],
            inputs: vec![Some(TensorRef::Existing(x)), Some(TensorRef::Constant(0))],
        }],
        ..Patch::new("pad")
    };
    let text = patch.to_string();
    assert!(
        text.contains(&format!(
            "constant const0 \"pads\" = i64[4] [0, 0, 0, 1] before {neg}"
        )) && text.contains(&format!("substitute {neg} = Pad({x}, const0)")),
        "{text}"
    );
    let applied = patch.apply(&mut g).unwrap();
    let pads = g.tensor_id("pads").unwrap();
    assert_eq!(applied.tensors, [pads]);
    assert_eq!(g.node(g.nodes()[0]).op_type, "Constant");
    assert_eq!(g.node(g.nodes()[0]).origin, ckpt_ir::NodeOrigin::Constant);
    assert_eq!(ckpt_ir::type_str(&g, pads), "i64[4]");
    assert_eq!(ckpt_ir::ops::constant_i64(&g, pads), Some(vec![0, 0, 0, 1]));
    let again = import_bytes(export_bytes(&g).into(), Path::new("t.onnx"), None).unwrap();
    assert_eq!(export_bytes(&again), export_bytes(&g));
    assert!(
        print_graph(&again).contains("= Pad(%0, %1)"),
        "{}",
        print_graph(&again)
    );
}

/// A constant under a name the graph holds, with a negative dim or an unknown element type,
/// before a node that is not there, or a reference past the patch's constants is refused.
#[test]
fn a_bad_constant_is_refused_by_name() {
    let g = neg_graph();
    let neg = g.nodes()[0];
    let constant = |name: &str, value, before| Patch {
        constants: vec![ckpt_ir::NewConstant {
            name: name.into(),
            value,
            before,
        }],
        ..Patch::new("c")
    };
    let e = constant("x", ints(&[1]), neg).apply(&mut g.clone());
    assert!(
        matches!(e, Err(PatchError::NameTaken { ref name, .. }) if name == "x"),
        "{e:?}"
    );
    let mut negative = ints(&[1]);
    negative.dims = vec![-1];
    let mut untyped = ints(&[1]);
    untyped.data_type = Some(0);
    for (value, before) in [
        (negative, neg),
        (untyped, neg),
        (ints(&[1]), transposed_matmul().nodes()[1]),
    ] {
        let e = constant("c", value, before).apply(&mut g.clone());
        assert!(
            matches!(e, Err(PatchError::BadConstant { ref name, .. }) if name == "c"),
            "{e:?}"
        );
    }
    let past = Patch {
        substitutes: vec![ckpt_ir::Substitute {
            node: neg,
            op_type: "Pad".into(),
            attributes: vec![],
            inputs: vec![Some(TensorRef::Constant(0))],
        }],
        ..Patch::new("past")
    };
    assert!(matches!(
        past.apply(&mut g.clone()),
        Err(PatchError::NoSuchConstant { index: 0, .. })
    ));
}

/// A removal takes with it the initializers only removed nodes read, out of the file too; an
/// initializer the caller may override (a graph input as well) stays.
#[test]
fn a_removal_drops_the_constants_only_it_read() {
    let bytes = ModelBuilder::new(18)
        .input("x", DType::F32, "2,3")
        .input("k", DType::I64, "1")
        .init_i64("s", &[1], &[6])
        .init_i64("k", &[1], &[6])
        .node("Reshape", &["x", "s"], &["r1"])
        .node("Reshape", &["x", "k"], &["r2"])
        .node("Neg", &["x"], &["y"])
        .output("y", DType::F32, "2,3")
        .bytes();
    let mut g = import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap();
    let (r1, r2) = (g.nodes()[0], g.nodes()[1]);
    let s = g.tensor_id("s").unwrap();
    let patch = Patch {
        removals: vec![r1, r2],
        ..Patch::new("remove")
    };
    patch.apply(&mut g).unwrap();
    assert!(g.is_removed(s) && g.tensor_id("s").is_none());
    let kept: Vec<String> = g.initializers().map(|t| g.tensor(t).name.clone()).collect();
    assert_eq!(kept, ["k"]);
    let m = export(&g);
    let names: Vec<_> = m
        .graph
        .as_ref()
        .unwrap()
        .initializer
        .iter()
        .map(|i| i.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["k"]);
    let again = import_bytes(export_bytes(&g).into(), Path::new("t.onnx"), None).unwrap();
    assert_eq!(again.node_count(), 1);
}

/// A fresh node is a node of an op no node of the graph has (`Slice` here), writing an
/// untyped new tensor that inference types; it is printed with its op and attributes, goes
/// before its anchor, and a constant it reads at the same anchor goes ahead of it.
#[test]
fn a_fresh_node_reads_a_constant_placed_ahead_of_it() {
    let mut g = neg_graph();
    let neg = g.nodes()[0];
    let x = g.tensor_id("x").unwrap();
    let one = || ints(&[1]);
    let patch = Patch {
        tensors: vec![ckpt_ir::NewTensor {
            name: "x.first".into(),
            like: None,
        }],
        fresh: vec![ckpt_ir::FreshNode {
            name: "first_row".into(),
            domain: None,
            op_type: "Slice".into(),
            attributes: vec![],
            inputs: vec![
                Some(TensorRef::Existing(x)),
                Some(TensorRef::Constant(0)),
                Some(TensorRef::Constant(1)),
            ],
            outputs: vec![Some(TensorRef::New(0))],
            before: neg,
        }],
        constants: vec![
            ckpt_ir::NewConstant {
                name: "zero".into(),
                value: ints(&[0]),
                before: neg,
            },
            ckpt_ir::NewConstant {
                name: "one".into(),
                value: one(),
                before: neg,
            },
        ],
        rewires: vec![Rewire {
            node: neg,
            slot: 0,
            from: x,
            to: TensorRef::New(0),
        }],
        ..Patch::new("slice")
    };
    let text = patch.to_string();
    assert!(
        text.contains("  tensor new0 \"x.first\"\n")
            && text.contains(&format!(
                "node \"first_row\" = Slice({x}, const0, const1) {{}} -> new0 before {neg}"
            )),
        "{text}"
    );
    patch.apply(&mut g).unwrap();
    let ops: Vec<&str> = g
        .nodes()
        .iter()
        .map(|&n| g.node(n).op_type.as_str())
        .collect();
    assert_eq!(ops, ["Constant", "Constant", "Slice", "Neg"]);
    assert_eq!(g.node(g.nodes()[2]).origin, ckpt_ir::NodeOrigin::Fresh);
    let first = g.tensor_id("x.first").unwrap();
    assert_eq!(ckpt_ir::type_str(&g, first), "?[?]");
    let types = ckpt_ir::ops::infer(&g).unwrap();
    assert_eq!(types.get(first).unwrap().shape.to_string(), "[1,3]");
}
