//! The main job as an unattended pipeline step sees it: declared shapes and element types
//! that lie are refused, validation is deterministic and says how random ops are seeded, progress only on
//! a terminal, a short validation summary unless asked for every tensor, each OS error once.

mod common;

use std::path::{Path, PathBuf};

use ckpt_ir::onnx;
use ckpt_ir::Message;
use common::*;

fn example() -> PathBuf {
    root().join("examples/gpt2_4l_train.onnx")
}

fn decode(p: &Path) -> onnx::ModelProto {
    onnx::ModelProto::decode(std::fs::read(p).unwrap().as_slice()).unwrap()
}

/// The receipt at `p`, checked against its schema.
fn receipt(p: &Path) -> serde_json::Value {
    let r = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_receipt_valid(&r, &p.display().to_string());
    r
}

/// The example with the value_info of `ones` changed by `f`, written into `dir` as `name`.
fn with_ones_declared(
    dir: &Path,
    name: &str,
    f: impl FnOnce(&mut onnx::type_proto::Tensor),
) -> PathBuf {
    let mut m = decode(&example());
    let g = m.graph.as_mut().unwrap();
    let vi = g
        .value_info
        .iter_mut()
        .find(|v| v.name.as_deref() == Some("ones"))
        .expect("the example declares `ones`");
    let Some(onnx::type_proto::Value::TensorType(tt)) =
        vi.r#type.as_mut().and_then(|t| t.value.as_mut())
    else {
        panic!("`ones` is a tensor")
    };
    f(tt);
    let p = dir.join(name);
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

/// A value_info that declares an intermediate smaller than its producer computes (ORT still
/// loads such a file) is refused, naming the tensor and both shapes; nothing is planned.
#[test]
fn lying_value_info_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = with_ones_declared(dir.path(), "lying.onnx", |tt| {
        let dim = &mut tt.shape.as_mut().unwrap().dim[0];
        dim.value = Some(onnx::tensor_shape_proto::dimension::Value::DimValue(64));
    });
    let o = run(&[path_str(&p), "--ceiling", "90%"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("`ones`"), "{err}");
    assert!(err.contains("[64,128]"), "{err}");
    assert!(err.contains("[128,128]"), "{err}");
    assert!(err.contains("declared with shape"), "{err}");
    assert!(!dir.path().join("lying.ckpt.onnx").exists());
}

/// A value_info that declares another element type than its producer computes (ONNX's
/// checker refuses it; the output would have kept it) is refused, naming the tensor and both
/// types.
#[test]
fn value_info_of_another_element_type_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = with_ones_declared(dir.path(), "retyped.onnx", |tt| {
        tt.elem_type = Some(onnx::tensor_proto::DataType::Double as i32);
    });
    let o = run(&[path_str(&p), "--ceiling", "90%"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("`ones` is declared with element type f64") && err.contains("computes bool"),
        "{err}"
    );
    assert!(!dir.path().join("retyped.ckpt.onnx").exists());
}

/// The example with initializers `inits` (name, element type, one value) and `node` added,
/// its output `out` (of element type `dtype`, one element) a graph output, run by the main
/// job at 90% from `dir`: the run's stderr, once it was checked that it exits 1 and writes
/// nothing.
fn refused_with_node(
    dir: &Path,
    inits: &[(&str, ckpt_ir::DType)],
    node: onnx::NodeProto,
    out: (&str, ckpt_ir::DType),
) -> String {
    let mut m = decode(&example());
    let g = m.graph.as_mut().unwrap();
    for &(name, dtype) in inits {
        let mut t = onnx::TensorProto {
            name: Some(name.into()),
            dims: vec![1],
            data_type: Some(dtype.code()),
            ..Default::default()
        };
        match dtype {
            ckpt_ir::DType::F32 => t.float_data = vec![1.0],
            ckpt_ir::DType::I64 => t.int64_data = vec![1],
            _ => t.int32_data = vec![1],
        }
        g.initializer.push(t);
    }
    g.node.push(node);
    g.output.push(ckpt_ir::build::value_info(out.0, out.1, "1"));
    let p = dir.join("extra.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    let o = run(&[path_str(&p), "--ceiling", "90%"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!dir.join("extra.ckpt.onnx").exists());
    err
}

fn node(op: &str, name: &str, inputs: &[&str], output: &str) -> onnx::NodeProto {
    onnx::NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

/// A node whose input has an element type its op's schema does not allow (a `Neg` of a bool:
/// ONNX's checker and ONNX Runtime refuse it) is refused by the analysis, naming the node, the
/// tensor and the types allowed.
#[test]
fn an_element_type_the_schema_does_not_allow_is_refused_by_name() {
    use ckpt_ir::DType::Bool;
    let dir = tempfile::tempdir().unwrap();
    let neg = node("Neg", "negated_flag", &["flag"], "not_flag");
    let err = refused_with_node(dir.path(), &[("flag", Bool)], neg, ("not_flag", Bool));
    assert!(
        err.contains("negated_flag")
            && err.contains("input #0 `flag` is bool")
            && err.contains("f32"),
        "{err}"
    );
}

/// Inputs of two element types under one type variable of the op's schema (a `Mul` of an
/// f32 and an i64: ONNX's checker and ONNX Runtime refuse it) are refused by the analysis,
/// naming the node and both inputs with their types.
#[test]
fn two_element_types_under_one_type_variable_are_refused_by_name() {
    use ckpt_ir::DType::{F32, I64};
    let dir = tempfile::tempdir().unwrap();
    let mul = node("Mul", "mixed_mul", &["real", "count"], "product");
    let err = refused_with_node(
        dir.path(),
        &[("real", F32), ("count", I64)],
        mul,
        ("product", F32),
    );
    assert!(
        err.contains("mixed_mul")
            && err.contains("input #1 `count` is i64")
            && err.contains("input #0 `real` is f32")
            && err.contains("one type variable"),
        "{err}"
    );
}

/// A value_info that types a value as a map (holding an unknown element type, 32: ONNX's
/// checker and ONNX Runtime refuse it; the output would have kept it) is refused at import,
/// naming the value.
#[test]
fn a_value_typed_as_a_map_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = decode(&example());
    let vi = m
        .graph
        .as_mut()
        .unwrap()
        .value_info
        .iter_mut()
        .find(|v| v.name.as_deref() == Some("ones"))
        .unwrap();
    let tensor = onnx::TypeProto {
        value: Some(onnx::type_proto::Value::TensorType(
            onnx::type_proto::Tensor {
                elem_type: Some(32),
                shape: None,
            },
        )),
        ..Default::default()
    };
    vi.r#type = Some(onnx::TypeProto {
        value: Some(onnx::type_proto::Value::MapType(Box::new(
            onnx::type_proto::Map {
                key_type: Some(ckpt_ir::DType::I64.code()),
                value_type: Some(Box::new(tensor)),
            },
        ))),
        ..Default::default()
    });
    let p = dir.path().join("mapped.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    let o = run(&[path_str(&p), "--ceiling", "90%"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("`ones` (value_info) is typed as a map"),
        "{err}"
    );
    assert!(!dir.path().join("mapped.ckpt.onnx").exists());
}

