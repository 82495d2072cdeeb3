//! End to end on every standard fixture at ceilings of 95%, 90% and 75% of the
//! original predicted device total under the default deployment profile: a plan is either
//! rewritten and proven on ONNX Runtime (same losses and gradients bit for bit, control
//! rejected, three steps run in an arena capped at the ceiling, measured device total under
//! the ceiling and lower than the original's, predictions within 1%) or refused with exit 2
//! and a lowest reachable total above the ceiling.

mod common;

use common::*;

#[test]
fn every_std_fixture_at_three_ceilings() {
    let mut rewritten = 0;
    let mut refused = 0;
    let mut exact = 0;
    for f in std_fixtures() {
        let o = run(&["inspect", path_str(&f.path), "--json"]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let total = v["ledger"]["total_bytes"].as_u64().unwrap();
        for pct in [95u64, 90, 75] {
            let ceiling = total * pct / 100;
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("out.onnx");
            let c = ceiling.to_string();
            let o = run(&[
                path_str(&f.path),
                "--ceiling",
                &c,
                "-o",
                path_str(&out),
                "--validate",
                "--json",
                "--runs",
                "1",
                // A safety stop, not a bound: the plan is the one the search's counts find,
                // on a loaded machine too.
                "--time-limit",
                "120",
                "--int-range",
                "attention_mask=1:2",
            ]);
            let label = format!("{} at {pct}% ({ceiling} B)", f.name);
            let r: serde_json::Value = serde_json::from_str(&stdout(&o))
                .unwrap_or_else(|e| panic!("{label}: {e}: {}", stderr(&o)));
            match o.status.code() {
                Some(0) => {
                    rewritten += 1;
                    let after = r["predicted_peak_bytes"]["after"].as_u64().unwrap();
                    assert!(after <= ceiling, "{label}: predicted {after}");
                    let (mb, ma, predicted) = assert_validated_rewrite(&r, &label);
                    if predicted == ma {
                        exact += 1;
                    }
                    eprintln!("{label}: rewritten, predicted device total {predicted}, measured {ma} (was {mb}), original under the ceiling's arena: {}, +{:.2}% FLOPs", r["memory"]["original"]["runs_under_ceiling"], r["added_flops_percent"].as_f64().unwrap());
                }
                Some(2) => {
                    refused += 1;
                    let lowest = r["lowest_reachable_total_bytes"].as_u64().unwrap();
                    eprintln!("{label}: refused, lowest reachable {lowest}");
                    assert!(lowest > ceiling, "{label}: refused although {lowest} fits");
                    assert_receipt_valid(&r, &label);
                    assert!(
                        stderr(&o).contains("lowest device total found"),
                        "{label}: {}",
                        stderr(&o)
                    );
                }
                other => panic!("{label}: exit {other:?}: {}", stderr(&o)),
            }
        }
    }
    eprintln!("rewritten {rewritten} ({exact} predicted to the byte), refused {refused}");
    assert!(
        rewritten >= 2,
        "no fixture could be rewritten at any ceiling"
    );
    assert_eq!(exact, rewritten, "every rewrite is predicted to the byte");
}
