//! CI's slice of the fuzzer (`ckpt_fuzz`, `docs/fuzzing.md`): 2000 seeded executions
//! over every fixture and example through import → analyse → candidates, no panics; 150 at
//! depth `write` (the main job's output checked against ONNX's rules), no finding; and every
//! minimized finding the fuzzer ever found, kept in `tests/fuzz_regressions/`, comes out as
//! `Ok` or an error through the whole main job and its written output.

mod common;

use std::time::Duration;

use ckpt_fuzz::campaign::{corpus, fuzz, FuzzOptions};
use ckpt_fuzz::exec::{finding, Depth};
use ckpt_ir::build::ModelBuilder;
use ckpt_ir::DType;
use common::root;

/// The crashes the fuzzer found, minimized by hand to the node that broke, by file name.
/// `FUZZ_REGRESSIONS_BLESS=1` rewrites the files.
fn minimized_crashes() -> Vec<(&'static str, Vec<u8>)> {
    // Seed 1 of the first 1M campaign, within seconds: a dim mutated to 2^40 under a Slice with constant bounds; inference
    // listed every selected index (8 TiB) and the process aborted on the allocation.
    let huge = ModelBuilder::new(17)
        .input("x", DType::F32, "1099511627776")
        .init_i64("starts", &[1], &[0])
        .init_i64("ends", &[1], &[i64::MAX])
        .init_i64("axes", &[1], &[0])
        .node("Slice", &["x", "starts", "ends", "axes"], &["y"])
        .output("y", DType::F32, "1099511627776")
        .bytes();
    // The same arithmetic on an empty axis with a negative step clamped to [0, -1] (a panic).
    let empty_backward = ModelBuilder::new(17)
        .input("x", DType::F32, "0")
        .init_i64("starts", &[1], &[-1])
        .init_i64("ends", &[1], &[-10])
        .init_i64("axes", &[1], &[0])
        .init_i64("steps", &[1], &[-1])
        .node("Slice", &["x", "starts", "ends", "axes", "steps"], &["y"])
        .output("y", DType::F32, "0")
        .bytes();
    // Seed 1 of the second 1M campaign, after about 4 minutes: a Reshape whose shape input (not
    // computable) has 2^40 elements; inference made a fresh dim for each (a 32 TiB allocation).
    let huge_rank = ModelBuilder::new(17)
        .input("x", DType::F32, "4")
        .input("shape", DType::I64, "1099511627776")
        .node("Reshape", &["x", "shape"], &["y"])
        .output("y", DType::F32, "4")
        .bytes();
    vec![
        ("reshape_to_a_rank_of_2pow40.onnx", huge_rank),
        ("slice_of_a_2pow40_axis.onnx", huge),
        ("slice_backward_over_an_empty_axis.onnx", empty_backward),
    ]
}

#[test]
fn minimized_crashes_are_committed_and_infer() {
    let dir = root().join("tests/fuzz_regressions");
    for (name, bytes) in minimized_crashes() {
        let path = dir.join(name);
        if std::env::var_os("FUZZ_REGRESSIONS_BLESS").is_some() {
            std::fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{name}: bless with FUZZ_REGRESSIONS_BLESS=1"
        );
        let g = ckpt_ir::import_bytes(bytes.into(), &path, None).unwrap();
        match ckpt_ir::ops::infer(&g) {
            Ok(types) => {
                let y = g.tensor_ids().find(|&t| g.tensor(t).name == "y").unwrap();
                assert_eq!(types.shape(y), g.tensor(y).shape.as_ref(), "{name}");
            }
            Err(e) => assert!(
                name.starts_with("reshape") && e.to_string().contains("rank above 64"),
                "{name}: {e}"
            ),
        }
    }
}

/// Inputs the fuzzer found that the import accepted and whose written output broke ONNX's
/// rules, minimized by hand, by file name, with what the import's refusal names.
/// `FUZZ_REGRESSIONS_BLESS=1` rewrites the files.
fn refused_inputs() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    // Seed 1 of the first `export` campaign, within seconds: a flipped byte dropped an
    // attribute's type; the output kept it, and ONNX's checker and ORT refuse an untyped one.
    let mut untyped = ckpt_ir::build::attr_ints("perm", &[1, 0]);
    untyped.r#type = None;
    let untyped = ModelBuilder::new(17)
        .input("x", DType::F32, "2,3")
        .node_with("Transpose", &["x"], &["y"], vec![untyped])
        .output("y", DType::F32, "3,2")
        .bytes();
    // The same campaign: a value_info's element type set to 0 (UNDEFINED); the output kept
    // it, and ORT refuses to load it ("Invalid tensor data type 0").
    let mut undefined = ModelBuilder::new(17)
        .input("x", DType::F32, "2")
        .node("Neg", &["x"], &["h"])
        .node("Neg", &["h"], &["y"])
        .value_info("h", DType::F32, "2")
        .output("y", DType::F32, "2")
        .build();
    if let Some(ckpt_ir::onnx::type_proto::Value::TensorType(t)) = undefined
        .graph
        .as_mut()
        .and_then(|g| g.value_info[0].r#type.as_mut())
        .and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(0);
    }
    vec![
        ("attribute_without_a_type.onnx", untyped, "`perm`"),
        (
            "value_info_of_element_type_0.onnx",
            ckpt_ir::Message::encode_to_vec(&undefined),
            "`h`",
        ),
    ]
}

