//! Paired comparison of two runs' outputs, matched by name.
//!
//! An element passes when `|cand - ref| <= atol + rtol * |ref|` (numpy's `allclose`), NaN matches NaN and an
//! infinity matches the same infinity. Integers and bools must be equal. A missing output or a dtype or shape
//! mismatch fails with a message.

use std::collections::BTreeMap;

use crate::tensor::{DType, HostTensor};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tol {
    pub rtol: f64,
    pub atol: f64,
}

impl Tol {
    pub const EXACT: Tol = Tol {
        rtol: 0.0,
        atol: 0.0,
    };
}

/// Tolerances per float dtype, and per output by name (which wins).
///
/// Defaults: recomputation runs the same kernels on the same values, so outputs are usually bit-identical; ORT
/// may still pick a different kernel or thread split for a changed graph, which reorders float sums. f32 allows
/// that (rtol 1e-4 ≈ 800 ulp, atol 1e-6 for values near zero); f64 scales the same margin to its precision
/// (1e-9 / 1e-12); f16 (eps 9.8e-4) and bf16 (eps 7.8e-3) allow a few ulp of their own precision (1e-2/1e-3 and
/// 5e-2/1e-2). Integers and bools are compared exactly.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tolerances {
    pub f32: Tol,
    pub f64: Tol,
    pub f16: Tol,
    pub bf16: Tol,
    pub per_output: BTreeMap<String, Tol>,
}

impl Default for Tolerances {
    fn default() -> Tolerances {
        Tolerances {
            f32: Tol {
                rtol: 1e-4,
                atol: 1e-6,
            },
            f64: Tol {
                rtol: 1e-9,
                atol: 1e-12,
            },
            f16: Tol {
                rtol: 1e-2,
                atol: 1e-3,
            },
            bf16: Tol {
                rtol: 5e-2,
                atol: 1e-2,
            },
            per_output: BTreeMap::new(),
        }
    }
}

