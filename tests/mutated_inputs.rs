//! Never panic on user input: mutated model files (bytes flipped, cut, inserted; or decoded and
//! broken structurally: wrong inputs, ops, dims, dtypes, attributes, missing initializers and
//! outputs) go through import, the whole analysis, candidates and a greedy plan, and come out
//! as `Ok` or a typed error, never a panic. `MUTATION_CASES=20000 MUTATION_SEED=N` explores
//! further (a fuzzing harness is a later step).

mod common;

use ckpt_ir::Bindings;
use common::*;

/// How far a mutated model got: 0 not imported, 1 imported, 2 analysed and planned. `Err` says
/// what is wrong with an answer that came back `Ok`: a greedy plan over its ceiling, or a
/// rewrite whose predicted device total is over the job's ceiling.
fn analyse_bytes(bytes: Vec<u8>) -> Result<usize, String> {
    let Ok(g) = ckpt_ir::import_bytes(bytes.into(), std::path::Path::new("mutated.onnx"), None)
    else {
        return Ok(0);
    };
    // The ORT training artifacts name their dims `batch` and `seq`.
    let b: Bindings = [("batch".to_string(), 2), ("seq".to_string(), 8)]
        .into_iter()
        .collect();
    let Ok(a) = ckpt_opt::optimize::analyse(
        g,
        &ckpt_opt::optimize::AnalyseOptions::with_bindings(b.clone()),
    ) else {
        return Ok(1);
    };
    let cands = ckpt_passes::recompute::candidates(&a.graph, &a.sim, &a.types, &b);
    let prob = ckpt_passes::recompute::problem(&a.graph, &a.sim, &cands, a.sim.peak_live / 2);
    if let Ok(p) = ckpt_solver::solve_greedy(&prob) {
        let e = ckpt_solver::evaluate(&prob, &p.recompute);
        if !e.fits(prob.ceiling) {
            return Err(format!(
                "the greedy plan peaks at {} B, over its ceiling of {} B",
                e.peak, prob.ceiling
            ));
        }
    }
    // The whole main job (ILP rounds, search, rewrite, verify) at 90% of the total.
    let ceiling = a.ledger.total_bytes / 10 * 9;
    let mut job = plan_job(std::path::Path::new("mutated.onnx"), ceiling, 2);
    job.bindings = b;
    if let Ok(ckpt_opt::optimize::Outcome::Rewritten(r)) = ckpt_opt::optimize::plan(&job, a.graph) {
        if r.after.ledger.total_bytes > ceiling {
            return Err(format!(
                "the rewrite's predicted device total {} B is over the ceiling of {ceiling} B",
                r.after.ledger.total_bytes
            ));
        }
    }
    Ok(2)
}

