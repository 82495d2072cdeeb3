//! The rewrite of a plan into a patch ([`rewrite`]) on hand-built graphs in the text form:
//! what the patch says, and what the rewritten graph does in the simulator.

use ckpt_ir::{parse_graph, print_patch, Graph, Patch};
use ckpt_passes::memory::{schedule, simulate, Simulation};
use ckpt_passes::recompute::{candidates, rewrite};

fn sim(g: &Graph) -> Simulation {
    simulate(g, &schedule(g).unwrap(), &Default::default()).unwrap()
}

/// Every candidate of `text` recomputed, as a patch.
fn recompute_all(text: &str) -> (Graph, Patch) {
    let g = parse_graph(text).unwrap();
    let s = sim(&g);
    let types = ckpt_ir::ops::infer(&g).unwrap();
    let cands = candidates(&g, &s, &types, &Default::default());
    let problem = ckpt_passes::recompute::problem(&s, &cands, u64::MAX);
    let mut plan = ckpt_solver::solve_none(&problem).unwrap();
    plan.recompute = vec![true; cands.list.len()];
    plan.remat_at = cands.list.iter().map(|c| Some(c.model.needed_at)).collect();
    let patch = rewrite(&g, &cands, &plan, "all");
    (g, patch)
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

/// A recompute clones the producer of the dropped value, rewires only the reader after the
/// gap, and the clone runs right before that reader (ORT expands the highest-index input
/// first): the clone `n_a.recompute` (n5) is placed before `n_b` in the file but runs at
/// step 4, just before `n_e`.
#[test]
fn a_recompute_clones_the_producer_and_rewires_the_late_reader() {
    let (g, patch) = recompute_all(SAVED);
    assert_eq!(
        print_patch(&patch, &g, g.nodes()),
        "patch \"all\"\n  tensor new0 \"a.recompute\" like %1\n  \
         node \"n_a.recompute\" = copy of n0(%0) -> new0 before n1\n  \
         rewire n4[1]: %1 -> new0\n"
    );
    let mut after = g.clone();
    patch.apply(&mut after).unwrap();
    let s = sim(&after);
    let names: Vec<&str> = s
        .schedule
        .order
        .iter()
        .map(|&n| after.node(n).name.as_str())
        .collect();
    assert_eq!(names, ["n_a", "n_b", "n_c", "n_d", "n_a.recompute", "n_e"]);
    let e = after.node(s.schedule.order[5]);
    assert_eq!(e.inputs[1], after.tensor_id("a.recompute"));
}

/// Dropping the saved value frees its buffer across the gap. Before: `a` (A) is held from
/// step 0 to step 4, so steps 2–4 hold three 256-byte buffers: live 256 | 512 | 768 | 768 |
/// 768. After: `a` dies at step 1, `c` takes A, `d` takes B, the clone takes A again, and
/// only the last step (two inputs and the output) holds three: 256 | 512 | 512 | 512 | 512
/// | 768. The peak stays 768 (the final Add needs its inputs and its output).
#[test]
fn a_recompute_frees_the_buffer_across_the_gap() {
    let (g, patch) = recompute_all(SAVED);
    assert_eq!(sim(&g).live, vec![256, 512, 768, 768, 768]);
    let mut after = g.clone();
    patch.apply(&mut after).unwrap();
    let s = sim(&after);
    assert_eq!(s.live, vec![256, 512, 512, 512, 512, 768]);
    assert_eq!(s.arena_peak(), 768);
}

/// A LayerNormalization whose output and mean are each read late, at different steps: each
/// rebuild step clones it, and each clone keeps only the optional outputs its own step reads
/// (an unread output would stay allocated to the end of the run).
const LN_TWO_LATE_READS: &str = r#"
input %0 "x": f32[16,64]
init %1 "g": f32[64] = [1.0]
init %2 "bb": f32[64] = [0.0]
%3 "y": f32[16,64], %4 "mean": f32[16,1], %5 "rstd": f32[16,1] = LayerNormalization(%0, %1, %2) {axis=-1}  # "n_ln"
%6 "a": f32[16,64] = Exp(%3)  # "n_a"
%7 "b": f32[16,64] = Exp(%6)  # "n_b"
%8 "m1": f32[16,64] = Mul(%7, %4)  # "n_m1"
%9 "c": f32[16,64] = Exp(%8)  # "n_c"
%10 "d": f32[16,64] = Exp(%9)  # "n_d"
%11 "e": f32[16,64] = Add(%10, %3)  # "n_e"
%12 "f": f32[16,64] = Exp(%11)  # "n_f"
%13 "h": f32[16,64] = Exp(%12)  # "n_h"
%14 "k": f32[16,64] = Mul(%13, %4)  # "n_k"
output %14 "k"
"#;

#[test]
fn clones_keep_only_the_optional_outputs_their_step_reads() {
    let (g, patch) = recompute_all(LN_TWO_LATE_READS);
    let ln_clones: Vec<&ckpt_ir::NewNode> = patch
        .nodes
        .iter()
        .filter(|n| g.node(n.copy_of).op_type == "LayerNormalization")
        .collect();
    assert!(
        ln_clones.len() >= 2,
        "two rebuild steps each clone the LayerNormalization: {}",
        print_patch(&patch, &g, g.nodes())
    );
    let mut after = g.clone();
    patch.apply(&mut after).unwrap();
    for &n in after.nodes() {
        let node = after.node(n);
        if !node.name.ends_with(".recompute") && !node.name.contains(".recompute") {
            continue;
        }
        for t in node.output_tensors().skip(1) {
            assert!(
                !after.tensor(t).consumers().is_empty(),
                "clone {} keeps its unread output {}:\n{}",
                node.name,
                after.tensor(t).name,
                print_patch(&patch, &g, g.nodes())
            );
        }
    }
    // Every new tensor is some node's output (the omitted ones are gone from the patch).
    let produced = patch
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().flatten())
        .count();
    assert_eq!(produced, patch.tensors.len());
}
