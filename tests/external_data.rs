//! Models with external data, as `onnx.save(..., save_as_external_data=True,
//! size_threshold=0)` writes them (every initializer in the data file, the small shape
//! constants included): validated from another directory, written anywhere, checked by
//! `onnx.checker` (full check) and loaded by ORT from any cwd; nothing written when nothing
//! was proven.

mod common;

use std::path::{Path, PathBuf};

use ckpt_ir::onnx::{self, tensor_proto::DataLocation};
use ckpt_ir::Message;
use common::*;

fn example() -> PathBuf {
    root().join("examples/gpt2_4l_train.onnx")
}

/// An initializer's bytes, little-endian, whatever field holds them.
fn raw_bytes(t: &onnx::TensorProto) -> Vec<u8> {
    if let Some(r) = &t.raw_data {
        return r.to_vec();
    }
    let mut out = Vec::new();
    match t.data_type.unwrap_or(0) {
        1 => t
            .float_data
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        7 => t
            .int64_data
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        6 => t
            .int32_data
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        9 => t.int32_data.iter().for_each(|v| out.push(*v as u8)),
        11 => t
            .double_data
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        code => panic!("initializer {:?}: element type {code} not handled", t.name),
    }
    out
}

/// `src` with every initializer moved to `dir/location` (offsets aligned to 64), the model
/// written to `dir/model.onnx`. Returns the model path and the data bytes.
fn externalize(src: &Path, dir: &Path, location: &str) -> (PathBuf, Vec<u8>) {
    let mut m = onnx::ModelProto::decode(std::fs::read(src).unwrap().as_slice()).unwrap();
    let mut data: Vec<u8> = Vec::new();
    for t in m.graph.as_mut().unwrap().initializer.iter_mut() {
        let bytes = raw_bytes(t);
        let offset = data.len().div_ceil(64) * 64;
        data.resize(offset, 0);
        data.extend(&bytes);
        t.raw_data = None;
        t.float_data.clear();
        t.int64_data.clear();
        t.int32_data.clear();
        t.double_data.clear();
        t.data_location = Some(DataLocation::External as i32);
        t.external_data = [
            ("location", location.to_string()),
            ("offset", offset.to_string()),
            ("length", bytes.len().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| onnx::StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        })
        .collect();
    }
    let data_path = dir.join(location);
    std::fs::create_dir_all(data_path.parent().unwrap()).unwrap();
    std::fs::write(&data_path, &data).unwrap();
    let model = dir.join("model.onnx");
    std::fs::write(&model, m.encode_to_vec()).unwrap();
    (model, data)
}

fn sha256_file(p: &Path) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(std::fs::read(p).unwrap());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The receipt at `p`, checked against its schema.
fn receipt(p: &Path) -> serde_json::Value {
    let r = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_receipt_valid(&r, &p.display().to_string());
    r
}

