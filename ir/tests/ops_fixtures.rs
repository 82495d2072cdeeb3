//! Shape inference on every fixture, from a copy of the model with its value_info
//! removed, checked against the exporter's value_info (and graph output types).
//!
//! A dim the exporter could not name (`unk__12`, or an unnamed dim imported as `?N`) where
//! we infer something else counts as "unknown in the file"; any other difference fails.

use std::path::{Path, PathBuf};

use ckpt_ir::ops::{infer, policy, Policy};
use ckpt_ir::{import_model, onnx, Dim, Graph, Message, TensorSource};

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpt2_4l_train.onnx");
    if example.exists() {
        v.push(example);
    }
    v.sort();
    v
}

fn load(path: &Path, strip: bool) -> Graph {
    let bytes = std::fs::read(path).expect("fixture readable");
    let mut model = onnx::ModelProto::decode(bytes.as_slice()).expect("fixture decodes");
    if strip {
        if let Some(g) = model.graph.as_mut() {
            g.value_info.clear();
        }
    }
    import_model(model, path, path.parent()).expect("fixture imports")
}

fn unknown_in_file(d: &Dim) -> bool {
    matches!(d, Dim::Sym(s) if s.starts_with("unk__") || s.starts_with('?'))
}

#[derive(Default, Debug)]
struct Tally {
    matched: usize,
    unknown: usize,
    mismatched: Vec<String>,
    /// Node outputs the file gives no type for: inferred only.
    inferred_only: usize,
}

fn compare(full: &Graph, bare: &Graph) -> Tally {
    let types = infer(bare).unwrap_or_else(|e| panic!("inference failed: {e}"));
    let mut t = Tally::default();
    for id in full.tensor_ids() {
        let file = full.tensor(id);
        if !matches!(file.source, TensorSource::Node(_)) {
            continue;
        }
        let (Some(fd), Some(fs)) = (file.dtype, file.shape.as_ref()) else {
            t.inferred_only += 1;
            continue;
        };
        let bid = bare.tensor_id(&file.name).expect("same tensors");
        let Some(got) = types.get(bid) else {
            t.mismatched.push(format!("{}: not inferred", file.name));
            continue;
        };
        if got.dtype != fd || got.shape.rank() != fs.rank() {
            t.mismatched.push(format!(
                "{}: file {fd}{fs}, inferred {}{}",
                file.name, got.dtype, got.shape
            ));
            continue;
        }
        let mut unknown = false;
        let mut bad = false;
        for (a, b) in fs.dims().iter().zip(got.shape.dims()) {
            if a == b {
                continue;
            }
            if unknown_in_file(a) {
                unknown = true;
            } else {
                bad = true;
            }
        }
        if bad {
            t.mismatched
                .push(format!("{}: file {fs}, inferred {}", file.name, got.shape));
        } else if unknown {
            t.unknown += 1;
        } else {
            t.matched += 1;
        }
    }
    t
}

#[test]
fn inferred_types_match_the_exporters_value_info() {
    let mut failures = Vec::new();
    for path in fixtures() {
        let full = load(&path, false);
        let bare = load(&path, true);
        let t = compare(&full, &bare);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let warnings = infer(&bare).map(|ty| ty.warnings().len()).unwrap_or(0);
        println!(
            "{name}: matched {}, unknown in file {}, mismatched {}, no value_info {}, warnings {warnings}",
            t.matched,
            t.unknown,
            t.mismatched.len(),
            t.inferred_only
        );
        for m in &t.mismatched {
            println!("  MISMATCH {m}");
        }
        let std_fixture = !name.starts_with("ort_");
        if !t.mismatched.is_empty() || (std_fixture && t.unknown > 0) || t.matched == 0 {
            failures.push(name);
        }
    }
    assert!(
        failures.is_empty(),
        "fixtures with mismatches: {failures:?}"
    );
}

