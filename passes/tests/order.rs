//! ORT's default order as [`schedule`] computes it from a graph, on hand-built graphs in the
//! text form: which nodes are steps and in what order they run.

use ckpt_ir::{parse_graph, Graph};
use ckpt_passes::memory::schedule;

/// The output names of the scheduled nodes, in order.
fn order(text: &str) -> (Graph, Vec<String>) {
    let g = parse_graph(text).unwrap();
    let s = schedule(&g).unwrap();
    let names = s.order.iter().map(|&n| g.node(n).name.clone()).collect();
    (g, names)
}

/// Independent leaves run highest index first: `p` (n0) and `q` (n1) read only the input,
/// so ORT's reverse DFS expands the higher-index leaf `q` first and it runs first.
#[test]
fn independent_leaves_run_highest_index_first() {
    let (_, names) = order(
        r#"
input %0 "x": f32[4]
%1 "p": f32[4] = Exp(%0)  # "p"
%2 "q": f32[4] = Exp(%0)  # "q"
output %1 "p"
output %2 "q"
"#,
    );
    assert_eq!(names, ["q", "p"]);
}

/// Inputs of a node are expanded highest index first, and a chain finishes before its
/// sibling: `s = Add(a2, b1)` reads `a2` (n1) and `b1` (n2); the `b` branch (higher index)
/// runs first, then the `a` chain, then `s`.
#[test]
fn the_highest_index_input_runs_first() {
    let (_, names) = order(
        r#"
input %0 "x": f32[4]
%1 "a1": f32[4] = Exp(%0)  # "a1"
%2 "a2": f32[4] = Exp(%1)  # "a2"
%3 "b1": f32[4] = Exp(%0)  # "b1"
%4 "s": f32[4] = Add(%2, %3)  # "s"
output %4 "s"
"#,
    );
    assert_eq!(names, ["b1", "a1", "a2", "s"]);
}

/// Constant nodes are not steps: ORT folds them into initializers, so the schedule has only
/// the Add, and the Constant has no step.
#[test]
fn constant_nodes_are_not_steps() {
    let text = r#"
input %0 "x": f32[2]
%1 "k": f32[2] = Constant() {value=f32[2] [1.0, 2.0]}  # "k"
%2 "y": f32[2] = Add(%0, %1)  # "y"
output %2 "y"
"#;
    let g = parse_graph(text).unwrap();
    let s = schedule(&g).unwrap();
    assert_eq!(s.order, vec![g.nodes()[1]]);
    assert_eq!(s.step_of(g.nodes()[0]), None);
    assert_eq!(s.step_of(g.nodes()[1]), Some(0));
}

/// A dead node (read by nobody, not an output) is a leaf and still runs; leaves are expanded
/// highest index first, so the dead `d` (n2), after what it reads, runs before the output
/// `o` (n1): order a, d, o.
#[test]
fn a_dead_node_still_runs() {
    let (_, names) = order(
        r#"
input %0 "x": f32[4]
%1 "a": f32[4] = Exp(%0)  # "a"
%2 "o": f32[4] = Exp(%1)  # "o"
%3 "d": f32[4] = Exp(%1)  # "d"
output %2 "o"
"#,
    );
    assert_eq!(names, ["a", "d", "o"]);
}