#[test]
fn inputs_whose_output_broke_a_rule_are_refused_at_import() {
    let dir = root().join("tests/fuzz_regressions");
    for (name, bytes, names) in refused_inputs() {
        let path = dir.join(name);
        if std::env::var_os("FUZZ_REGRESSIONS_BLESS").is_some() {
            std::fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{name}: bless with FUZZ_REGRESSIONS_BLESS=1"
        );
        let e = ckpt_ir::import_bytes(bytes.into(), &path, None).unwrap_err();
        assert!(e.to_string().contains(names), "{name}: {e}");
    }
}

/// The fuzzer's 100,000-link chain of `Neg` nodes spliced in front of the first `Relu` of a
/// training graph: the candidates' movable set peeled one node per pass over the chain (10^10
/// steps, a hang the campaign's watchdog caught); now it takes seconds.
#[test]
fn a_100000_link_chain_gets_its_candidates_in_seconds() {
    use ckpt_ir::Message;
    let bytes = std::fs::read(root().join("tests/fixtures/mlp_d0_aot.onnx")).unwrap();
    let mut m = ckpt_ir::onnx::ModelProto::decode(bytes.as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    let k = g
        .node
        .iter()
        .position(|n| n.op_type.as_deref() == Some("Relu"))
        .unwrap();
    ckpt_ir::build::splice_neg_chain(g, k, 0, 100_000, "fuzz_chain_");
    let t = std::time::Instant::now();
    let reached = ckpt_fuzz::exec::exercise(&m.encode_to_vec(), Depth::Export, Duration::ZERO);
    assert_eq!(reached, ckpt_fuzz::exec::Reached::Through);
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

/// A seeded slice at depth `write`: the main job's output exported, checked against ONNX's
/// rules and imported again, from a sandbox whose input files must not change.
#[test]
fn a_seeded_slice_at_depth_write_finds_nothing() {
    let seeds = corpus(&[&root().join("tests/fixtures"), &root().join("examples")]).unwrap();
    let opts = FuzzOptions {
        seed: 20261206,
        execs: 150,
        depth: Depth::Write,
        ..FuzzOptions::default()
    };
    let r = fuzz(&seeds, &opts).unwrap();
    eprintln!(
        "{} execs in {:.1} s: {} through, {} outputs written and checked",
        r.execs,
        r.elapsed.as_secs_f64(),
        r.through,
        r.outputs
    );
    assert!(r.outputs > 0, "no output was written");
    let found: Vec<_> = r
        .crashes
        .iter()
        .map(|c| format!("exec {}: {}", c.exec, c.message))
        .collect();
    assert!(found.is_empty(), "findings: {found:?}");
}

#[test]
fn a_seeded_slice_of_the_fuzzer_finds_no_panic() {
    let seeds = corpus(&[&root().join("tests/fixtures"), &root().join("examples")]).unwrap();
    assert!(seeds.len() >= 16, "{} seed models", seeds.len());
    let opts = FuzzOptions {
        seed: 20261129,
        execs: 2000,
        depth: Depth::Candidates,
        ..FuzzOptions::default()
    };
    let r = fuzz(&seeds, &opts).unwrap();
    eprintln!(
        "{} execs in {:.1} s: {} refused at import, {} at analysis, {} through",
        r.execs,
        r.elapsed.as_secs_f64(),
        r.refused_at_import,
        r.refused_at_analysis,
        r.through
    );
    assert_eq!(r.execs, 2000);
    // The slice reaches every stage: the mutations are not all rejected at the door.
    assert!(r.through > 100, "only {} inputs got through", r.through);
    assert!(r.refused_at_import > 0 && r.refused_at_analysis > 0);
    let found: Vec<_> = r
        .crashes
        .iter()
        .map(|c| format!("exec {}: {}", c.exec, c.message))
        .collect();
    assert!(found.is_empty(), "panics: {found:?}");
}

#[test]
fn fuzz_regressions_give_no_finding() {
    let dir = root().join("tests/fuzz_regressions");
    let cases = corpus(&[&dir]).unwrap();
    for (name, bytes) in &cases {
        let p = finding(bytes, Depth::Write, Duration::from_secs(2));
        assert!(p.is_none(), "{name}: {p:?}");
    }
}

/// The output-path mutations (`ckpt_fuzz::paths`): 500 seeded sets of `-o`, its data
/// file and the receipts, drawn from names that collide with each other, the input and its
/// data file; every set the target check accepts writes distinct files none of which the run
/// reads, and the check writes nothing.
#[test]
fn output_path_mutations_never_clobber() {
    let tmp = tempfile::tempdir().unwrap();
    let findings = ckpt_fuzz::paths::fuzz_output_paths(tmp.path(), 20261205, 500).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
}
