//! The receipt is a typed value with a checked-in JSON Schema: the schema file is what the
//! code generates, and receipts of every status validate against it.

mod common;

use common::*;

/// `docs/receipt.schema.json` is the schema of `ckpt_opt::receipt::Receipt`
/// (`UPDATE_SCHEMA=1 cargo test --test receipt_schema` rewrites it).
#[test]
fn checked_in_schema_is_the_generated_one() {
    let generated = ckpt_opt::receipt::schema_json();
    let path = root().join("docs/receipt.schema.json");
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/receipt.schema.json is stale: run UPDATE_SCHEMA=1 cargo test --test receipt_schema"
    );
}

/// Receipts of a refusal, a graph that already fits (validated) and a validated rewrite all
/// match the schema, and the schema rejects a receipt with a field of the wrong type.
#[test]
fn receipts_of_every_status_match_the_schema() {
    let model = root().join("tests/fixtures/gpt2_d0_aot.onnx");
    let m = path_str(&model);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let o = path_str(&out);
    let total = {
        let o = run(&["inspect", m, "--json"]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["ledger"]["total_bytes"].as_u64().unwrap()
    };
    for (ceiling, code, status) in [
        (1024u64, 2, "ceiling_cannot_be_met"),
        (total * 2, 0, "already_fits"),
        (total * 95 / 100, 0, "rewritten"),
    ] {
        let c = ceiling.to_string();
        let r = run(&[
            m,
            "--ceiling",
            &c,
            "-o",
            o,
            "--validate",
            "--json",
            "--runs",
            "1",
        ]);
        assert_eq!(r.status.code(), Some(code), "{status}: {}", stderr(&r));
        let v: serde_json::Value = serde_json::from_str(&stdout(&r)).unwrap();
        assert_eq!(v["status"], status);
        assert_receipt_valid(&v, status);
        assert!(v["command_line"].as_array().unwrap().len() >= 3);
        assert_eq!(
            v["profile"]["ckpt-opt.profile.arena_extend_strategy"],
            "kNextPowerOfTwo"
        );
        if status != "ceiling_cannot_be_met" {
            assert!(v["memory"]["passed"].as_bool().unwrap(), "{status}: {v}");
        }
        let mut broken = v.clone();
        broken["ceiling_bytes"] = serde_json::json!("69GiB");
        let schema = receipt_schema();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(
            !validator.is_valid(&broken),
            "{status}: a string ceiling passed"
        );
    }
}
