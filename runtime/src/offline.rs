//! ORT's offline mode: the graph ORT will really run, as ORT writes it (`optimized_model_filepath`).
//!
//! At levels basic, extended and all it is the fused and reordered graph ORT would execute for `cfg.provider`;
//! that graph, loaded at level `disable`, runs as the optimized session would. At level `disable` it is the input
//! graph unchanged: ORT 1.31.1 writes value_info only for the tensors the file declared, not the shapes it infers
//! at load, so it does not reveal ORT's own view of shapes.

use crate::error::{Result, RuntimeError};
use crate::model::Model;
use crate::session::{create_session_saving, SessionConfig};

/// The model as ORT saves it after optimizing it under `cfg` (level, provider, disabled optimizers, config
/// entries). The bytes are a complete ONNX model with every initializer inline.
pub fn optimize_offline<'a>(model: impl Into<Model<'a>>, cfg: &SessionConfig) -> Result<Vec<u8>> {
    let model = model.into();
    let dir = std::env::temp_dir().join(format!(
        "ckpt-opt-offline-{}-{}",
        std::process::id(),
        unique()
    ));
    let fail = |message: String| RuntimeError::SessionCreate {
        model: model.label.to_string(),
        message,
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("optimized.onnx");
    let result = create_session_saving(model, cfg, Some(&path)).and_then(|session| {
        drop(session);
        std::fs::read(&path).map_err(|e| {
            fail(format!(
                "ORT did not write its optimized model to {}: {e}",
                path.display()
            ))
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