/// Values are compared under ORT's deterministic compute (the example's embedding gradient
/// is a ScatterND with reduction=add), and the receipt says so.
#[test]
fn validation_runs_deterministic_and_says_so() {
    let m = decode(&example());
    assert!(
        m.graph
            .as_ref()
            .unwrap()
            .node
            .iter()
            .any(|n| n.op_type.as_deref() == Some("ScatterND")),
        "the example must hold a ScatterND for this test to mean anything"
    );
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.json");
    let o = run(&[
        path_str(&example()),
        "--ceiling",
        "36MiB",
        "-o",
        path_str(&dir.path().join("x.onnx")),
        "--validate",
        "--runs",
        "1",
        "--intra-op-threads",
        "2",
        "--receipt",
        path_str(&rec),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = receipt(&rec);
    let v = &r["validation"];
    assert_eq!(v["deterministic_compute"], true);
    let entries = v["session"]["config_entries"].as_array().unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e[0] == "session.use_deterministic_compute" && e[1] == "1"),
        "{entries:?}"
    );
    assert!(
        stdout(&o).contains("deterministic compute"),
        "{}",
        stdout(&o)
    );
}

/// Random ops' names and order among themselves, in file order.
fn random_ops(m: &onnx::ModelProto) -> Vec<(String, Option<i64>, Option<f32>)> {
    m.graph
        .as_ref()
        .unwrap()
        .node
        .iter()
        .filter(|n| {
            let d = ckpt_ir::normalise_domain(n.domain.as_deref().unwrap_or(""));
            ckpt_ir::ops::seed_attr(&d, n.op_type.as_deref().unwrap_or("")).is_some()
        })
        .map(|n| {
            let seed = n
                .attribute
                .iter()
                .find(|a| a.name.as_deref() == Some("seed"));
            (
                n.name.clone().unwrap_or_default(),
                seed.and_then(|a| a.i),
                seed.and_then(|a| a.f),
            )
        })
        .collect()
}