impl Tolerances {
    pub fn for_output(&self, name: &str, dtype: DType) -> Tol {
        if let Some(t) = self.per_output.get(name) {
            return *t;
        }
        match dtype {
            DType::F32 => self.f32,
            DType::F64 => self.f64,
            DType::F16 => self.f16,
            DType::BF16 => self.bf16,
            _ => Tol::EXACT,
        }
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OutputComparison {
    pub name: String,
    pub max_abs_err: f64,
    /// Largest `|cand - ref| / |ref|` over elements with `ref != 0` (elements at zero are judged by `atol`).
    pub max_rel_err: f64,
    pub bitwise_equal: bool,
    pub passed: bool,
    pub rtol: f64,
    pub atol: f64,
    /// Elements outside tolerance.
    pub mismatches: usize,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Comparison {
    pub passed: bool,
    pub outputs: Vec<OutputComparison>,
    /// Candidate outputs the reference does not have (reported, not failed).
    pub extra_outputs: Vec<String>,
}

/// Compares every reference output with the candidate output of the same name.
pub fn compare(reference: &[HostTensor], candidate: &[HostTensor], tol: &Tolerances) -> Comparison {
    let outputs: Vec<OutputComparison> = reference
        .iter()
        .map(|r| match candidate.iter().find(|c| c.name == r.name) {
            Some(c) => compare_one(r, c, tol.for_output(&r.name, r.dtype)),
            None => failed(
                &r.name,
                tol.for_output(&r.name, r.dtype),
                "missing from the candidate's outputs".into(),
            ),
        })
        .collect();
    let extra_outputs = candidate
        .iter()
        .filter(|c| !reference.iter().any(|r| r.name == c.name))
        .map(|c| c.name.clone())
        .collect();
    Comparison {
        passed: outputs.iter().all(|o| o.passed),
        outputs,
        extra_outputs,
    }
}

fn failed(name: &str, tol: Tol, message: String) -> OutputComparison {
    OutputComparison {
        name: name.to_string(),
        max_abs_err: f64::INFINITY,
        max_rel_err: f64::INFINITY,
        bitwise_equal: false,
        passed: false,
        rtol: tol.rtol,
        atol: tol.atol,
        mismatches: 0,
        message: Some(message),
    }
}

fn compare_one(r: &HostTensor, c: &HostTensor, tol: Tol) -> OutputComparison {
    if r.dtype != c.dtype {
        return failed(
            &r.name,
            tol,
            format!(
                "dtype differs: reference {}, candidate {}",
                r.dtype, c.dtype
            ),
        );
    }
    if r.shape != c.shape {
        return failed(
            &r.name,
            tol,
            format!(
                "shape differs: reference {:?}, candidate {:?}",
                r.shape, c.shape
            ),
        );
    }
    let mut max_abs = 0.0f64;
    let mut max_rel = 0.0f64;
    let mut mismatches = 0usize;
    let mut first_bad: Option<(usize, f64, f64)> = None;
    for i in 0..r.len() {
        let (a, b) = (r.get_f64(i), c.get_f64(i));
        let ok = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if a.is_infinite() || b.is_infinite() {
            a == b
        } else {
            let diff = (a - b).abs();
            max_abs = max_abs.max(diff);
            if a != 0.0 {
                max_rel = max_rel.max(diff / a.abs());
            }
            diff <= tol.atol + tol.rtol * a.abs()
        };
        if !ok {
            if a.is_nan() != b.is_nan() || a.is_infinite() || b.is_infinite() {
                max_abs = f64::INFINITY;
                max_rel = f64::INFINITY;
            }
            mismatches += 1;
            first_bad.get_or_insert((i, a, b));
        }
    }
    let message = first_bad.map(|(i, a, b)| {
        format!(
            "{mismatches} of {} elements outside rtol {} atol {}; first at flat index {i}: reference {a}, candidate {b}",
            r.len(),
            tol.rtol,
            tol.atol
        )
    });
    OutputComparison {
        name: r.name.clone(),
        max_abs_err: max_abs,
        max_rel_err: max_rel,
        bitwise_equal: r.data == c.data,
        passed: mismatches == 0,
        rtol: tol.rtol,
        atol: tol.atol,
        mismatches,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, v: &[f32]) -> HostTensor {
        HostTensor::from_values(name, vec![v.len()], v).unwrap()
    }

    #[test]
    fn equal_close_and_far() {
        let tol = Tolerances::default();
        let same = compare(&[t("y", &[1.0, 0.0])], &[t("y", &[1.0, 0.0])], &tol);
        assert!(same.passed && same.outputs[0].bitwise_equal);
        let close = compare(&[t("y", &[1.0, 0.0])], &[t("y", &[1.00001, 5e-7])], &tol);
        assert!(close.passed && !close.outputs[0].bitwise_equal);
        assert!((close.outputs[0].max_rel_err - 1e-5).abs() < 1e-6);
        let far = compare(
            &[t("y", &[1.0, f32::NAN])],
            &[t("y", &[1.001, f32::NAN])],
            &tol,
        );
        assert!(!far.passed);
        assert_eq!(far.outputs[0].mismatches, 1);
        assert!(far.outputs[0]
            .message
            .as_deref()
            .unwrap()
            .contains("flat index 0"));
    }

    #[test]
    fn missing_and_mismatched_outputs_fail_with_a_message() {
        let tol = Tolerances::default();
        let missing = compare(&[t("y", &[1.0])], &[t("z", &[1.0])], &tol);
        assert!(!missing.passed);
        assert_eq!(missing.extra_outputs, vec!["z".to_string()]);
        assert!(missing.outputs[0]
            .message
            .as_deref()
            .unwrap()
            .contains("missing"));
        let shape = compare(&[t("y", &[1.0])], &[t("y", &[1.0, 2.0])], &tol);
        assert!(shape.outputs[0]
            .message
            .as_deref()
            .unwrap()
            .contains("shape differs"));
        let ints = HostTensor::from_values("y", vec![1], &[1i64]).unwrap();
        let dtype = compare(&[t("y", &[1.0])], std::slice::from_ref(&ints), &tol);
        assert!(dtype.outputs[0]
            .message
            .as_deref()
            .unwrap()
            .contains("dtype differs"));
        let off_by_one = HostTensor::from_values("y", vec![1], &[2i64]).unwrap();
        assert!(!compare(&[ints], &[off_by_one], &tol).passed);
    }

    #[test]
    fn serializes_the_keys_the_cli_emits() {
        let c = compare(&[t("y", &[1.0])], &[t("y", &[1.0])], &Tolerances::default());
        let json = serde_json::to_value(&c.outputs[0]).unwrap();
        for key in [
            "name",
            "max_abs_err",
            "max_rel_err",
            "bitwise_equal",
            "passed",
        ] {
            assert!(json.get(key).is_some(), "{key} in {json}");
        }
    }
}
