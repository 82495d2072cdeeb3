//! ONNX Runtime's float16 fallback on its CPU provider, derived by the simulator
//! (`ckpt_passes::ort_casts`), against the graph ORT itself saves at level disable (after it
//! inserted its Casts): the same nodes, wired the same, in the same execution order.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// (name, op, inputs, outputs) of each node, in order.
type Listing = Vec<(String, String, Vec<String>, Vec<String>)>;

/// `nodes` of `g` as a listing.
fn listing(g: &ckpt_ir::Graph, nodes: &[ckpt_ir::NodeId]) -> Listing {
    let names = |l: &[Option<ckpt_ir::TensorId>]| {
        l.iter()
            .map(|t| t.map_or(String::new(), |t| g.tensor(t).name.clone()))
            .collect()
    };
    nodes
        .iter()
        .map(|&n| {
            let node = g.node(n);
            (
                node.name.clone(),
                node.op_type.clone(),
                names(&node.inputs),
                names(&node.outputs),
            )
        })
        .collect()
}

/// The graph ORT saved, in its file order (the order ORT ran it in).
fn ort_saved(path: &Path) -> Listing {
    let g = ckpt_ir::import_file(path).expect("import ORT's graph");
    listing(&g, g.nodes())
}

fn in_ort_order(g: &ckpt_ir::Graph) -> Listing {
    let s = ckpt_passes::memory::schedule_for(g, ckpt_ir::ort::ORT_VERSION).unwrap();
    listing(g, &s.order)
}

#[test]
fn the_derived_graph_is_the_graph_ort_runs() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(python())
        .arg(root().join("scripts/fixtures/fp16_cases.py"))
        .arg(dir.path())
        .output()
        .expect("run fp16_cases.py");
    assert!(o.status.success(), "{}", stderr(&o));
    for case in ["chain", "autocast", "shared"] {
        let g = ckpt_ir::import_file(&dir.path().join(format!("{case}.onnx"))).unwrap();
        let lowered = ckpt_passes::ort_casts::lower(&g, ckpt_ir::ort::ORT_VERSION)
            .unwrap()
            .unwrap_or_else(|| panic!("{case}: ORT changes this graph"));
        let theirs = ort_saved(&dir.path().join(format!("{case}.ort.onnx")));
        // The same nodes, wired the same…
        let mut ours = in_ort_order(&lowered.graph);
        let mut same = theirs.clone();
        ours.sort();
        same.sort();
        assert_eq!(ours, same, "{case}");
        // …in the order ORT runs the original…
        let names: Vec<String> = theirs.iter().map(|n| n.0.clone()).collect();
        assert_eq!(lowered.ort_order, names, "{case}");
        // …and written in that order.
        let file: Vec<String> = lowered
            .graph
            .nodes()
            .iter()
            .map(|&n| lowered.graph.node(n).name.clone())
            .collect();
        assert_eq!(file, names, "{case}");
    }
}