/// Every output of `model` as ORT computes it after `onnxruntime.set_seed(1)`, in a fresh
/// process, on inputs from a fixed numpy seed.
fn outputs_under_ort_seed(model: &Path) -> Vec<u8> {
    let script = r#"
import sys, numpy as np, onnxruntime as ort
ort.set_seed(1)
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
so.intra_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])
rng = np.random.default_rng(0)
feeds = {}
for i in s.get_inputs():
    shape = [d if isinstance(d, int) else 2 for d in i.shape]
    if 'int' in i.type:
        feeds[i.name] = rng.integers(0, 8, size=shape).astype(np.int64)
    else:
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
sys.stdout.buffer.write(b''.join(o.tobytes() for o in s.run(None, feeds)))
"#;
    let o = std::process::Command::new(python())
        .args(["-c", script, path_str(model)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    o.stdout
}

/// Without `--seed-random-ops` the output's random ops carry no seed and keep their order
/// among themselves; the receipt lists those ORT seeds by node index whose index moved, and
/// exactly then ORT (under `set_seed`) draws other masks than for the original. With it, each
/// gets the seed validation used.
#[test]
fn random_op_seeds_are_kept_or_written_on_request() {
    let dir = tempfile::tempdir().unwrap();
    // Dropout (ORT's global generator), RandomUniformLike (seeded by node index).
    for (fixture, shifts) in [("gpt2_d01_aot", false), ("gpt2_d01_makefx", true)] {
        let model = root().join(format!("tests/fixtures/{fixture}.onnx"));
        let original = decode(&model);
        let before = random_ops(&original);
        assert!(!before.is_empty(), "{fixture} has dropout");
        assert!(before.iter().all(|(_, i, f)| i.is_none() && f.is_none()));
        for (flag, want) in [
            (None, "ort_derived"),
            (Some("--seed-random-ops"), "explicit"),
        ] {
            let out = dir.path().join(format!("{fixture}.{want}.onnx"));
            let rec = dir.path().join(format!("{fixture}.{want}.json"));
            let mut args = vec![
                path_str(&model).to_string(),
                "--ceiling".into(),
                "90%".into(),
                "-o".into(),
                path_str(&out).into(),
                "--seed".into(),
                "5".into(),
                "--receipt".into(),
                path_str(&rec).into(),
                // The recompute's clones move the makefx graph's random ops; the plan of the
                // folded graph here recomputes nothing and moves none.
                "--fold".into(),
                "off".into(),
            ];
            args.extend(flag.map(String::from));
            let o = bin().args(&args).output().unwrap();
            assert!(o.status.success(), "{fixture} {want}: {}", stderr(&o));
            let r = receipt(&rec);
            assert_eq!(r["status"], "rewritten", "{fixture} {want}");
            assert_eq!(r["random_op_seeds"], want);
            let written = decode(&out);
            let after = random_ops(&written);
            let names = |v: &[(String, Option<i64>, Option<f32>)]| -> Vec<String> {
                v.iter().map(|x| x.0.clone()).collect()
            };
            assert_eq!(
                names(&after),
                names(&before),
                "{fixture} {want}: random ops reordered or cloned"
            );
            let shifted = r["random_ops_shifted"].as_array().unwrap();
            if flag.is_some() {
                let mut expect = original.clone();
                ckpt_validate::paired::seed_random_ops(&mut expect, 5);
                assert_eq!(after, random_ops(&expect), "{fixture} {want}");
                assert!(after.iter().all(|(_, i, f)| i.is_some() || f.is_some()));
                assert!(shifted.is_empty());
            } else {
                assert_eq!(after, before, "{fixture} {want}");
                assert_eq!(!shifted.is_empty(), shifts, "{fixture}: {shifted:?}");
                let same = outputs_under_ort_seed(&model) == outputs_under_ort_seed(&out);
                assert_eq!(
                    same, !shifts,
                    "{fixture}: the receipt's random_ops_shifted is {shifted:?}"
                );
            }
        }
    }
}

/// `--validate` on a graph that already fits still validates (values and memory on ORT).
#[test]
fn validate_on_a_graph_that_fits_still_validates() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.json");
    let o = run(&[
        path_str(&example()),
        "--ceiling",
        "1GiB",
        "--validate",
        "--runs",
        "1",
        "--receipt",
        path_str(&rec),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = receipt(&rec);
    assert_eq!(r["status"], "already_fits");
    assert_eq!(r["validation"]["passed"], true);
    assert_eq!(r["memory"]["passed"], true);
    assert!(
        stdout(&o).contains("memory under the deployment profile"),
        "{}",
        stdout(&o)
    );
}

/// The validation summary is one line per group of outputs by default; `--verbose` lists
/// every output, `--json` carries every output too.
#[test]
fn validation_summary_is_short_unless_asked() {
    let m = example();
    let count = decode(&m).graph.unwrap().output.len();
    assert!(count > 10);
    let short = run(&["validate", path_str(&m), path_str(&m), "--runs", "1"]);
    assert!(short.status.success(), "{}", stderr(&short));
    let s = stdout(&short);
    assert!(s.contains("gradients"), "{s}");
    assert!(s.contains("worst: `"), "{s}");
    assert!(s.contains("control"), "{s}");
    assert!(s.contains("peak (exact)"), "{s}");
    let per_tensor = |text: &str| text.matches("max abs").count();
    assert!(per_tensor(&s) == 0, "{s}");
    let long = run(&[
        "validate",
        path_str(&m),
        path_str(&m),
        "--runs",
        "1",
        "--verbose",
    ]);
    assert!(long.status.success());
    assert_eq!(per_tensor(&stdout(&long)), count, "{}", stdout(&long));
    let json = run(&[
        "validate",
        path_str(&m),
        path_str(&m),
        "--runs",
        "1",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(v["validation"]["outputs"].as_array().unwrap().len(), count);
}

/// Progress goes to stderr only on a terminal: none when stderr is a pipe, some under a
/// pseudo-terminal (`script`), none there with `--quiet`.
#[test]
fn progress_only_on_a_terminal_and_never_with_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let piped = run(&[
        path_str(&example()),
        "--ceiling",
        "36MiB",
        "-o",
        path_str(&dir.path().join("a.onnx")),
    ]);
    assert!(piped.status.success());
    assert!(
        !stderr(&piped).contains("searching") && !stderr(&piped).contains("analysing"),
        "{}",
        stderr(&piped)
    );
    let exe = env!("CARGO_BIN_EXE_ckpt-opt");
    let under_tty = |extra: &str, out: &str| {
        let cmd = format!(
            "{exe} {} --ceiling 36MiB -o {} {extra}",
            path_str(&example()),
            path_str(&dir.path().join(out))
        );
        let o = std::process::Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stdout(&o));
        stdout(&o)
    };
    let shown = under_tty("", "b.onnx");
    assert!(
        shown.contains("importing") || shown.contains("analysing") || shown.contains("searching"),
        "{shown}"
    );
    let quiet = under_tty("--quiet", "c.onnx");
    assert!(
        !quiet.contains("importing")
            && !quiet.contains("analysing")
            && !quiet.contains("searching"),
        "{quiet}"
    );
    assert!(quiet.contains("wrote"), "{quiet}");
}

/// An OS error is printed once, not once by the message and again as its cause.
#[test]
fn os_errors_are_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.onnx");
    let o = run(&[path_str(&missing), "--ceiling", "1GiB"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let out = ro.join("x.onnx");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
    let o = run(&[
        path_str(&example()),
        "--ceiling",
        "36MiB",
        "-o",
        path_str(&out),
    ]);
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = stderr(&o);
    if err.contains("Permission denied") {
        assert_eq!(err.matches("Permission denied").count(), 1, "{err}");
    } else {
        // Running as root: the directory is writable after all.
        assert!(o.status.success(), "{err}");
    }
}
