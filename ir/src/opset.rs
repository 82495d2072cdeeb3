//! The opset imports a model may declare: each version at least 1, and for a domain ONNX
//! Runtime implements, no newer than the newest version it loads. The IR version and the
//! imports must agree: `opset_import` exists from IR version 3 on.

use std::path::Path;

use crate::error::ImportError;
use crate::graph::normalise_domain;
use crate::onnx;

/// Domains whose opset versions are known: (normalised domain, newest version ONNX Runtime
/// 1.31 loads). Newer versions are refused at load by ORT ("under development").
pub const KNOWN_OPSETS: &[(&str, i64)] = &[
    ("ai.onnx", 26),
    ("ai.onnx.ml", 5),
    ("ai.onnx.training", 1),
    ("ai.onnx.preview.training", 1),
    ("com.microsoft", 1),
    ("com.microsoft.nchwc", 1),
    ("com.microsoft.experimental", 1),
    ("org.pytorch.aten", 1),
];

/// The first IR version with `opset_import`.
const FIRST_IR_WITH_OPSETS: i64 = 3;

/// The newest version of `domain` this build knows, if it knows the domain.
pub fn newest_opset(domain: &str) -> Option<i64> {
    let d = normalise_domain(domain);
    KNOWN_OPSETS
        .iter()
        .find(|(k, _)| *k == d)
        .map(|&(_, newest)| newest)
}

/// Refuse opset imports outside the known ranges, a domain imported twice, an IR version
/// below 1, and opset imports in a model whose IR version predates them.
pub fn check_opset_imports(model: &onnx::ModelProto, path: &Path) -> Result<(), ImportError> {
    let ir = model.ir_version.unwrap_or(0);
    if ir < 1 {
        return Err(ImportError::IrVersionInvalid {
            path: path.to_path_buf(),
            found: ir,
        });
    }
    if ir < FIRST_IR_WITH_OPSETS && !model.opset_import.is_empty() {
        return Err(ImportError::OpsetsBeforeIr3 {
            path: path.to_path_buf(),
            ir,
        });
    }
    let mut seen: Vec<String> = Vec::with_capacity(model.opset_import.len());
    for o in &model.opset_import {
        let domain = normalise_domain(o.domain.as_deref().unwrap_or(""));
        let version = o.version.unwrap_or(0);
        let newest = newest_opset(&domain);
        if version < 1 || newest.is_some_and(|n| version > n) {
            return Err(ImportError::OpsetOutOfRange {
                path: path.to_path_buf(),
                domain,
                version,
                known: match newest {
                    Some(n) => format!("1..={n}"),
                    None => "1 or newer".to_string(),
                },
            });
        }
        if seen.contains(&domain) {
            return Err(ImportError::OpsetTwice {
                path: path.to_path_buf(),
                domain,
            });
        }
        seen.push(domain);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(ir: i64, opsets: &[(&str, i64)]) -> onnx::ModelProto {
        onnx::ModelProto {
            ir_version: Some(ir),
            opset_import: opsets
                .iter()
                .map(|&(d, v)| onnx::OperatorSetIdProto {
                    domain: Some(d.into()),
                    version: Some(v),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn check(ir: i64, opsets: &[(&str, i64)]) -> Result<(), String> {
        check_opset_imports(&model(ir, opsets), Path::new("m.onnx")).map_err(|e| e.to_string())
    }

    #[test]
    fn versions_in_range_are_accepted() {
        assert_eq!(
            check(10, &[("", 1), ("ai.onnx.ml", 5), ("com.microsoft", 1)]),
            Ok(())
        );
        assert_eq!(check(10, &[("", 26), ("my.custom", 7)]), Ok(()));
        assert_eq!(check(2, &[]), Ok(()));
    }

    #[test]
    fn versions_outside_the_registry_are_refused_naming_domain_and_version() {
        for (domain, v) in [
            ("", 0),
            ("", -1),
            ("", i64::MAX),
            ("", 27),
            ("com.microsoft", 2),
        ] {
            let e = check(10, &[(domain, v)]).unwrap_err();
            let shown = normalise_domain(domain);
            assert!(e.contains(&format!("`{shown}` version {v}")), "{e}");
        }
        let e = check(10, &[("my.custom", 0)]).unwrap_err();
        assert!(
            e.contains("`my.custom` version 0") && e.contains("1 or newer"),
            "{e}"
        );
    }

    #[test]
    fn ir_version_and_imports_must_agree() {
        let e = check(1, &[("", 13)]).unwrap_err();
        assert!(
            e.contains("IR version 1") && e.contains("opset_import"),
            "{e}"
        );
        let e = check(0, &[("", 13)]).unwrap_err();
        assert!(e.contains("ir_version 0"), "{e}");
        let e = check(10, &[("", 13), ("ai.onnx", 14)]).unwrap_err();
        assert!(e.contains("`ai.onnx`") && e.contains("twice"), "{e}");
    }
}