/// Files in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The GPT-2 example with all-external data is planned (its shape constants read from the
/// data file), validated from a directory that holds a different `w.data`, and written to a
/// third directory with its data copied beside it; the output passes `onnx.checker`'s full
/// check and runs in ORT from another cwd; the receipt hashes both data files.
#[test]
fn external_data_validates_from_any_cwd_and_output_elsewhere_is_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, out_dir, cwd) = (
        tmp.path().join("src"),
        tmp.path().join("out"),
        tmp.path().join("cwd"),
    );
    for d in [&src, &out_dir, &cwd] {
        std::fs::create_dir_all(d).unwrap();
    }
    let (model, data) = externalize(&example(), &src, "w.data");
    // A decoy of the same size: were it read, validation would run on the wrong weights.
    std::fs::write(cwd.join("w.data"), vec![0u8; data.len()]).unwrap();
    std::fs::copy(&model, cwd.join("model.onnx")).unwrap();
    let out = out_dir.join("x.onnx");
    let rec = tmp.path().join("receipt.json");
    let o = bin()
        .current_dir(&cwd)
        .args([
            path_str(&model),
            "--ceiling",
            "36MiB",
            "-o",
            path_str(&out),
            "--validate",
            "--runs",
            "1",
            "--receipt",
            path_str(&rec),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let r = receipt(&rec);
    assert_eq!(r["status"], "rewritten");
    assert_eq!(r["validation"]["passed"], true);
    assert_eq!(
        r["model_data"][0]["sha256"],
        sha256_file(&src.join("w.data"))
    );
    assert_eq!(
        r["output_data"]["placement"], "copied",
        "{}",
        r["output_data"]
    );
    let out_data = out_dir.join("x.onnx.data");
    assert_eq!(
        r["output_data"]["files"][0]["path"],
        path_str(&out_data),
        "{}",
        r["output_data"]
    );
    assert_eq!(
        r["output_data"]["files"][0]["sha256"],
        sha256_file(&out_data)
    );
    assert_eq!(listing(&out_dir), ["x.onnx", "x.onnx.data"]);
    assert!(stdout(&o).contains("data copied to"), "{}", stdout(&o));
    // The output is complete where it is: onnx's full check, and ORT from an unrelated cwd.
    let check = std::process::Command::new(python())
        .current_dir("/")
        .args([
            "-c",
            "import sys, onnx, onnxruntime as ort\n\
             onnx.checker.check_model(sys.argv[1], full_check=True)\n\
             s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n\
             print('inputs', len(s.get_inputs()))",
            path_str(&out),
        ])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}\n{}",
        stdout(&check),
        stderr(&check)
    );
    // `validate` from the decoy's directory: both graphs' data found beside each.
    let v = bin()
        .current_dir(&cwd)
        .args(["validate", path_str(&model), path_str(&out), "--runs", "1"])
        .output()
        .unwrap();
    assert!(v.status.success(), "{}\n{}", stdout(&v), stderr(&v));
    // `export` elsewhere writes a complete model too.
    let exported = out_dir.join("e.onnx");
    let e = run(&["export", path_str(&model), "-o", path_str(&exported)]);
    assert!(e.status.success(), "{}", stderr(&e));
    assert!(out_dir.join("e.onnx.data").exists());
    ckpt_ir::import_file(&exported).unwrap();
    // ckpt-opt reads it back too, and its weights are the original's.
    let g = ckpt_ir::import_file(&out).unwrap();
    assert!(g.initializers().count() > 0);
    let orig = onnx::ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
    let written = onnx::ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
    let copied = std::fs::read(&out_data).unwrap();
    let range = |t: &onnx::TensorProto, key: &str| -> usize {
        t.external_data
            .iter()
            .find(|e| e.key.as_deref() == Some(key))
            .and_then(|e| e.value.as_deref())
            .unwrap()
            .parse()
            .unwrap()
    };
    let (mut embedded, mut external) = (0, 0);
    for t in &written.graph.as_ref().unwrap().initializer {
        let o = orig
            .graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .find(|x| x.name == t.name)
            .unwrap();
        let (a, n) = (range(o, "offset"), range(o, "length"));
        match &t.raw_data {
            // Small constants are embedded (ORT cannot load them external).
            Some(raw) => {
                assert!(
                    n as u64 <= ckpt_ir::MAX_EXTERNAL_VALUE_BYTES,
                    "{:?}",
                    t.name
                );
                assert_eq!(&data[a..a + n], &raw[..], "{:?}", t.name);
                embedded += 1;
            }
            None => {
                let (b, m) = (range(t, "offset"), range(t, "length"));
                assert_eq!(n, m, "{:?}", t.name);
                assert_eq!(&data[a..a + n], &copied[b..b + m], "{:?}", t.name);
                external += 1;
            }
        }
    }
    assert!(
        embedded > 0 && external > 0,
        "{embedded} embedded, {external} external"
    );
}

