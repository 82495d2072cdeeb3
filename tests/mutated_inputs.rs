//! Never panic on user input: mutated model files (bytes flipped, cut, inserted; or decoded and
//! broken structurally: wrong inputs, ops, dims, dtypes, attributes, missing initializers and
//! outputs) go through import, the whole analysis, candidates, a greedy plan and the main job,
//! and come out as `Ok` or a typed error, never a panic. The mutations are
//! `ckpt_fuzz::mutate`'s, shared with the fuzzer (`fuzz/`, `docs/fuzzing.md`);
//! `MUTATION_CASES=20000 MUTATION_SEED=N` explores further.

mod common;

use std::time::Duration;

use ckpt_fuzz::exec::{exercise, Depth, Reached};
use ckpt_fuzz::mutate::{mutate_bytes, mutate_structure, Rng};
use common::*;

/// Run `cases` mutations (`mutate(case, rng)` makes the bytes of one) through the whole main
/// job; inputs that panic or get a wrong `Ok` answer are written to the temp dir and named.
fn never_panics(what: &str, default_seed: u64, mut mutate: impl FnMut(usize, &mut Rng) -> Vec<u8>) {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let cases = env("MUTATION_CASES").unwrap_or(300) as usize;
    let mut rng = Rng::new(env("MUTATION_SEED").unwrap_or(default_seed));
    let mut panics = Vec::new();
    let mut reached = [0usize; 3];
    for case in 0..cases {
        let bytes = mutate(case, &mut rng);
        match std::panic::catch_unwind(|| exercise(&bytes, Depth::Plan, Duration::from_secs(2))) {
            Ok(Reached::RefusedAtImport) => reached[0] += 1,
            Ok(Reached::RefusedAtAnalysis) => reached[1] += 1,
            Ok(Reached::Through) => reached[2] += 1,
            Ok(Reached::WrongAnswer(m) | Reached::RuleBroken(m) | Reached::InputChanged(m)) => {
                let path = std::env::temp_dir().join(format!("ckpt_opt_{what}_{case}.onnx"));
                std::fs::write(&path, &bytes).unwrap();
                panics.push(format!("{} (wrong answer: {m})", path.display()));
            }
            Err(_) => {
                let path = std::env::temp_dir().join(format!("ckpt_opt_{what}_{case}.onnx"));
                std::fs::write(&path, &bytes).unwrap();
                panics.push(path.display().to_string());
            }
        }
    }
    eprintln!(
        "{what}: {} refused at import, {} at analysis, {} analysed",
        reached[0], reached[1], reached[2]
    );
    assert!(
        panics.is_empty(),
        "{what}: panicked on {} of {cases}: {panics:?}",
        panics.len()
    );
}

#[test]
fn structurally_mutated_models_never_panic() {
    use ckpt_ir::Message;
    let originals = [
        "tests/fixtures/mlp_d01_aot.onnx",
        "tests/fixtures/hfgpt2_d0_makefx.onnx",
        "tests/fixtures/ort_mlp_training.onnx",
    ]
    .map(|p| {
        ckpt_ir::onnx::ModelProto::decode(std::fs::read(root().join(p)).unwrap().as_slice())
            .unwrap()
    });
    never_panics("structural", 0x9e37_79b9_7f4a_7c15, |case, rng| {
        let mut m = originals[case % originals.len()].clone();
        for _ in 0..1 + rng.below(3) {
            mutate_structure(&mut m, rng);
        }
        m.encode_to_vec()
    });
}

#[test]
fn mutated_models_never_panic() {
    let originals = [
        "tests/fixtures/mlp_d01_aot.onnx",
        "tests/fixtures/hfgpt2_d0_makefx.onnx",
    ]
    .map(|p| std::fs::read(root().join(p)).unwrap());
    never_panics("bytes", 0x2545_f491_4f6c_dd1d, |case, rng| {
        let mut bytes = originals[case % originals.len()].clone();
        mutate_bytes(&mut bytes, rng);
        bytes
    });
}

/// The two panics the mutations found, kept as cases: a binary op with one operand, and a
/// Split whose `num_outputs` does not match its outputs (it allocated 2^40 sizes). Each is an
/// error, of the import or of inference.
#[test]
fn found_by_mutation_are_errors() {
    use ckpt_ir::build::{attr_i, ModelBuilder};
    use ckpt_ir::DType;
    let one_operand = ModelBuilder::new(17)
        .input("x", DType::F32, "4")
        .node("Add", &["x"], &["y"])
        .output("y", DType::F32, "4")
        .bytes();
    let split = ModelBuilder::new(18)
        .input("x", DType::F32, "4,6")
        .node_with(
            "Split",
            &["x"],
            &["a", "b"],
            vec![attr_i("axis", 1), attr_i("num_outputs", 1 << 40)],
        )
        .output("a", DType::F32, "4,3")
        .output("b", DType::F32, "4,3")
        .bytes();
    for (what, bytes) in [
        ("Add with one operand", one_operand),
        ("Split num_outputs 2^40", split),
    ] {
        // The import refuses what breaks the op's schema (the one operand); inference what
        // the schema allows but the values do not (2^40 outputs).
        let e = match ckpt_ir::import_bytes(bytes.into(), std::path::Path::new("m.onnx"), None) {
            Err(e) => e.to_string(),
            Ok(g) => ckpt_ir::ops::infer(&g).expect_err(what).to_string(),
        };
        assert!(!e.is_empty(), "{what}");
    }
}