#[test]
fn symbolic_fixtures_infer_products_of_batch_and_seq() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ort_gpt2_training.onnx");
    let g = load(&path, true);
    let types = infer(&g).expect("infers");
    let shape = |name: &str| {
        types
            .shape(g.tensor_id(name).expect("tensor exists"))
            .cloned()
            .expect("typed")
    };
    let (b, s) = (Dim::sym("batch"), Dim::sym("seq"));
    // Reshape to [-1, 64] of a [batch, seq, 64] activation: -1 = batch*seq.
    assert_eq!(
        shape("/h.0/attn/c_attn/MatMul_Grad/A_reshape_2d").dims(),
        &[b.mul(&s), Dim::Known(64)]
    );
    // Reshape to Concat(Shape[0], Shape[1], 2, 32): stays [batch, seq, 2, 32].
    assert_eq!(
        shape("/h.0/attn/Reshape_output_0").dims(),
        &[b.clone(), s.clone(), Dim::Known(2), Dim::Known(32)]
    );
    // Causal mask from ConstantOfShape(Concat(seq, seq)).
    assert_eq!(
        shape("/h.0/attn/ConstantOfShape_output_0").dims(),
        &[s.clone(), s.clone()]
    );
    // The shifted logits: Slice(…, 0, -1) on the seq axis.
    assert_eq!(
        shape("/Slice_output_0").dims(),
        &[b.clone(), s.sub(&Dim::Known(1)), Dim::Known(256)]
    );
    // GatherGrad takes its shape from Shape(wte.weight).
    assert_eq!(
        shape("wte.weight_grad").dims(),
        &[Dim::Known(256), Dim::Known(64)]
    );
}

#[test]
fn fixture_policies_keep_dropout_and_accumulators() {
    for (file, stochastic, stateful) in [
        ("mlp_d01_aot.onnx", 2, 0),
        ("mlp_d01_makefx.onnx", 2, 0),
        ("gpt2_d01_aot.onnx", 7, 0),
        ("ort_gpt2_training.onnx", 0, 29),
        ("ort_mlp_training.onnx", 2, 6),
        ("mlp_d0_aot.onnx", 0, 0),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(file);
        let g = load(&path, false);
        let (mut st, mut sf, mut unknown) = (0, 0, 0);
        for &n in g.nodes() {
            match policy(&g, n) {
                Policy::Stochastic(_) => st += 1,
                Policy::Stateful(_) => sf += 1,
                Policy::Unknown => unknown += 1,
                Policy::Recomputable => {}
            }
        }
        assert_eq!((st, sf, unknown), (stochastic, stateful, 0), "{file}");
    }
}

#[test]
fn symbolic_fixture_warns_only_about_slice_bounds() {
    // wpe[0:seq] (seq ≤ ctx is the model's contract) and labels[:, 1:] (seq ≥ 1).
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ort_gpt2_training.onnx");
    let g = load(&path, true);
    let types = infer(&g).expect("infers");
    assert_eq!(types.warnings().len(), 2, "{:?}", types.warnings());
    assert!(
        types
            .warnings()
            .iter()
            .all(|w| w.contains("(Slice): slice bound")),
        "{:?}",
        types.warnings()
    );
}

#[test]
fn symbolic_fixtures_evaluate_under_the_manifest_sizes_without_fresh_symbols() {
    for (file, bindings) in [
        ("ort_gpt2_training.onnx", vec![("batch", 2u64), ("seq", 32)]),
        ("ort_mlp_training.onnx", vec![("batch", 8)]),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(file);
        let g = load(&path, true);
        let types = infer(&g).expect("infers");
        let b: ckpt_ir::Bindings = bindings.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let mut evaluated = 0;
        for (t, tt) in types.iter() {
            let s = &tt.shape;
            assert!(
                s.symbols().iter().all(|x| x == "batch" || x == "seq"),
                "{file}: {} has {s}",
                g.tensor(t).name
            );
            s.eval(&b)
                .unwrap_or_else(|e| panic!("{file}: {} {s}: {e}", g.tensor(t).name));
            evaluated += 1;
        }
        assert_eq!(evaluated, g.tensor_count(), "{file}: every tensor typed");
    }
}
