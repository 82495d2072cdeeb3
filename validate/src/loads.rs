//! Whether ONNX Runtime loads a model: a session created from its bytes and dropped, with its
//! external data resolved against its folder. A graph with ORT training ops loads on the
//! training runtime ([`crate::training::needs_training_runtime`]) when that runtime is
//! installed; nothing is installed for this check.
//!
//! A runtime that cannot be found is not a failure of the model: the check says it did not
//! run, and why ([`LoadCheck::NotRun`]). Neither is a load that outlasts its time: ONNX
//! Runtime's session creation cannot be interrupted, so it runs on a thread of its own, and
//! one still running when the time is up is left behind ([`load_abandoned`]: the process must
//! then end with `_exit`, not run the C++ libraries' static destructors under it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ckpt_ir::onnx;
use ckpt_ir::Message;
use ckpt_runtime::{Model, Provider, SessionConfig};
use serde::Serialize;

use crate::error::ValidateError;
use crate::training::needs_training_runtime;

/// What a load check found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum LoadCheck {
    /// A session of the model was created on this ONNX Runtime version.
    Loaded { ort_version: String },
    /// The check could not run (no runtime to load it on), and why.
    NotRun { reason: String },
}

static ABANDONED: AtomicBool = AtomicBool::new(false);

/// Load threads that have not ended, abandoned or not.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Whether a load was left running on its thread when its time was up.
pub fn load_abandoned() -> bool {
    ABANDONED.load(Ordering::SeqCst)
}

/// How many load threads are still running (an abandoned load ends on its own).
pub fn loads_running() -> usize {
    RUNNING.load(Ordering::SeqCst)
}

