//! Moves: a recompute whose original would be left without readers runs once, later
//! (ORT keeps an unread output allocated to the end of the run, so a clone beside an
//! orphaned original would save nothing). And what ORT's allocator holds empty.

mod common;

use ckpt_ir::{import_file, Bindings};
use ckpt_opt::pipeline::analyse;
use ckpt_passes::memory::{schedule, simulate};
use ckpt_passes::recompute::{candidates, problem, rewrite};
use common::*;

fn plan_of(prob: &ckpt_solver::Problem, set: Vec<bool>) -> ckpt_solver::Plan {
    ckpt_solver::Plan::for_set(prob, set, ckpt_solver::Method::Greedy)
}

#[test]
fn nodes_read_only_after_the_gap_are_moved_not_cloned() {
    let b = Bindings::new();
    let mut fixtures_with_moves = 0;
    for f in std_fixtures() {
        let a = analyse(
            import_file(&f.path).unwrap(),
            &ckpt_planner::AnalyseOptions::with_bindings(b.clone()),
        )
        .unwrap();
        let cands = candidates(&a.graph, &a.sim, &a.types, &b);
        let prob = problem(&a.sim, &cands, 0);
        for (i, c) in cands.list.iter().enumerate() {
            // The invariant: every reader of a moved node's outputs is a rewired reader after
            // the gap or another moved node; no moved output is a graph output.
            for &m in &c.moved {
                assert!(
                    c.nodes.contains(&m),
                    "{}: moved node outside the chain",
                    f.name
                );
                for t in a.graph.node(m).output_tensors() {
                    let tensor = a.graph.tensor(t);
                    assert!(!tensor.is_output, "{}: moved a graph output", f.name);
                    for &r in tensor.consumers() {
                        assert!(
                            c.moved.contains(&r)
                                || c.rewire.iter().any(|&(n, _, v)| n == r && v == t),
                            "{}: candidate {i} moves {} but {} reads it in the gap",
                            f.name,
                            a.graph.node(m).name,
                            a.graph.node(r).name
                        );
                    }
                }
            }
            if c.moved.is_empty() {
                continue;
            }
            // Recomputing this candidate alone: its moved nodes are moves, never clones, and
            // the rewritten graph leaves no value of theirs unread.
            let mut set = vec![false; cands.list.len()];
            set[i] = true;
            let patch = rewrite(&a.graph, &cands, &plan_of(&prob, set), "t");
            for &m in &c.moved {
                assert!(
                    patch.moves.iter().any(|mv| mv.node == m),
                    "{}: {} not moved",
                    f.name,
                    a.graph.node(m).name
                );
                assert!(
                    patch.nodes.iter().all(|n| n.copy_of != m),
                    "{}: {} cloned",
                    f.name,
                    a.graph.node(m).name
                );
            }
            if c.moved.len() == c.nodes.len() {
                assert_eq!(c.model.cost, 1, "a pure move adds (nearly) nothing");
            }
            let mut g2 = a.graph.clone();
            patch.apply(&mut g2).unwrap();
            for &m in &c.moved {
                // An output nobody read before the rewrite (MaxPool's unused Y beside its
                // indices) stays unread; every other output keeps a reader.
                let read_before: Vec<bool> = a
                    .graph
                    .node(m)
                    .output_tensors()
                    .map(|t| !a.graph.tensor(t).consumers().is_empty())
                    .collect();
                for (t, was_read) in g2.node(m).output_tensors().zip(read_before) {
                    assert!(
                        !was_read || !g2.tensor(t).consumers().is_empty(),
                        "{}: orphaned {}",
                        f.name,
                        g2.tensor(t).name
                    );
                }
            }
            simulate(&g2, &schedule(&g2).unwrap(), &b).unwrap();
            fixtures_with_moves += 1;
        }
    }
    assert!(
        fixtures_with_moves > 0,
        "some std fixture has a movable candidate (transposed weights read in backward)"
    );
}

#[test]
fn idle_buffers_hold_no_value_in_use() {
    let b = Bindings::new();
    let path = root().join("examples/gpt2_4l_train.onnx");
    let a = analyse(
        import_file(&path).unwrap(),
        &ckpt_planner::AnalyseOptions::with_bindings(b.clone()),
    )
    .unwrap();
    let sim = &a.sim;
    let idle = sim.idle_at(&a.graph, sim.peak_step);
    let idle_bytes: u64 = idle.iter().map(|x| x.1).sum();
    assert!(
        !idle.is_empty() && idle_bytes < sim.peak_live,
        "{idle_bytes} idle of {}",
        sim.peak_live
    );
    let step_of = |n| sim.schedule.step_of(n);
    for &(bi, bytes) in &idle {
        let buf = &sim.buffers[bi];
        assert_eq!(bytes, ckpt_passes::memory::rounded(buf.bytes));
        assert!(
            buf.alloc_step <= sim.peak_step && buf.free_after.is_none_or(|f| f >= sim.peak_step)
        );
        for &v in &buf.values {
            let t = a.graph.tensor(v);
            let made = t.producer().and_then(step_of).unwrap();
            let last = t
                .consumers()
                .iter()
                .filter_map(|&c| step_of(c))
                .max()
                .unwrap_or(made);
            assert!(
                made > sim.peak_step || last < sim.peak_step,
                "{} is in use at the peak",
                t.name
            );
        }
    }
    // Largest first.
    assert!(idle.windows(2).all(|w| w[0].1 >= w[1].1));
}
