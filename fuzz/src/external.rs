//! The sampled outputs judged by the tools that load them: `onnx.checker.check_model(
//! full_check=True)` and an ONNX Runtime `InferenceSession`, run in one batch by
//! `fuzz/check_outputs.py` through a Python that has `onnx` and `onnxruntime`. Each output
//! is judged beside its input, so that a refusal the input already earns is told apart.

use std::path::Path;
use std::process::Command;

/// One sampled output's verdicts (`true`: accepted), and the first refusal's message.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub exec: u64,
    pub checker: bool,
    pub ort: bool,
    pub input_checker: bool,
    pub input_ort: bool,
    pub why: String,
}

/// The batch's verdicts, counted.
#[derive(Clone, Debug, Default)]
pub struct Verdicts {
    pub all: Vec<Verdict>,
}

impl Verdicts {
    pub fn checked(&self) -> usize {
        self.all.len()
    }

    /// Outputs ONNX's checker refuses, and of those, how many have an input it refuses too.
    pub fn checker_refused(&self) -> (usize, usize) {
        let refused = self.all.iter().filter(|v| !v.checker);
        let n = refused.clone().count();
        (n, refused.filter(|v| !v.input_checker).count())
    }

    /// Outputs ONNX Runtime refuses, and of those, how many have an input it refuses too.
    pub fn ort_refused(&self) -> (usize, usize) {
        let refused = self.all.iter().filter(|v| !v.ort);
        let n = refused.clone().count();
        (n, refused.filter(|v| !v.input_ort).count())
    }
}

/// Run `fuzz/check_outputs.py` with `python` over the samples in `dir`.
pub fn judge_samples(python: &Path, dir: &Path) -> std::io::Result<Verdicts> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("check_outputs.py");
    let out = Command::new(python).arg(&script).arg(dir).output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{} {} failed: {}",
            python.display(),
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let mut all = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.splitn(6, '\t').collect();
        let [exec, checker, ort, input_checker, input_ort, why] = f[..] else {
            continue;
        };
        all.push(Verdict {
            exec: exec.parse().unwrap_or(u64::MAX),
            checker: checker == "1",
            ort: ort == "1",
            input_checker: input_checker == "1",
            input_ort: input_ort == "1",
            why: why.to_string(),
        });
    }
    Ok(Verdicts { all })
}