/// Written beside its input, the output references the input's data file (nothing copied),
/// and the receipt says so.
#[test]
fn output_beside_the_input_references_its_data() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, _) = externalize(&example(), tmp.path(), "w.data");
    let out = tmp.path().join("x.onnx");
    let rec = tmp.path().join("receipt.json");
    let o = run(&[
        path_str(&model),
        "--ceiling",
        "36MiB",
        "-o",
        path_str(&out),
        "--receipt",
        path_str(&rec),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = receipt(&rec);
    assert_eq!(r["output_data"]["placement"], "referenced");
    assert_eq!(
        r["output_data"]["files"][0]["sha256"],
        sha256_file(&tmp.path().join("w.data"))
    );
    assert!(!tmp.path().join("x.onnx.data").exists());
    ckpt_ir::import_file(&out).unwrap();
}

/// A location that climbs into a subdirectory and back (`x/../w.data`) stays inside the
/// model's directory: accepted, and the output elsewhere gets a plain data file name.
#[test]
fn a_location_that_stays_inside_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("x")).unwrap();
    let (model, _) = externalize(&example(), tmp.path(), "x/../w.data");
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("y.onnx");
    let o = run(&[path_str(&model), "--ceiling", "36MiB", "-o", path_str(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(listing(out_dir.path()), ["y.onnx", "y.onnx.data"]);
    ckpt_ir::import_file(&out).unwrap();
}

/// Locations that name no data file of the model's directory are refused at import, naming
/// the tensor: the directory itself (`""`, `.`), the model file, outside the directory.
#[test]
fn bad_locations_are_refused() {
    for (location, why) in [
        ("", "names the model's directory"),
        (".", "names the model's directory"),
        ("x/..", "names the model's directory"),
        ("model.onnx", "the model file itself"),
        ("../w.data", "outside the model directory"),
        ("/etc/passwd", "outside the model directory"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("x")).unwrap();
        // Write real data elsewhere, then point every initializer at `location`.
        let (model, _) = externalize(&example(), tmp.path(), "w.data");
        let mut m = onnx::ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
        for t in m.graph.as_mut().unwrap().initializer.iter_mut() {
            for e in t.external_data.iter_mut() {
                if e.key.as_deref() == Some("location") {
                    e.value = Some(location.into());
                }
            }
        }
        std::fs::write(&model, m.encode_to_vec()).unwrap();
        let o = run(&["inspect", path_str(&model)]);
        assert_eq!(o.status.code(), Some(1), "{location:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{location:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("initializer `"),
            "{location:?}: {}",
            stderr(&o)
        );
    }
}

/// A forced validation failure (tolerances so wide that the broken control passes) writes
/// no model, no data file and no temporary file; the receipt says `validation_failed` and why.
#[test]
fn failed_validation_leaves_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let out_dir = tmp.path().join("out");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out_dir).unwrap();
    let (model, _) = externalize(&example(), &src, "w.data");
    let rec = tmp.path().join("receipt.json");
    let o = run(&[
        path_str(&model),
        "--ceiling",
        "36MiB",
        "-o",
        path_str(&out_dir.join("x.onnx")),
        "--validate",
        "--runs",
        "1",
        "--rtol",
        "1e30",
        "--atol",
        "1e30",
        "--receipt",
        path_str(&rec),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(listing(&out_dir), Vec::<String>::new());
    let r = receipt(&rec);
    assert_eq!(r["status"], "validation_failed");
    assert!(
        r["reason"].as_str().unwrap().contains("control"),
        "{}",
        r["reason"]
    );
    assert!(r["output"].is_null() && r["output_data"].is_null());
    assert!(stdout(&o).contains("nothing written"), "{}", stdout(&o));
}

/// SIGTERM or SIGINT mid-job: the handler runs (exit 130) and no file, temporary or not, is
/// left in the output directory.
#[test]
fn sigterm_and_sigint_leave_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let (model, _) = externalize(&example(), &src, "w.data");
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let out_dir = tmp.path().join(format!("out{signal}"));
        std::fs::create_dir_all(&out_dir).unwrap();
        let mut child = bin()
            .args([
                path_str(&model),
                "--ceiling",
                "36MiB",
                "-o",
                path_str(&out_dir.join("x.onnx")),
                "--validate",
                "--runs",
                "50",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        // SAFETY: signalling the child this test spawned, by its pid.
        unsafe {
            libc::kill(child.id() as i32, signal);
        }
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "signal {signal}: {status:?}");
        assert_eq!(listing(&out_dir), Vec::<String>::new(), "signal {signal}");
    }
}

/// With the process's cwd holding a `w.data` of the same size but other weights, a session
/// told the model's directory computes what the embedded model computes; one that is not
/// told reads the decoy (so the decoy really is in the way).
#[test]
fn sessions_read_external_data_from_the_model_directory_not_the_cwd() {
    use ckpt_runtime::{run, Model, SessionConfig};
    use ckpt_validate::inputs::{make_inputs, InputOverrides};
    let src = tempfile::tempdir().unwrap();
    // Kept: the cwd of this test process must outlive it.
    let cwd = tempfile::tempdir().unwrap().keep();
    let embedded = example();
    let (model, data) = externalize(&embedded, src.path(), "w.data");
    let decoy: Vec<u8> = data.iter().map(|b| b.wrapping_add(1)).collect();
    std::fs::write(cwd.join("w.data"), decoy).unwrap();
    std::env::set_current_dir(&cwd).unwrap();
    let g = ckpt_ir::import_file(&embedded).unwrap();
    let o = InputOverrides::parse(&[], &[]).unwrap();
    let inputs = make_inputs(&g, &ckpt_ir::Bindings::new(), 7, &o, &[])
        .unwrap()
        .0;
    let cfg = SessionConfig::default();
    // As every caller hands it to ORT: small constants embedded, the weights external.
    let mut m = onnx::ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
    assert!(ckpt_ir::embed_small_external(&mut m, src.path()) > 0);
    assert!(ckpt_ir::external_data_files(&m, src.path()).len() == 1);
    let bytes = m.encode_to_vec();
    let want = run(
        Model::new("embedded", &std::fs::read(&embedded).unwrap()),
        &inputs,
        &cfg,
    )
    .unwrap();
    let got = run(
        Model::new("external", &bytes).in_dir(Some(src.path())),
        &inputs,
        &cfg,
    )
    .unwrap();
    assert!(ckpt_runtime::compare(&want, &got, &Default::default()).passed);
    assert_eq!(want[0].data, got[0].data, "the loss differs");
    let decoyed = run(Model::new("external", &bytes), &inputs, &cfg);
    assert!(
        decoyed.map_or(true, |d| d[0].data != want[0].data),
        "without the model's directory the cwd's decoy was not read: the test cannot fail"
    );
}

/// Rewrite the model at `model`: `edit` sees every external initializer's entries.
fn edit_entries(model: &Path, mut edit: impl FnMut(&mut onnx::TensorProto)) {
    let mut m = onnx::ModelProto::decode(std::fs::read(model).unwrap().as_slice()).unwrap();
    for t in m.graph.as_mut().unwrap().initializer.iter_mut() {
        edit(t);
    }
    std::fs::write(model, m.encode_to_vec()).unwrap();
}

/// The checker's full check and an ORT session on `model`, from `/`.
fn checker_and_ort(model: &Path) -> std::process::Output {
    std::process::Command::new(python())
        .current_dir("/")
        .args([
            "-c",
            "import sys, onnx, onnxruntime as ort\n\
             onnx.checker.check_model(sys.argv[1], full_check=True)\n\
             ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])",
            path_str(model),
        ])
        .output()
        .unwrap()
}

/// External-data entries without `length` (optional in ONNX) are copied by the tensor's own
/// byte range (dims × element size), not to the end of the data file: the output written
/// elsewhere passes the checker's full check and loads in ORT (it failed with "external data
/// size mismatch"), and every copied range is the original's bytes.
#[test]
fn entries_without_length_are_copied_by_their_true_range() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, out_dir) = (tmp.path().join("src"), tmp.path().join("out"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out_dir).unwrap();
    let (model, data) = externalize(&example(), &src, "w.data");
    let mut lengths = std::collections::HashMap::new();
    edit_entries(&model, |t| {
        let n = t
            .external_data
            .iter()
            .find(|e| e.key.as_deref() == Some("length"))
            .and_then(|e| e.value.clone())
            .unwrap();
        lengths.insert(t.name.clone().unwrap(), n.parse::<usize>().unwrap());
        t.external_data
            .retain(|e| e.key.as_deref() != Some("length"));
    });
    let out = out_dir.join("x.onnx");
    let o = run(&[path_str(&model), "--ceiling", "36MiB", "-o", path_str(&out)]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let after = checker_and_ort(&out);
    assert!(after.status.success(), "{}", stderr(&after));
    let orig = onnx::ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
    let written = onnx::ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
    let copied = std::fs::read(out_dir.join("x.onnx.data")).unwrap();
    let entry = |t: &onnx::TensorProto, key: &str| -> Option<usize> {
        t.external_data
            .iter()
            .find(|e| e.key.as_deref() == Some(key))
            .and_then(|e| e.value.as_deref())
            .map(|v| v.parse().unwrap())
    };
    let mut external = 0;
    for t in &written.graph.as_ref().unwrap().initializer {
        let Some(b) = entry(t, "offset") else {
            continue;
        };
        let name = t.name.clone().unwrap();
        let o = orig.graph.as_ref().unwrap().initializer.iter();
        let o = o.clone().find(|x| x.name == t.name).unwrap();
        let (a, n) = (entry(o, "offset").unwrap(), lengths[&name]);
        assert_eq!(entry(t, "length"), Some(n), "{name}");
        assert_eq!(&data[a..a + n], &copied[b..b + n], "{name}");
        external += 1;
    }
    assert!(external > 0);
}

/// A declared `length` that disagrees with the tensor's dims × element size (100 for the
/// largest weight) is refused at import, naming the tensor; nothing is written.
#[test]
fn a_wrong_length_is_refused_naming_the_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, _) = externalize(&example(), tmp.path(), "w.data");
    let m = onnx::ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
    let largest = m
        .graph
        .as_ref()
        .unwrap()
        .initializer
        .iter()
        .max_by_key(|t| t.dims.iter().product::<i64>())
        .and_then(|t| t.name.clone())
        .unwrap();
    edit_entries(&model, |t| {
        if t.name.as_deref() == Some(largest.as_str()) {
            for e in &mut t.external_data {
                if e.key.as_deref() == Some("length") {
                    e.value = Some("100".into());
                }
            }
        }
    });
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("x.onnx");
    let o = run(&[path_str(&model), "--ceiling", "36MiB", "-o", path_str(&out)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("`{largest}`")) && err.contains("length 100"),
        "{err}"
    );
    assert!(
        listing(out_dir.path()).is_empty(),
        "wrote {:?}",
        listing(out_dir.path())
    );
}

/// A data file with a second hard link (here from outside the model's directory) is refused,
/// as onnx's checker refuses it; with one link it is accepted.
#[test]
fn a_hard_linked_data_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, outside) = (tmp.path().join("src"), tmp.path().join("outside"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let (model, _) = externalize(&example(), &src, "w.data");
    let o = run(&["inspect", path_str(&model)]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::hard_link(src.join("w.data"), outside.join("secret.bin")).unwrap();
    let o = run(&["inspect", path_str(&model)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("w.data") && err.contains("2 hard links"),
        "{err}"
    );
    assert!(err.contains("initializer `"), "{err}");
}
