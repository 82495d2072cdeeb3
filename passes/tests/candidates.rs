//! Recompute candidates ([`candidates`]) on hand-built graphs in the text form. Exp costs
//! one FLOP per element: 64 for an `f32[64]`.

use ckpt_ir::{parse_graph, Graph};
use ckpt_passes::memory::{schedule, simulate, Simulation};
use ckpt_passes::recompute::{candidates, Candidates};

fn cands(text: &str) -> (Graph, Simulation, Candidates) {
    let g = parse_graph(text).unwrap();
    let s = simulate(&g, &schedule(&g).unwrap(), &Default::default()).unwrap();
    let types = ckpt_ir::ops::infer(&g).unwrap();
    let c = candidates(&g, &s, &types, &Default::default());
    (g, s, c)
}

const SAVED: &str = r#"
input %0 "x": f32[64]
%1 "a": f32[64] = Exp(%0)  # "n_a"
%2 "b": f32[64] = Exp(%1)  # "n_b"
%3 "c": f32[64] = Exp(%2)  # "n_c"
%4 "d": f32[64] = Exp(%3)  # "n_d"
%5 "e": f32[64] = Add(%4, %1)  # "n_e"
output %5 "e"
"#;

const CHAIN: &str = r#"
input %0 "x": f32[64]
%1 "a": f32[64] = Exp(%0)  # "n_a"
%2 "b": f32[64] = Exp(%1)  # "n_b"
%3 "c": f32[64] = Exp(%2)  # "n_c"
%4 "d": f32[64] = Exp(%3)  # "n_d"
%5 "e": f32[64] = Add(%4, %2)  # "n_e"
output %5 "e"
"#;

const RANDOM: &str = r#"
input %0 "x": f32[64]
%1 "a": f32[64] = RandomUniformLike(%0)  # "n_a"
%2 "b": f32[64] = Exp(%1)  # "n_b"
%3 "c": f32[64] = Exp(%2)  # "n_c"
%4 "d": f32[64] = Exp(%3)  # "n_d"
%5 "e": f32[64] = Add(%4, %1)  # "n_e"
output %5 "e"
"#;

/// A value idle across a gap is a candidate: `a` is read at step 1 and again at step 4, so
/// its buffer (256 bytes) is free from step 2 and needed at step 4; rebuilding it re-runs its
/// producer (64 FLOPs) reading the graph input, and rewires the late reader's slot 1.
#[test]
fn a_value_idle_across_a_gap_is_a_candidate() {
    let (g, s, c) = cands(SAVED);
    assert!(c.excluded.is_empty());
    assert_eq!(c.list.len(), 1);
    let k = &c.list[0];
    let a = g.tensor_id("a").unwrap();
    assert_eq!(Some(k.buffer), s.buffer_of[a.index()]);
    assert_eq!((k.saved.clone(), k.values.clone()), (vec![a], vec![a]));
    assert_eq!(k.nodes, vec![g.nodes()[0]]);
    assert!(k.moved.is_empty());
    assert_eq!(k.rewire, vec![(g.nodes()[4], 1, a)]);
    assert_eq!(
        (
            k.model.bytes,
            k.model.cost,
            k.model.free_from,
            k.model.needed_at
        ),
        (256, 64, 2, 4)
    );
    assert_eq!((k.model.deps.len(), k.model.transient), (0, 0));
}

/// Rebuilding goes through values freed during forward: `b` is read late, its input `a` died
/// at step 1 (its buffer went to `c`), so the chain re-runs both producers (128 FLOPs) and
/// `a`'s 256 bytes are transient while recomputing.
#[test]
fn a_chain_rebuilds_through_values_freed_in_forward() {
    let (g, _, c) = cands(CHAIN);
    assert_eq!(c.list.len(), 1);
    let k = &c.list[0];
    let (a, b) = (g.tensor_id("a").unwrap(), g.tensor_id("b").unwrap());
    assert_eq!((k.saved.clone(), k.values.clone()), (vec![b], vec![a, b]));
    assert_eq!(k.nodes, vec![g.nodes()[0], g.nodes()[1]]);
    assert_eq!(
        (
            k.model.bytes,
            k.model.cost,
            k.model.free_from,
            k.model.needed_at
        ),
        (256, 128, 3, 4)
    );
    assert_eq!(k.model.transient, 256);
}

/// A random op's output is never a candidate: it is excluded, naming the op and why.
#[test]
fn a_random_output_is_excluded_with_the_reason() {
    let (g, _, c) = cands(RANDOM);
    assert!(c.list.is_empty());
    assert_eq!(c.excluded.len(), 1);
    let e = &c.excluded[0];
    assert_eq!(e.tensor, g.tensor_id("a").unwrap());
    assert_eq!(e.op, "RandomUniformLike");
    assert_eq!(e.reason, "draws random numbers: a recompute would differ");
}