/// Load `model` (labelled `label`; its external data in `dir`) on ONNX Runtime (the library
/// `ort_lib`, else the one found as [`ckpt_runtime::init`] searches) under `cfg`, on the CPU
/// provider, for at most `within`. Errors only when a runtime was there and refused the model.
pub fn load_check(
    model: &onnx::ModelProto,
    label: &str,
    dir: Option<&Path>,
    cfg: &SessionConfig,
    ort_lib: Option<&Path>,
    within: Duration,
) -> Result<LoadCheck, ValidateError> {
    let cfg = SessionConfig {
        provider: Provider::Cpu,
        ..cfg.clone()
    };
    let bytes = model.encode_to_vec();
    if needs_training_runtime(model) {
        return load_on_training_runtime(model, label, &bytes, &cfg);
    }
    let info = match ckpt_runtime::init(ort_lib) {
        Ok(info) => info,
        Err(e) => {
            return Ok(LoadCheck::NotRun {
                reason: format!("no ONNX Runtime to load it on: {}", error_chain(&e)),
            })
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (owned_label, owned_dir): (String, Option<PathBuf>) =
        (label.to_string(), dir.map(Path::to_path_buf));
    RUNNING.fetch_add(1, Ordering::SeqCst);
    std::thread::spawn(move || {
        let m = Model::new(&owned_label, &bytes).in_dir(owned_dir.as_deref());
        let _ = tx.send(ckpt_runtime::load(m, &cfg));
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    });
    let loaded = match rx.recv_timeout(within) {
        Ok(loaded) => loaded,
        Err(_) => {
            ABANDONED.store(true, Ordering::SeqCst);
            return Ok(LoadCheck::NotRun {
                reason: format!(
                    "ONNX Runtime {} had not loaded it when the run's time ran out ({:.1} s)",
                    info.version,
                    within.as_secs_f64()
                ),
            });
        }
    };
    loaded.map_err(|source| ValidateError::Load {
        label: label.to_string(),
        runtime: info.version.clone(),
        source,
    })?;
    Ok(LoadCheck::Loaded {
        ort_version: info.version.clone(),
    })
}

/// [`load_check`] for a graph with ORT training ops: a load-only trial on the training runtime,
/// when it is installed and the model has no external data (the runner loads a copy of the
/// model from its own folder).
fn load_on_training_runtime(
    model: &onnx::ModelProto,
    label: &str,
    bytes: &[u8],
    cfg: &SessionConfig,
) -> Result<LoadCheck, ValidateError> {
    use ckpt_runtime::training::{is_installed, TrainingRunner, TRAINING_ORT_VERSION};
    if !is_installed() {
        return Ok(LoadCheck::NotRun {
            reason: format!(
                "its ORT training ops load on onnxruntime-training {TRAINING_ORT_VERSION}, which is not installed"
            ),
        });
    }
    if !ckpt_ir::external_data_files(model, Path::new(".")).is_empty() {
        return Ok(LoadCheck::NotRun {
            reason: "the training runtime loads a copy of the model, where external data does not resolve"
                .into(),
        });
    }
    let mut runner = TrainingRunner::start().map_err(ValidateError::StartTraining)?;
    let refused = |source| ValidateError::Load {
        label: label.to_string(),
        runtime: format!("training {TRAINING_ORT_VERSION}"),
        source,
    };
    let staged = runner
        .stage(Model::new(label, bytes), &[], &[])
        .map_err(refused)?;
    runner
        .trial(&staged, cfg, 0, false, None, false)
        .map_err(refused)?;
    Ok(LoadCheck::Loaded {
        ort_version: TRAINING_ORT_VERSION.to_string(),
    })
}

/// `e` and its sources, joined by `: `.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckpt_ir::build::ModelBuilder;
    use ckpt_ir::DType;

    fn check(m: &onnx::ModelProto) -> Result<LoadCheck, ValidateError> {
        load_check(
            m,
            "m.onnx",
            None,
            &SessionConfig::default(),
            None,
            Duration::from_secs(60),
        )
    }

    #[test]
    fn a_model_ort_loads_is_loaded_on_its_version() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, "2")
            .node("Neg", &["x"], &["y"])
            .output("y", DType::F32, "2")
            .build();
        let version = ckpt_runtime::init(None).unwrap().version.clone();
        assert_eq!(
            check(&m).unwrap(),
            LoadCheck::Loaded {
                ort_version: version
            }
        );
    }

    #[test]
    fn a_model_ort_refuses_is_an_error_naming_it_and_the_runtime() {
        let m = ModelBuilder::new(17)
            .opset("com.microsoft", 1)
            .input("x", DType::F32, "2")
            .node_in("com.microsoft", "NoSuchKernel", &["x"], &["y"], vec![])
            .output("y", DType::F32, "2")
            .build();
        let e = check(&m).unwrap_err();
        assert!(matches!(e, ValidateError::Load { .. }), "{e:?}");
        assert!(e.to_string().contains("m.onnx"), "{e}");
        assert!(
            error_chain(&e).contains("NoSuchKernel"),
            "{}",
            error_chain(&e)
        );
    }

    #[test]
    fn a_library_that_is_not_there_means_the_check_did_not_run() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, "2")
            .node("Neg", &["x"], &["y"])
            .output("y", DType::F32, "2")
            .build();
        let lib = Path::new("/nonexistent/libonnxruntime.so");
        let (cfg, within) = (SessionConfig::default(), Duration::from_secs(60));
        match load_check(&m, "m.onnx", None, &cfg, Some(lib), within) {
            // Also when an earlier test of this process loaded ORT: asking for another
            // library is refused the same way, naming it.
            Ok(LoadCheck::NotRun { reason }) => {
                assert!(reason.contains("/nonexistent"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// A load still running when its time is up is left behind: the check says it did not
    /// run, naming the time, and the process knows to end with `_exit`.
    #[test]
    fn a_load_that_outlasts_its_time_did_not_run() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, "2")
            .node("Neg", &["x"], &["y"])
            .output("y", DType::F32, "2")
            .build();
        let cfg = SessionConfig::default();
        match load_check(&m, "m.onnx", None, &cfg, None, Duration::ZERO).unwrap() {
            LoadCheck::NotRun { reason } => {
                assert!(reason.contains("time ran out (0.0 s)"), "{reason}");
                assert!(load_abandoned());
            }
            other => panic!("{other:?}"),
        }
        // The test process returns normally, not by `_exit`: ONNX Runtime's static state must
        // not be torn down under the abandoned load (cpuinfo aborts the process).
        let started = std::time::Instant::now();
        while loads_running() > 0 && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(loads_running(), 0, "the abandoned load did not end in 60 s");
    }

    /// A graph with ORT training ops loads on the training runtime when it is installed, and
    /// the check says it did not run when it is not.
    #[test]
    fn a_training_graph_loads_on_the_training_runtime() {
        let m = ModelBuilder::new(17)
            .opset("com.microsoft", 1)
            .input("buf", DType::F32, "2")
            .input("g", DType::F32, "2")
            .node_in(
                "com.microsoft",
                "InPlaceAccumulatorV2",
                &["buf", "g"],
                &["done", "buf_out"],
                vec![],
            )
            .output("done", DType::Bool, "1")
            .output("buf_out", DType::F32, "2")
            .build();
        match check(&m).unwrap() {
            LoadCheck::Loaded { ort_version } => {
                assert!(ckpt_runtime::training::is_installed());
                assert_eq!(ort_version, ckpt_ir::ort::TRAINING_ORT_VERSION);
            }
            LoadCheck::NotRun { reason } => {
                assert!(!ckpt_runtime::training::is_installed(), "{reason}");
                assert!(reason.contains("not installed"), "{reason}");
            }
        }
    }
}
