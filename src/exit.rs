//! The exit codes of `ckpt-opt`, and the error that carries one ([`Failure`]).
//!
//! Rules:
//! - Every error a command returns says its code where it is detected: bad input or usage
//!   ([`Failure::input`]: a flag, a file that cannot be read or written, a model the import or
//!   the analysis refuses), a ceiling that cannot be met, a validation that failed or could
//!   not run, or an internal error ([`Failure::internal`]: a bug, such as a rewrite of ours
//!   that does not verify or a receipt that does not serialize).
//! - No error converts into a `Failure` by itself: a `?` on an error without its code does
//!   not compile. Errors that mix the input's faults and ours (the planner's, the reports')
//!   are sorted by their causes ([`Failure::planning`]).
//! - An internal error is none of the documented outcomes 0-4: it exits [`INTERNAL`] (70,
//!   `EX_SOFTWARE` of `sysexits.h`) and its message says it is one.

use ckpt_planner::PlanError;

/// Success.
pub const SUCCESS: u8 = 0;
/// Bad input or usage: a flag, a model file, a `--dim` binding, a file to read or write.
pub const BAD_INPUT: u8 = 1;
/// The ceiling cannot be met (the diagnosis is printed and written to the receipt).
pub const CANNOT_FIT: u8 = 2;
/// Validation failed: outputs differ, the broken control was not rejected, or memory failed
/// its check.
pub const VALIDATION_FAILED: u8 = 3;
/// Could not validate: no ONNX Runtime, or one without the model's training ops or the
/// profile's provider.
pub const COULD_NOT_VALIDATE: u8 = 4;
/// An internal error: a bug in ckpt-opt, not a fault of the input (`EX_SOFTWARE`).
pub const INTERNAL: u8 = 70;

/// An error with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// Bad input or usage (exit [`BAD_INPUT`]).
    pub fn input(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: BAD_INPUT,
            error: error.into(),
        }
    }

    /// A bug: an invariant of ours broken (exit [`INTERNAL`]).
    pub fn internal(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: INTERNAL,
            error: error.into(),
        }
    }

    /// Validation (or a measurement) could not run: [`COULD_NOT_VALIDATE`] when no usable
    /// ONNX Runtime was found, or it lacks the training ops or the CUDA provider the run
    /// needs; else as [`Failure::planning`] sorts it.
    pub fn could_not_validate(error: impl Into<anyhow::Error>) -> Failure {
        use ckpt_runtime::RuntimeError as R;
        let error = error.into();
        let missing = error.chain().any(|c| {
            let runtime = c.downcast_ref::<R>().or_else(|| {
                c.downcast_ref::<ckpt_validate::ValidateError>()
                    .and_then(ckpt_validate::ValidateError::runtime)
            });
            matches!(
                runtime,
                Some(
                    R::OrtNotFound { .. }
                        | R::OrtPathMissing { .. }
                        | R::MissingTrainingOps { .. }
                        | R::CudaUnavailable { .. }
                        | R::TrainingRuntime { .. }
                )
            )
        });
        if missing {
            Failure {
                code: COULD_NOT_VALIDATE,
                error,
            }
        } else {
            Failure::planning(error)
        }
    }

    /// An error of analysing or planning a model (the planner's, the reports'): internal when
    /// one of its causes is ours (a patch that did not apply or verify, a solver problem we
    /// built wrong, an oracle asked about a set of the wrong length); else bad input (shape
    /// inference, declared shapes, phases, a graph that cannot be ordered or simulated).
    pub fn planning(error: impl Into<anyhow::Error>) -> Failure {
        let error = error.into();
        if is_internal(&error) {
            Failure::internal(error)
        } else {
            Failure::input(error)
        }
    }

    /// Whether this is an internal error.
    pub fn is_internal(&self) -> bool {
        self.code == INTERNAL
    }
}

/// Whether a cause of `e` is an internal error (see [`Failure::planning`]).
fn is_internal(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<PlanError>(),
            Some(
                PlanError::Patch(_)
                    | PlanError::Solve(_)
                    | PlanError::SetLength { .. }
                    | PlanError::ReadBack(_)
            )
        ) || c.downcast_ref::<ckpt_ir::PatchError>().is_some()
            || c.downcast_ref::<ckpt_ir::VerifyError>().is_some()
    })
}

/// An error and its causes joined by `: `, each cause once: a message that already holds
/// its cause's text (`cannot write x: No space left on device`, with the OS error as its
/// source; `x is not a valid ONNX model (protobuf decoding failed: ...); is the file
/// truncated ...?`) does not repeat it.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if text.is_empty() {
            text = c;
        } else if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    /// A rewrite of ours that broke the graph, as the planner reports it.
    fn broken_rewrite() -> PlanError {
        PlanError::Patch(ckpt_ir::PatchError::Verify {
            label: "recompute".into(),
            source: ckpt_ir::VerifyError::Cycle,
        })
    }

    #[test]
    fn internal_errors_are_not_bad_input() {
        let internal = [
            anyhow::Error::new(PlanError::SetLength {
                expected: 3,
                got: 2,
            }),
            anyhow::Error::new(broken_rewrite()).context("planning"),
            anyhow::Error::new(ckpt_ir::VerifyError::Cycle).context("the rewrite"),
            anyhow::Error::new(PlanError::Solve(ckpt_solver::SolveError::InvalidProblem {
                candidate: 0,
                label: "x".into(),
                reason: "negative bytes".into(),
            }))
            .context("planning"),
        ];
        for e in internal {
            let f = Failure::planning(e);
            assert_eq!(f.code, INTERNAL, "{:#}", f.error);
            assert!(f.is_internal());
        }
        assert!(!(SUCCESS..=COULD_NOT_VALIDATE).contains(&INTERNAL));
        let input = [
            anyhow::Error::new(PlanError::DeclaredShape {
                tensor: "t".into(),
                declared: "[2]".into(),
                inferred: "[3]".into(),
            }),
            anyhow::anyhow!("importing m.onnx"),
        ];
        for e in input {
            let f = Failure::planning(e);
            assert_eq!(f.code, BAD_INPUT, "{:#}", f.error);
        }
        let missing = anyhow::Error::new(ckpt_runtime::RuntimeError::OrtNotFound {
            searched: vec![".venv".into()],
        })
        .context("loading ONNX Runtime");
        assert_eq!(
            Failure::could_not_validate(missing).code,
            COULD_NOT_VALIDATE
        );
        let ours = Err::<(), _>(broken_rewrite())
            .context("the rewrite")
            .map_err(Failure::could_not_validate);
        assert_eq!(ours.map_err(|f| f.code), Err(INTERNAL));
    }
}
