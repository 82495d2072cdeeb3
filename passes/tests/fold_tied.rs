//! A shared weight's gradient summed from a table of zeros, folded
//! (`ckpt_passes::fold::fold_tied_gradients`): `Add(g, ScatterND(zeros, idx, u, add))`
//! becomes `ScatterND(g, idx, u, add)`, and nothing else does.

use ckpt_ir::build::{attr_s, ModelBuilder};
use ckpt_ir::{DType, Graph};
use ckpt_passes::fold::fold_tied_gradients;

mod fold_common;
use fold_common::{fill, node_of, typed};

/// What one case changes from a tied weight's gradient: `g: f32[4,3]` plus the rows `u`
/// scattered at `idx` into a `[4,3]` table of zeros.
#[derive(Clone)]
struct Case {
    fill: Option<f32>,
    reduction: Option<&'static str>,
    g_dims: &'static str,
    scatter_read_twice: bool,
    scatter_first: bool,
}

impl Default for Case {
    fn default() -> Case {
        Case {
            fill: None,
            reduction: Some("add"),
            g_dims: "4,3",
            scatter_read_twice: false,
            scatter_first: false,
        }
    }
}

fn graph(c: &Case) -> Graph {
    let scatter_attrs = c
        .reduction
        .map(|r| attr_s("reduction", r))
        .into_iter()
        .collect();
    let add_in: [&str; 2] = if c.scatter_first {
        ["s", "g"]
    } else {
        ["g", "s"]
    };
    let mut m = ModelBuilder::new(18)
        .input("g", DType::F32, c.g_dims)
        .input("u", DType::F32, "3,3")
        .init_i64("shape", &[2], &[4, 3])
        .init_i64("idx", &[3, 1], &[2, 0, 2])
        .node_with(
            "ConstantOfShape",
            &["shape"],
            &["zeros"],
            c.fill.map(fill).into_iter().collect(),
        )
        .node_with("ScatterND", &["zeros", "idx", "u"], &["s"], scatter_attrs)
        .node("Add", &add_in, &["sum"])
        .output("sum", DType::F32, "4,3");
    if c.scatter_read_twice {
        m = m.node("Neg", &["s"], &["n"]).output("n", DType::F32, "4,3");
    }
    typed(m.bytes())
}

/// The Add becomes `ScatterND(g, idx, u, reduction=add)` writing `sum`, with either addend
/// scattered, and the ScatterND and the zeros are removed, the later first.
#[test]
fn the_rows_are_scattered_into_the_other_gradient() {
    for (scatter_first, fill) in [(false, None), (true, Some(0.0))] {
        let mut g = graph(&Case {
            scatter_first,
            fill,
            ..Case::default()
        });
        let patch = fold_tied_gradients(&g, "tied");
        assert_eq!(patch.substitutes.len(), 1, "{patch}");
        let s = &patch.substitutes[0];
        assert_eq!(
            (s.node, s.op_type.as_str()),
            (node_of(&g, "sum"), "ScatterND")
        );
        assert_eq!(
            patch.removals,
            [node_of(&g, "s"), node_of(&g, "zeros")],
            "{patch}"
        );
        patch.apply(&mut g).unwrap();
        let n = g.node(node_of(&g, "sum"));
        assert_eq!(n.op_type, "ScatterND");
        assert_eq!(n.attr_s("reduction").as_deref(), Some("add"));
        let ins: Vec<&str> = n
            .inputs
            .iter()
            .map(|t| g.tensor(t.unwrap()).name.as_str())
            .collect();
        assert_eq!(ins, ["g", "idx", "u"]);
        assert_eq!(g.node_count(), 1);
    }
}

/// Left as it is: a fill that is not +0, a ScatterND that replaces instead of adding, one
/// read elsewhere too, and an Add that broadcasts.
#[test]
fn sums_it_cannot_fold_are_left() {
    let cases = [
        (
            "a fill of 1",
            Case {
                fill: Some(1.0),
                ..Case::default()
            },
        ),
        (
            "a fill of -0",
            Case {
                fill: Some(-0.0),
                ..Case::default()
            },
        ),
        (
            "no reduction",
            Case {
                reduction: None,
                ..Case::default()
            },
        ),
        (
            "reduction mul",
            Case {
                reduction: Some("mul"),
                ..Case::default()
            },
        ),
        (
            "read twice",
            Case {
                scatter_read_twice: true,
                ..Case::default()
            },
        ),
        (
            "a broadcast addend",
            Case {
                g_dims: "1,3",
                ..Case::default()
            },
        ),
    ];
    for (what, c) in cases {
        let g = graph(&c);
        let patch = fold_tied_gradients(&g, "tied");
        assert!(
            patch.substitutes.is_empty() && patch.removals.is_empty(),
            "{what}: {patch}"
        );
    }
}
