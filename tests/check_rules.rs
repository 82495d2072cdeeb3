//! `ckpt_ir::check_model_rules` against `onnx.checker.check_model(full_check=True)`: on the
//! written outputs of every fixture and example (each rewritten by its greedy plan, as the
//! fuzzer's `export` depth writes it) and on one of them broken in each of the ways the rules
//! name, our check passes a model iff ONNX's checker does. The checker runs in one batch
//! through the project venv's Python (`fuzz/check_outputs.py`).

mod common;

use std::time::Duration;

use ckpt_fuzz::exec::{Depth, Reached, Sandbox};
use ckpt_ir::onnx::{self, ModelProto};
use ckpt_ir::Message;
use common::{python, root};

/// One rule broken in a written model, by name.
type Breakage = (&'static str, fn(&mut ModelProto));

fn graph(m: &mut ModelProto) -> &mut onnx::GraphProto {
    m.graph.as_mut().unwrap()
}

/// Ways to break a written model that both checks refuse (node 0 reads a graph input or an
/// initializer, node 1 reads node 0's output, in the fixture used).
fn breakages() -> Vec<Breakage> {
    vec![
        ("graph_unnamed", |m| graph(m).name = Some(String::new())),
        ("no_opset_import", |m| m.opset_import.clear()),
        ("metadata_key_twice", |m| {
            let p = onnx::StringStringEntryProto {
                key: Some("k".into()),
                value: Some("v".into()),
            };
            m.metadata_props.extend([p.clone(), p]);
        }),
        ("input_listed_twice", |m| {
            let x = graph(m).input[0].clone();
            graph(m).input.push(x);
        }),
        ("input_without_type", |m| graph(m).input[0].r#type = None),
        ("initializer_listed_twice", |m| {
            let w = graph(m).initializer[0].clone();
            graph(m).initializer.push(w);
        }),
        ("initializer_of_undefined_type", |m| {
            graph(m).initializer[0].data_type = Some(0)
        }),
        ("initializer_in_two_fields", |m| {
            let t = &mut graph(m).initializer[0];
            t.float_data = vec![1.0];
            t.raw_data = Some(vec![0u8; 4].into());
            t.dims = vec![1];
        }),
        ("external_data_at_an_absolute_path", |m| {
            let t = &mut graph(m).initializer[0];
            t.raw_data = None;
            t.float_data.clear();
            t.data_location = Some(onnx::tensor_proto::DataLocation::External as i32);
            t.external_data = vec![onnx::StringStringEntryProto {
                key: Some("location".into()),
                value: Some("/etc/passwd".into()),
            }];
        }),
        ("output_assigned_twice", |m| {
            let o = graph(m).node[0].output[0].clone();
            graph(m).node[1].output[0] = o;
        }),
        ("nodes_out_of_order", |m| graph(m).node.swap(0, 1)),
        ("undefined_graph_output", |m| {
            graph(m).output[0].name = Some("nowhere".into())
        }),
        ("unknown_op", |m| {
            graph(m).node[0].op_type = Some("NoSuchOp".into())
        }),
        ("unknown_attribute", |m| {
            graph(m).node[0]
                .attribute
                .push(ckpt_ir::build::attr_i("no_such_attribute", 1))
        }),
        ("attribute_without_type", |m| {
            let mut a = ckpt_ir::build::attr_i("no_such_attribute", 1);
            a.r#type = None;
            graph(m).node[0].attribute.push(a)
        }),
        ("too_many_inputs", |m| {
            let i = graph(m).node[0].input[0].clone();
            graph(m).node[0].input.push(i);
        }),
        ("ir_version_2_with_opsets", |m| m.ir_version = Some(2)),
    ]
}

#[test]
fn our_rules_pass_a_written_model_iff_onnx_checker_does() {
    let tmp = tempfile::tempdir().unwrap();
    let (runs, samples) = (tmp.path().join("runs"), tmp.path().join("samples"));
    std::fs::create_dir_all(&samples).unwrap();
    let sandbox = Sandbox::new(&runs).unwrap();
    let seeds =
        ckpt_fuzz::campaign::corpus(&[&root().join("tests/fixtures"), &root().join("examples")])
            .unwrap();
    // (file name, our verdict)
    let mut ours: Vec<(String, bool)> = Vec::new();
    let keep = |name: String, m: &ModelProto, ours: &mut Vec<(String, bool)>| {
        let passes = ckpt_ir::check_model_rules(m, Some(&samples)).is_ok();
        let k = ours.len();
        for side in ["in", "out"] {
            std::fs::write(samples.join(format!("{side}-{k}.onnx")), m.encode_to_vec()).unwrap();
        }
        ours.push((name, passes));
    };
    let mut written: Vec<(String, ModelProto)> = Vec::new();
    for (path, bytes) in &seeds {
        let e = sandbox.run(bytes, Depth::Export, Duration::from_secs(2));
        let name = path.rsplit('/').next().unwrap_or(path).to_string();
        match (e.reached, e.output) {
            (Reached::Through, Some(out)) => {
                let m = ModelProto::decode(out.as_slice()).unwrap();
                keep(name.clone(), &m, &mut ours);
                written.push((name, m));
            }
            (Reached::RefusedAtAnalysis | Reached::RefusedAtImport, _) => {}
            (other, _) => panic!("{name}: {other:?}"),
        }
    }
    sandbox.remove().unwrap();
    assert!(written.len() >= 16, "{} fixtures written", written.len());
    let (base_name, base) = written
        .iter()
        .find(|(n, _)| n == "mlp_d0_aot.onnx")
        .expect("mlp_d0_aot.onnx is written");
    for (what, breakage) in breakages() {
        let mut m = base.clone();
        breakage(&mut m);
        keep(format!("{base_name} with {what}"), &m, &mut ours);
    }
    let verdicts = ckpt_fuzz::external::judge_samples(&python(), &samples).unwrap();
    assert_eq!(verdicts.checked(), ours.len());
    let mut disagree = Vec::new();
    for v in &verdicts.all {
        let (name, passes) = &ours[v.exec as usize];
        if *passes != v.checker {
            disagree.push(format!(
                "{name}: ours {}, onnx.checker {} ({})",
                if *passes { "passes" } else { "refuses" },
                if v.checker { "passes" } else { "refuses" },
                v.why
            ));
        }
    }
    let written_pass = ours.iter().take(written.len()).all(|(_, p)| *p);
    assert!(disagree.is_empty(), "{disagree:#?}");
    assert!(written_pass, "a fixture's written output breaks our rules");
    assert!(
        ours.iter().skip(written.len()).all(|(_, p)| !p),
        "a breakage passes"
    );
}
