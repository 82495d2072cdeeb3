//! A trial's graph is the analysed graph patched, and ORT's view of its shapes is resolved
//! from the analysed graph's (`resolved_shapes_after`: only the nodes the patch added or
//! rewired, and what their types reach, are inferred again). On the fixtures, for recompute
//! sets drawn at random, that view and the simulation run on it are the ones resolving the
//! patched graph from scratch gives.

use std::path::PathBuf;

use ckpt_ir::{Dim, Message, Shape};
use ckpt_passes::memory::{schedule, simulate_resolved, simulate_threads};
use ckpt_passes::ort_view::{resolved_shapes, resolved_shapes_after, OrtShapes};
use ckpt_passes::recompute::{candidates, problem, rewrite};
use ckpt_planner::{analyse, plan_from_set, AnalyseOptions};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// Every tensor's resolved dtype and shape, each unknown dim written `?` (unknown dims are
/// named as they are made; they never equal anything, so only where they are matters).
fn normalised(g: &ckpt_ir::Graph, s: &OrtShapes) -> Vec<Option<(ckpt_ir::DType, Shape)>> {
    g.tensor_ids()
        .map(|t| {
            s.get(t).map(|(d, sh)| {
                let dims = sh
                    .dims()
                    .iter()
                    .map(|x| match x {
                        Dim::Sym(n) if n.starts_with('?') => Dim::Sym("?".into()),
                        other => other.clone(),
                    })
                    .collect();
                (d, Shape(dims))
            })
        })
        .collect()
}

/// `patch` applied to `a`'s graph, resolved from scratch (returned, normalised) after
/// checking that resolving it from `a`'s view gives the same.
fn resolves_as_from_scratch(
    a: &ckpt_planner::Analysis,
    patch: &ckpt_ir::Patch,
    what: &str,
) -> Vec<Option<(ckpt_ir::DType, Shape)>> {
    let mut g2 = a.graph.clone();
    patch.apply_unverified(&mut g2).unwrap();
    let scratch = normalised(&g2, &resolved_shapes(&g2));
    assert_eq!(
        normalised(&g2, &resolved_shapes_after(&g2, &a.graph, &a.ort)),
        scratch,
        "{what}"
    );
    scratch
}

#[test]
fn a_patched_graph_resolves_as_from_scratch() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut checked = 0;
    for name in [
        "gpt2_d0_aot",
        "hfgpt2_d01_makefx",
        "llama_d0_makefx",
        "t5_d0_makefx",
        "resnet18_d0_aot",
        "vit_d0_aot",
        "bert_d01_aot",
        "gpt2_d0_onnxad",
    ] {
        let g = ckpt_ir::import_file(&fixture(&format!("{name}.onnx"))).unwrap();
        let o = AnalyseOptions::default();
        let a = analyse(g, &o).unwrap();
        let cands = candidates(&a.graph, &a.sim, &a.types, &o.bindings);
        let prob = problem(&a.sim, &cands, 0);
        let n = cands.list.len();
        assert!(n > 0, "{name}: no candidates");
        for trial in 0..12 {
            // Sparse, dense and everything.
            let set: Vec<bool> = (0..n)
                .map(|_| match trial {
                    0 => true,
                    t if t % 2 == 0 => next() % 3 == 0,
                    _ => next() % 9 == 0,
                })
                .collect();
            let plan = plan_from_set(&prob, set);
            let patch = rewrite(&a.graph, &cands, &plan, "trial");
            let mut g2 = a.graph.clone();
            patch.apply_unverified(&mut g2).unwrap();
            let scratch = resolved_shapes(&g2);
            let after = resolved_shapes_after(&g2, &a.graph, &a.ort);
            assert_eq!(
                normalised(&g2, &after),
                normalised(&g2, &scratch),
                "{name}, trial {trial}"
            );
            let sched = schedule(&g2).unwrap();
            let full = simulate_threads(&g2, &sched, &o.bindings, 1).unwrap();
            let incremental = simulate_resolved(&g2, &sched, &o.bindings, 1, &after).unwrap();
            assert_eq!(
                full.buffer_of, incremental.buffer_of,
                "{name}, trial {trial}"
            );
            assert_eq!(full.live, incremental.live, "{name}, trial {trial}");
            assert_eq!(
                full.arena_events, incremental.arena_events,
                "{name}, trial {trial}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 96);
}

/// The reuse guards (Identity on each constant reshape target, the targets' value_info
/// forgotten) change what ORT resolves downstream of every guarded Reshape: resolved from the
/// unguarded graph's view, the guarded graph's is the one from scratch, and differs from the
/// unguarded one.
///
/// Each fixture as exported and with its value_info stripped (inputs and outputs declared
/// only): then nothing downstream of a guard is rescued by a declaration, and what the
/// guards make unknown spreads.
#[test]
fn a_guarded_graph_resolves_as_from_scratch() {
    let mut changed = 0;
    for name in [
        "gpt2_d0_aot",
        "llama_d0_makefx",
        "hfgpt2_d01_makefx",
        "bert_d01_aot",
    ] {
        for strip in [false, true] {
            let path = fixture(&format!("{name}.onnx"));
            let g = if strip {
                let mut m =
                    ckpt_ir::onnx::ModelProto::decode(&*std::fs::read(&path).unwrap()).unwrap();
                m.graph.as_mut().unwrap().value_info.clear();
                ckpt_ir::import_model(m, &path, None).unwrap()
            } else {
                ckpt_ir::import_file(&path).unwrap()
            };
            let a = analyse(g, &AnalyseOptions::default()).unwrap();
            let patch = ckpt_passes::guards::reuse_guards(&a.graph, "guards");
            let scratch = resolves_as_from_scratch(&a, &patch, name);
            let before = normalised(&a.graph, &a.ort);
            changed += before.iter().zip(&scratch).filter(|(b, s)| b != s).count();
        }
    }
    assert!(changed > 0, "the guards changed no resolved shape");
}

/// A patch that only forgets a tensor's value_info changes what ORT resolves for it where
/// the declaration said more than inference does: resolved from the graph before, the view
/// is the one from scratch. Tried on each computed tensor in
/// turn until three such tensors are found: the ORT training artifacts, whose dims are
/// symbols (`batch`, `seq`) and whose declarations name dims inference leaves unknown.
#[test]
fn a_forgotten_declaration_resolves_as_from_scratch() {
    let mut found = 0;
    'fixtures: for name in ["ort_gpt2_training", "ort_mlp_training"] {
        let g = ckpt_ir::import_file(&fixture(&format!("{name}.onnx"))).unwrap();
        let mut b = ckpt_ir::Bindings::new();
        b.insert("batch".to_string(), 2);
        b.insert("seq".to_string(), 32);
        let a = analyse(g, &AnalyseOptions::with_bindings(b)).unwrap();
        // Each tensor a node computes, forgotten in turn.
        let computed: Vec<_> = a
            .graph
            .nodes()
            .iter()
            .flat_map(|&n| a.graph.node(n).output_tensors().collect::<Vec<_>>())
            .collect();
        for t in computed {
            let mut patch = ckpt_ir::Patch::new("forget");
            patch.forget_value_info = vec![t];
            let what = format!("{name}: {} forgotten", a.graph.tensor(t).name);
            let scratch = resolves_as_from_scratch(&a, &patch, &what);
            if normalised(&a.graph, &a.ort) != scratch {
                found += 1;
                if found == 3 {
                    break 'fixtures;
                }
            }
        }
    }
    assert_eq!(
        found, 3,
        "no forgotten declaration changed a resolved shape"
    );
}
