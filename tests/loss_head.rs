//! The loss head in chunks of rows (`ckpt_passes::loss_head`, the main job's
//! `--chunk-loss-head`): the patch runs on ONNX Runtime with its need predicted to the byte,
//! its outputs equal to the original's within validation's tolerances (the sums run in
//! another order), and the main job keeps it where it fits and nothing else does.

use ckpt_ir::build::{attr_i, ModelBuilder};
use ckpt_ir::{import_file, DType, Graph};
use ckpt_passes::loss_head::{chunk_loss_head, Accumulate};

mod common;
use common::*;

fn typed(g: Graph) -> Graph {
    ckpt_planner::with_inferred_types(g).unwrap().0
}

fn fixture(name: &str) -> Graph {
    typed(import_file(&root().join("tests/fixtures").join(format!("{name}.onnx"))).unwrap())
}

/// `g` written to `path`.
fn write(g: &Graph, path: &std::path::Path) {
    ckpt_ir::write_model(ckpt_ir::export(g), g.dir(), path, None).unwrap();
}

/// `ckpt-opt validate original rewritten --json`: the report, which must pass.
fn validated(original: &std::path::Path, rewritten: &std::path::Path) -> serde_json::Value {
    let o = run(&[
        "validate",
        path_str(original),
        path_str(rewritten),
        "--json",
        "--runs",
        "1",
        "--int-range",
        "attention_mask=1:2",
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    v
}

/// The 2-layer Llama fixture with its copies folded, its head in 2 and in 4 chunks (in 4 also
/// with its weight gradient summed in place by `FusedConv`): the
/// vocabulary projection, log-softmax, NLL and their gradients (12 nodes) written per
/// chunk; on ONNX Runtime the loss and every gradient equal the original's within
/// tolerances (the head's weight gradient not bit for bit: its rows are summed chunk by
/// chunk), the control is rejected, and the need is predicted to the byte.
#[test]
fn the_llama_head_in_chunks_runs_the_same_within_tolerances() {
    let g = fixture("llama_d0_makefx");
    let mut folded = g.clone();
    ckpt_passes::fold::fold(&g, "copies folded")
        .apply(&mut folded)
        .unwrap();
    let folded = typed(folded);
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("folded.onnx");
    write(&folded, &original);
    let mut measured = Vec::new();
    for (chunks, acc) in [
        (2, Accumulate::Gemm),
        (4, Accumulate::Gemm),
        (4, Accumulate::InPlace),
    ] {
        let head = chunk_loss_head(&folded, chunks, acc, "loss head in chunks").expect("a head");
        assert_eq!(
            (head.logits.as_str(), head.rows_per_chunk, head.region_nodes),
            ("mm_14", 64 / chunks, 12)
        );
        let mut c = folded.clone();
        head.patch.apply(&mut c).unwrap();
        let c = typed(c);
        let out = dir.path().join(format!("chunked{chunks}{acc:?}.onnx"));
        write(&c, &out);
        let v = validated(&original, &out);
        let val = &v["validation"];
        assert_eq!(val["passed"], true, "{val}");
        assert_eq!(val["control_rejected"], true, "{val}");
        let grad = val["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == "lm_head.weight_grad")
            .unwrap();
        assert_eq!(grad["bitwise_equal"], false, "{grad}");
        assert!(grad["max_rel_err"].as_f64().unwrap() < 1e-4, "{grad}");
        let m = &v["memory"]["rewritten"];
        assert_eq!(m["predicted_total_bytes"], m["measured_total_bytes"], "{m}");
        measured.push(m["measured_total_bytes"].as_u64().unwrap());
    }
    // In 4 chunks, one partial sum of the weight gradient (256 × 64 f32, 64 KiB) fewer.
    assert!(measured[2] < measured[1], "{measured:?}");
}

/// The HF GPT-2 (its `[D, V]` weight has as many rows as the logits: read whole, not sliced)
/// and the T5 fixtures, folded, their heads in 2 chunks: on ONNX Runtime every output equals
/// the original's within tolerances, the control is rejected, and the need is predicted to
/// the byte.
#[test]
fn gpt2_and_t5_heads_in_chunks_run_the_same_within_tolerances() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["hfgpt2_d0_aot", "t5_d0_makefx"] {
        let g = fixture(name);
        let mut folded = g.clone();
        ckpt_passes::fold::fold(&g, "copies folded")
            .apply(&mut folded)
            .unwrap();
        let folded = typed(folded);
        let original = dir.path().join(format!("{name}.onnx"));
        write(&folded, &original);
        let head =
            chunk_loss_head(&folded, 2, Accumulate::Gemm, "loss head in chunks").expect("a head");
        let mut c = folded.clone();
        head.patch.apply(&mut c).unwrap();
        let out = dir.path().join(format!("{name}.chunked.onnx"));
        write(&typed(c), &out);
        let v = validated(&original, &out);
        let val = &v["validation"];
        assert_eq!(val["passed"], true, "{name}: {val}");
        assert_eq!(val["control_rejected"], true, "{name}: {val}");
        let m = &v["memory"]["rewritten"];
        assert_eq!(
            m["predicted_total_bytes"], m["measured_total_bytes"],
            "{name}: {m}"
        );
    }
}

/// A graph that is only a loss head: `logits = x · Wᵀ` (64 rows, 256 classes), the
/// cross-entropy against a target distribution `t`, and the gradients of `W` and `x`. Its
/// logits-sized values are what the device holds.
fn head_only() -> Vec<u8> {
    let w: Vec<f32> = (0..256 * 16)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 200.0)
        .collect();
    ModelBuilder::new(17)
        .input("x", DType::F32, "64,16")
        .input("t", DType::F32, "64,256")
        .init_f32("W", &[256, 16], &w)
        .node_with("Gemm", &["x", "W"], &["logits"], vec![attr_i("transB", 1)])
        .node_with("LogSoftmax", &["logits"], &["lsm"], vec![attr_i("axis", 1)])
        .node("Mul", &["lsm", "t"], &["picked"])
        .node_with(
            "ReduceSum",
            &["picked"],
            &["s"],
            vec![attr_i("keepdims", 0)],
        )
        .node("Neg", &["s"], &["loss"])
        .node("Exp", &["lsm"], &["p"])
        .node("Sub", &["p", "t"], &["g"])
        .node_with("Gemm", &["g", "x"], &["W_grad"], vec![attr_i("transA", 1)])
        .node("MatMul", &["g", "W"], &["x_grad"])
        .output("loss", DType::F32, "")
        .output("W_grad", DType::F32, "256,16")
        .output("x_grad", DType::F32, "64,16")
        .bytes()
}

fn total(path: &std::path::Path) -> u64 {
    let o = run(&["inspect", path_str(path), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["ledger"]["total_bytes"].as_u64().unwrap()
}

/// The main job on `model` at `ceiling` with `--chunk-loss-head flag`, validated where on:
/// its exit code, receipt, and the receipt in Markdown with what it printed.
fn main_job(
    model: &std::path::Path,
    ceiling: &str,
    flag: &str,
) -> (Option<i32>, serde_json::Value, String) {
    let mut extra = vec!["--chunk-loss-head", flag];
    if flag == "on" {
        extra.extend(["--validate", "--runs", "1"]);
    }
    main_job_receipt(model, ceiling, &extra)
}

/// Where the head binds, the main job with `--chunk-loss-head on` writes it in chunks: at
/// 85% of the total, where recompute adds over a third of a step, at no added FLOPs; at 70%,
/// where nothing else fits, as the only plan. Each is validated on ONNX Runtime (predicted
/// equal to measured, the run capped at the ceiling, outputs within tolerances), and the
/// receipt says how many chunks, that the weight gradient is summed in place, and that the
/// head is not bitwise.
#[test]
fn the_main_job_chunks_a_head_that_binds_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("head.onnx");
    std::fs::write(&model, head_only()).unwrap();
    let before = total(&model);
    let (code, off, _) = main_job(&model, "85%", "off");
    assert_eq!(code, Some(0), "{off}");
    assert!(off["added_flops"].as_u64().unwrap() > 0, "{off}");
    let (code, off, _) = main_job(&model, "70%", "off");
    assert_eq!(code, Some(2), "{off}");
    for pct in [85, 70] {
        let (code, r, md) = main_job(&model, &format!("{pct}%"), "on");
        let label = format!("the chunked head at {pct}%");
        assert_eq!(code, Some(0), "{label}: {r}");
        assert_receipt_valid(&r, &label);
        assert_eq!(r["added_flops"], 0, "{label}");
        assert_eq!(r["solver"]["label"], "loss head in chunks only", "{label}");
        let h = &r["loss_head"];
        assert_eq!(h["logits"], "logits", "{label}: {h}");
        assert_eq!(h["bitwise"], false, "{label}: {h}");
        // Summed in place, one partial sum of `W_grad` live: 201,676 B, where the Gemm chain
        // needs 211,068 B.
        assert_eq!(h["summed_in_place"], true, "{label}: {h}");
        let chunks = h["chunks"].as_u64().unwrap();
        assert_eq!(
            chunks * h["rows_per_chunk"].as_u64().unwrap(),
            64,
            "{label}: {h}"
        );
        let after = r["predicted_peak_bytes"]["after"].as_u64().unwrap();
        assert!(after * 100 <= before * pct, "{label}: {before} -> {after}");
        let m = &r["memory"]["rewritten"];
        assert_eq!(
            m["measured_total_bytes"].as_u64(),
            Some(after),
            "{label}: {m}"
        );
        assert_eq!(m["runs_under_ceiling"], true, "{label}: {m}");
        assert_eq!(r["validation"]["passed"], true, "{label}");
        assert!(md.contains("- Loss head: `logits`"), "{md}");
        assert!(md.contains("loss head (`logits` and the 8 nodes"), "{md}");
        assert!(md.contains("not bit for bit"), "{md}");
        assert!(md.contains("its weight gradient summed in place"), "{md}");
    }
}

/// Under the CUDA provider the head weight's gradient is summed by the Gemm chain only: the
/// in-place `FusedConv` is the CPU provider's kernel (planned, not validated: no GPU here).
#[test]
fn under_cuda_the_head_is_summed_by_gemms() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("head.onnx");
    std::fs::write(&model, head_only()).unwrap();
    let (code, r, _) = main_job_receipt(
        &model,
        "85%",
        &["--chunk-loss-head", "on", "--provider", "cuda"],
    );
    assert_eq!(code, Some(0), "{r}");
    let h = &r["loss_head"];
    assert_eq!(h["summed_in_place"], false, "{h}");
    assert!(!r["patch"].as_str().unwrap().contains("FusedConv"), "{r}");
}

/// Heads the pass leaves as they are: one chunk, a row count the chunks do not divide, and
/// an opset below 13.
#[test]
fn heads_it_cannot_split_are_left() {
    let g = typed(
        ckpt_ir::import_bytes(head_only().into(), std::path::Path::new("head.onnx"), None).unwrap(),
    );
    assert!(chunk_loss_head(&g, 1, Accumulate::Gemm, "x").is_none());
    assert!(chunk_loss_head(&g, 3, Accumulate::Gemm, "x").is_none());
    let head = chunk_loss_head(&g, 8, Accumulate::Gemm, "x").expect("64 rows in 8 chunks");
    assert_eq!((head.rows_per_chunk, head.region_nodes), (8, 8));
    let mut old = head_only_model();
    old.opset_import[0].version = Some(12);
    let g12 = typed(
        ckpt_ir::import_bytes(
            ckpt_ir::Message::encode_to_vec(&old).into(),
            std::path::Path::new("head12.onnx"),
            None,
        )
        .unwrap(),
    );
    assert!(chunk_loss_head(&g12, 2, Accumulate::Gemm, "x").is_none());
}

fn head_only_model() -> ckpt_ir::onnx::ModelProto {
    ckpt_ir::Message::decode(head_only().as_slice()).unwrap()
}

/// Every fixture, as given and with its copies folded, in 2, 4 and 8 chunks, its weight
/// gradient summed by a `Gemm` chain and in place: the pass finds a head or leaves the graph,
/// never panics, and every patch it writes applies, verifies and analyses.
#[test]
fn every_fixture_is_chunked_or_left_and_every_patch_applies() {
    let mut chunked = Vec::new();
    for f in fixtures().into_iter().filter(|f| f.kind != "negative") {
        let Ok(g) = import_file(&f.path) else {
            continue;
        };
        let Ok((g, _)) = ckpt_planner::with_inferred_types(g) else {
            continue;
        };
        let mut folded = g.clone();
        ckpt_passes::fold::fold(&g, "copies folded")
            .apply(&mut folded)
            .unwrap();
        for (form, graph) in [("given", &g), ("folded", &typed(folded))] {
            for (chunks, acc) in [2, 4, 8]
                .into_iter()
                .flat_map(|k| [Accumulate::Gemm, Accumulate::InPlace].map(|a| (k, a)))
            {
                let Some(head) = chunk_loss_head(graph, chunks, acc, "loss head in chunks") else {
                    continue;
                };
                let mut c = graph.clone();
                let what = format!("{} {form} in {chunks}, {acc:?}", f.name);
                head.patch
                    .apply(&mut c)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                ckpt_planner::analyse(c, &ckpt_planner::AnalyseOptions::default())
                    .unwrap_or_else(|e| panic!("{what}: {e:?}\n{}", head.patch));
                chunked.push(format!("{} {form} {chunks} {acc:?}", f.name));
            }
        }
    }
    assert!(
        chunked
            .iter()
            .any(|c| c.starts_with("llama_d0_makefx folded") && c.ends_with("InPlace")),
        "{chunked:?}"
    );
    eprintln!("{chunked:?}");
}
