//! A slice's gradient scattered into zeros, folded into one `Pad`
//! (`ckpt_passes::fold::fold_scattered_slices`): only a run of consecutive positions written
//! by a plain ScatterND into +0 zeros, through Transposes that undo each other.

use std::path::Path;

use ckpt_ir::build::{attr_ints, attr_s, ModelBuilder};
use ckpt_ir::onnx;
use ckpt_ir::{import_bytes, DType, Graph};
use ckpt_passes::fold::{fold, fold_scattered_slices};

mod fold_common;
use fold_common::{fill, node_of, typed};

/// What one case changes from the exporter's `slice_scatter` of `dy: f32[2,3,4]` into a
/// `[2,5,4]` table at positions 1..4 of axis 1.
#[derive(Clone)]
struct Case {
    opset: i64,
    fill: Option<f32>,
    positions: Vec<i64>,
    reduction: Option<&'static str>,
    perm_back: Vec<i64>,
    dtype: DType,
    scatter_read_twice: bool,
}

impl Default for Case {
    fn default() -> Case {
        Case {
            opset: 18,
            fill: None,
            positions: vec![1, 2, 3],
            reduction: None,
            perm_back: vec![1, 0, 2],
            dtype: DType::F32,
            scatter_read_twice: false,
        }
    }
}

fn graph(c: &Case) -> Graph {
    let fill_attr = c.fill.map(fill).into_iter().collect();
    let mut scatter_attrs = Vec::new();
    if let Some(r) = c.reduction {
        scatter_attrs.push(attr_s("reduction", r));
    }
    let mut m = ModelBuilder::new(c.opset)
        .input("dy", c.dtype, "2,3,4")
        .init_i64("shape", &[3], &[2, 5, 4])
        .init_i64("pos", &[c.positions.len() as i64, 1], &c.positions)
        .node_with("ConstantOfShape", &["shape"], &["zeros"], fill_attr)
        .node_with(
            "Transpose",
            &["dy"],
            &["dy_t"],
            vec![attr_ints("perm", &[1, 0, 2])],
        )
        .node_with(
            "Transpose",
            &["zeros"],
            &["zeros_t"],
            vec![attr_ints("perm", &[1, 0, 2])],
        )
        .node_with(
            "ScatterND",
            &["zeros_t", "pos", "dy_t"],
            &["s_t"],
            scatter_attrs,
        )
        .node_with(
            "Transpose",
            &["s_t"],
            &["g"],
            vec![attr_ints("perm", &c.perm_back)],
        )
        .output("g", c.dtype, "2,5,4");
    if c.scatter_read_twice {
        m = m
            .node("Neg", &["s_t"], &["n"])
            .output("n", c.dtype, "5,2,4");
    }
    typed(m.bytes())
}

/// The exporter's form becomes `Pad(dy, [0,1,0, 0,1,0])` written by the Transpose back's node;
/// the ScatterND, both Transposes and the zeros are removed; the pads are a new constant.
#[test]
fn a_scattered_slice_becomes_one_pad() {
    for fill in [None, Some(0.0)] {
        let mut g = graph(&Case {
            fill,
            ..Case::default()
        });
        let patch = fold_scattered_slices(&g, "folded");
        assert_eq!(patch.substitutes.len(), 1, "{patch}");
        assert_eq!(patch.substitutes[0].node, node_of(&g, "g"));
        assert_eq!(patch.substitutes[0].op_type, "Pad");
        let mut removed = patch.removals.clone();
        removed.sort();
        let mut expected = ["s_t", "dy_t", "zeros_t", "zeros"].map(|t| node_of(&g, t));
        expected.sort();
        assert_eq!(removed, expected, "{patch}");
        assert!(
            patch
                .to_string()
                .contains("constant const0 \"g.pads\" = i64[6] [0, 1, 0, 0, 1, 0]"),
            "{patch}"
        );
        patch.apply(&mut g).unwrap();
        let ops: Vec<&str> = g
            .nodes()
            .iter()
            .map(|&n| g.node(n).op_type.as_str())
            .collect();
        assert_eq!(ops, ["Constant", "Pad"]);
        let pads = g.tensor_id("g.pads").unwrap();
        assert_eq!(
            ckpt_ir::ops::constant_i64(&g, pads),
            Some(vec![0, 1, 0, 0, 1, 0])
        );
        let exported = ckpt_ir::export_bytes(&g);
        let back = import_bytes(exported.into(), Path::new("t.onnx"), None).unwrap();
        assert_eq!(back.node_count(), 2);
    }
}