/// Structured mutations: the model decodes, but its graph is wrong in one of many ways.
fn mutate_structure(model: &mut ckpt_ir::onnx::ModelProto, next: &mut dyn FnMut() -> u64) {
    use ckpt_ir::onnx;
    let g = model.graph.as_mut().unwrap();
    let names: Vec<String> = g
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(g.input.iter().filter_map(|v| v.name.clone()))
        .collect();
    let pick = |n: usize, r: u64| (r % n.max(1) as u64) as usize;
    match next() % 9 {
        0 if !g.node.is_empty() => {
            let k = pick(g.node.len(), next());
            let n = &mut g.node[k];
            if !n.input.is_empty() {
                let slot = pick(n.input.len(), next());
                n.input[slot] = if next().is_multiple_of(3) {
                    "nonexistent".into()
                } else {
                    names[pick(names.len(), next())].clone()
                };
            }
        }
        1 if !g.node.is_empty() => {
            let k = pick(g.node.len(), next());
            g.node.remove(k);
        }
        2 if !g.node.is_empty() => {
            const OPS: [&str; 10] = [
                "MatMul",
                "Add",
                "Relu",
                "Reshape",
                "Gather",
                "Softmax",
                "Transpose",
                "Concat",
                "Where",
                "NoSuchOp",
            ];
            let k = pick(g.node.len(), next());
            g.node[k].op_type = Some(OPS[pick(OPS.len(), next())].into());
        }
        3 => {
            let vis: Vec<&mut onnx::ValueInfoProto> = g
                .value_info
                .iter_mut()
                .chain(g.input.iter_mut())
                .chain(g.output.iter_mut())
                .collect();
            let n = vis.len();
            if let Some(vi) = vis.into_iter().nth(pick(n, next())) {
                if let Some(onnx::type_proto::Value::TensorType(t)) =
                    vi.r#type.as_mut().and_then(|t| t.value.as_mut())
                {
                    if let Some(shape) = t.shape.as_mut() {
                        if !shape.dim.is_empty() {
                            let d = pick(shape.dim.len(), next());
                            let v = [0i64, 1, -3, 1 << 40, 7][pick(5, next())];
                            shape.dim[d].value =
                                Some(onnx::tensor_shape_proto::dimension::Value::DimValue(v));
                        }
                    }
                    if next().is_multiple_of(4) {
                        t.elem_type = Some([0, 7, 9, 16, 99][pick(5, next())]);
                    }
                }
            }
        }
        4 if !g.initializer.is_empty() => {
            let k = pick(g.initializer.len(), next());
            g.initializer.remove(k);
        }
        5 => {
            let attrs: Vec<&mut onnx::AttributeProto> = g
                .node
                .iter_mut()
                .flat_map(|n| n.attribute.iter_mut())
                .collect();
            let n = attrs.len();
            if let Some(a) = attrs.into_iter().nth(pick(n, next())) {
                a.i = Some([-9i64, 0, 5, 1 << 40][pick(4, next())]);
                if !a.ints.is_empty() {
                    let k = pick(a.ints.len(), next());
                    a.ints[k] = [-9i64, 0, 99][pick(3, next())];
                }
            }
        }
        6 if g.node.len() > 1 => {
            let (a, b) = (pick(g.node.len(), next()), pick(g.node.len(), next()));
            if let (Some(o), true) = (
                g.node[a].output.first().cloned(),
                !g.node[b].output.is_empty(),
            ) {
                g.node[b].output[0] = o;
            }
        }
        7 if !g.initializer.is_empty() => {
            let k = pick(g.initializer.len(), next());
            let t = &mut g.initializer[k];
            match next() % 3 {
                0 => t.raw_data = Some(Vec::new().into()),
                1 => t.dims.push(3),
                _ => t.data_type = Some(99),
            }
        }
        _ => {
            if !g.output.is_empty() {
                let k = pick(g.output.len(), next());
                g.output.remove(k);
            }
        }
    }
}

/// Run `cases` mutations (`mutate(case, next)` makes the bytes of one) through
/// [`analyse_bytes`]; panicking inputs, and inputs whose `Ok` answer is wrong, are written to
/// the temp dir and named.
fn never_panics(
    what: &str,
    default_seed: u64,
    mut mutate: impl FnMut(usize, &mut dyn FnMut() -> u64) -> Vec<u8>,
) {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let cases = env("MUTATION_CASES").unwrap_or(300) as usize;
    let mut seed = env("MUTATION_SEED").unwrap_or(default_seed);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut panics = Vec::new();
    let mut wrong = Vec::new();
    let mut reached = [0usize; 3];
    for case in 0..cases {
        let bytes = mutate(case, &mut next);
        let keep = |bytes: &[u8]| {
            let path = std::env::temp_dir().join(format!("ckpt_opt_{what}_{case}.onnx"));
            std::fs::write(&path, bytes).unwrap();
            path.display().to_string()
        };
        match std::panic::catch_unwind(|| analyse_bytes(bytes.clone())) {
            Ok(Ok(k)) => reached[k] += 1,
            Ok(Err(why)) => wrong.push(format!("{}: {why}", keep(&bytes))),
            Err(_) => panics.push(keep(&bytes)),
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
    assert!(
        wrong.is_empty(),
        "{what}: a wrong answer on {} of {cases}: {wrong:#?}",
        wrong.len()
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
    never_panics("structural", 0x9e37_79b9_7f4a_7c15, |case, next| {
        let mut m = originals[case % originals.len()].clone();
        for _ in 0..1 + next() % 3 {
            mutate_structure(&mut m, &mut *next);
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
    never_panics("bytes", 0x2545_f491_4f6c_dd1d, |case, next| {
        let mut bytes = originals[case % originals.len()].clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % bytes.len().max(1) as u64) as usize;
            match next() % 4 {
                0 => bytes[at] ^= 1 << (next() % 8),
                1 => bytes[at] = next() as u8,
                2 => bytes.insert(at, next() as u8),
                _ => bytes.truncate(at.max(1)),
            }
        }
        bytes
    });
}

/// The two panics the mutations found, kept as cases: a binary op with one operand, and a
/// Split whose `num_outputs` does not match its outputs (it allocated 2^40 sizes).
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
        let g = ckpt_ir::import_bytes(bytes.into(), std::path::Path::new("m.onnx"), None).unwrap();
        let e = ckpt_ir::ops::infer(&g).expect_err(what);
        assert!(!e.to_string().is_empty(), "{what}");
    }
}