/// Without Transposes the ScatterND writes axis 0 itself and becomes the Pad.
#[test]
fn a_scatter_into_the_first_axis_becomes_a_pad_itself() {
    let bytes = ModelBuilder::new(18)
        .input("dy", DType::I64, "2,4")
        .init_i64("shape", &[2], &[6, 4])
        .init_i64("pos", &[2, 1], &[4, 5])
        .node_with(
            "ConstantOfShape",
            &["shape"],
            &["zeros"],
            vec![onnx::AttributeProto {
                name: Some("value".into()),
                r#type: Some(onnx::attribute_proto::AttributeType::Tensor as i32),
                t: Some(onnx::TensorProto {
                    dims: vec![1],
                    data_type: Some(DType::I64.code()),
                    int64_data: vec![0],
                    ..Default::default()
                }),
                ..Default::default()
            }],
        )
        .node("ScatterND", &["zeros", "pos", "dy"], &["g"])
        .output("g", DType::I64, "6,4")
        .bytes();
    let mut g = typed(bytes);
    let patch = fold_scattered_slices(&g, "folded");
    assert_eq!(patch.substitutes.len(), 1, "{patch}");
    assert_eq!(patch.substitutes[0].node, node_of(&g, "g"));
    assert_eq!(patch.removals, [node_of(&g, "zeros")], "{patch}");
    assert!(patch.to_string().contains("[4, 0, 0, 0]"), "{patch}");
    patch.apply(&mut g).unwrap();
}

/// Each of these leaves the graph as it is: -0.0 zeros (a Pad writes +0.0), positions that are
/// not a run (one that would count past i64::MAX included), an accumulating ScatterND, a Transpose back that does not undo the others, a
/// ScatterND result something else reads, an element type ONNX Runtime's CPU Pad lacks (f16),
/// and an opset whose Pad takes its pads as an attribute.
#[test]
fn anything_but_a_plain_run_into_zeros_is_left_alone() {
    let cases = [
        Case {
            fill: Some(-0.0),
            ..Case::default()
        },
        Case {
            fill: Some(1.0),
            ..Case::default()
        },
        Case {
            positions: vec![1, 3, 4],
            ..Case::default()
        },
        Case {
            positions: vec![3, 2, 1],
            ..Case::default()
        },
        // A run that would pass i64::MAX (the last position wraps).
        Case {
            positions: vec![i64::MAX - 1, i64::MAX, i64::MIN],
            ..Case::default()
        },
        Case {
            reduction: Some("add"),
            ..Case::default()
        },
        Case {
            perm_back: vec![1, 2, 0],
            ..Case::default()
        },
        Case {
            scatter_read_twice: true,
            ..Case::default()
        },
        Case {
            dtype: DType::F16,
            ..Case::default()
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let g = graph(c);
        let patch = fold(&g, "folded");
        assert!(patch.is_empty(), "case {i}: {patch}");
    }
    // Opset 10's Pad has no pads input; its ScatterND is not there either (opset 11).
    let bytes = ModelBuilder::new(10)
        .input("x", DType::F32, "2,3")
        .node("Neg", &["x"], &["y"])
        .output("y", DType::F32, "2,3")
        .bytes();
    let g = import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap();
    assert!(fold_scattered_slices(&g, "folded").is_empty());
}

/// Two scatters into one transposed table of zeros (the Llama fixture's rotary gradient): both
/// fold, and the shared Transpose and zeros go once both readers are gone; on the Llama
/// fixture all eight such pairs fold.
#[test]
fn scatters_sharing_their_zeros_fold_together() {
    let bytes = ModelBuilder::new(18)
        .input("a", DType::F32, "2,2,4")
        .input("b", DType::F32, "2,2,4")
        .init_i64("shape", &[3], &[2, 2, 8])
        .init_i64("lo", &[4, 1], &[0, 1, 2, 3])
        .init_i64("hi", &[4, 1], &[4, 5, 6, 7])
        .node("ConstantOfShape", &["shape"], &["zeros"])
        .node_with(
            "Transpose",
            &["zeros"],
            &["zt"],
            vec![attr_ints("perm", &[2, 1, 0])],
        )
        .node_with(
            "Transpose",
            &["a"],
            &["at"],
            vec![attr_ints("perm", &[2, 1, 0])],
        )
        .node_with(
            "Transpose",
            &["b"],
            &["bt"],
            vec![attr_ints("perm", &[2, 1, 0])],
        )
        .node("ScatterND", &["zt", "hi", "at"], &["sa"])
        .node("ScatterND", &["zt", "lo", "bt"], &["sb"])
        .node_with(
            "Transpose",
            &["sa"],
            &["ga"],
            vec![attr_ints("perm", &[2, 1, 0])],
        )
        .node_with(
            "Transpose",
            &["sb"],
            &["gb"],
            vec![attr_ints("perm", &[2, 1, 0])],
        )
        .node("Add", &["ga", "gb"], &["g"])
        .output("g", DType::F32, "2,2,8")
        .bytes();
    let mut g = typed(bytes);
    let patch = fold_scattered_slices(&g, "folded");
    assert_eq!(patch.substitutes.len(), 2, "{patch}");
    assert_eq!(patch.removals.len(), 6, "{patch}");
    let text = patch.to_string();
    assert!(text.contains("[0, 0, 4, 0, 0, 0]"), "{text}");
    assert!(text.contains("[0, 0, 0, 0, 0, 4]"), "{text}");
    patch.apply(&mut g).unwrap();
    assert_eq!(g.node_count(), 5);

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/llama_d0_makefx.onnx");
    let llama = ckpt_ir::import_file(&path).unwrap();
    let patch = fold_scattered_slices(&llama, "folded");
    assert_eq!(patch.substitutes.len(), 8, "{patch}");
    let mut folded = llama.clone();
    patch.apply(&mut folded).unwrap();
}
