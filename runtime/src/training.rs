//! ORT training artifacts on the runtime that has their ops: `generate_artifacts`' `training_model.onnx`
//! (`InPlaceAccumulatorV2`, `GeluGrad`, …) runs only on onnxruntime-training [`TRAINING_ORT_VERSION`], whose C API
//! is older than the one this crate binds, so it is driven through its Python package: `scripts/ort_training/
//! runner.py` (embedded here), one long-lived `runner.py serve` process per [`TrainingRunner`], every trial in a
//! forked child with a fresh environment arena.
//!
//! Rules:
//! - the venv is [`VENV_ENV`] if set, else `.venv-fixtures/ort` of the workspace this crate was built in; it is
//!   created with `python3 -m venv` (or [`PYTHON_ENV`]) and `scripts/ort_training/requirements.txt` installed into
//!   it, unless its stamp matches that file or `scripts/fixtures/requirements-ort.txt` (the fixtures' venv, a
//!   superset); [`DISABLE_ENV`]`=off` turns the training runtime off;
//! - a trial with an arena registers ORT's CPU arena on the environment (`create_and_register_allocator` with the
//!   [`Arena`]'s `OrtArenaCfg`, `session.use_env_allocators=1`), capped with `max_mem`;
//! - that Python API has no allocator statistics, so a need is found by bisection alone: `load_bytes`, the smallest
//!   cap loading alone runs in, then the smallest `arena_bytes` such that every step runs under the cap
//!   `load_bytes + arena_bytes` (with an arena whose first region is the cap, that region is `arena_bytes`), the
//!   same split [`crate::measure_need`] makes with `TotalAllocated` after load.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::error::{Result, RuntimeError};
use crate::model::Model;
use crate::session::{Arena, OptLevel, SessionConfig};
use crate::tensor::HostTensor;

/// The ONNX Runtime version of the training runtime.
pub use ckpt_ir::ort::TRAINING_ORT_VERSION;

/// Environment variable naming the training runtime's venv.
pub const VENV_ENV: &str = "CKPT_OPT_ORT_TRAINING_VENV";
/// Environment variable naming the Python (3.8–3.12) that creates the venv.
pub const PYTHON_ENV: &str = "CKPT_OPT_ORT_TRAINING_PYTHON";
/// Environment variable that turns the training runtime off (`off`).
pub const DISABLE_ENV: &str = "CKPT_OPT_ORT_TRAINING";

const RUNNER: &str = include_str!("../../scripts/ort_training/runner.py");
const REQUIREMENTS: &str = include_str!("../../scripts/ort_training/requirements.txt");
const FIXTURE_REQUIREMENTS: &str = include_str!("../../scripts/fixtures/requirements-ort.txt");

/// A ready training runtime: its venv's Python and the runner written beside it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TrainingRuntime {
    pub venv: PathBuf,
    pub python: PathBuf,
    pub runner: PathBuf,
}

/// The venv the training runtime uses ([`VENV_ENV`], else the workspace's `.venv-fixtures/ort`).
pub fn training_venv() -> PathBuf {
    match std::env::var_os(VENV_ENV).filter(|v| !v.is_empty()) {
        Some(v) => PathBuf::from(v),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new("."))
            .join(".venv-fixtures")
            .join("ort"),
    }
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

static READY: Mutex<Option<TrainingRuntime>> = Mutex::new(None);

/// Whether `venv` holds the training runtime these requirements (or the fixtures') install:
/// its Python and a matching stamp.
fn stamped(venv: &Path) -> bool {
    let stamp = std::fs::read_to_string(venv.join(".requirements.sha256"));
    venv.join("bin").join("python").is_file()
        && stamp.is_ok_and(|s| {
            let s = s.trim();
            s == sha256_hex(REQUIREMENTS) || s == sha256_hex(FIXTURE_REQUIREMENTS)
        })
}

/// Whether [`DISABLE_ENV`] turns the training runtime off.
fn turned_off() -> bool {
    std::env::var(DISABLE_ENV).is_ok_and(|v| v == "off")
}

/// Whether [`training_runtime`] is ready without installing anything: not turned off
/// ([`DISABLE_ENV`]) and its venv installed.
pub fn is_installed() -> bool {
    !turned_off() && stamped(&training_venv())
}

/// The training runtime, its venv created and installed first when its stamp does not match (minutes, needs
/// PyPI; progress goes to stderr). Serialized within the process.
pub fn training_runtime() -> Result<TrainingRuntime> {
    let mut ready = READY.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = ready.as_ref() {
        return Ok(rt.clone());
    }
    let venv = training_venv();
    let fail = |message: String| RuntimeError::TrainingRuntime {
        venv: venv.clone(),
        message,
    };
    if turned_off() {
        return Err(fail(format!("turned off ({DISABLE_ENV}=off)")));
    }
    let python = venv.join("bin").join("python");
    let stamp = venv.join(".requirements.sha256");
    if !stamped(&venv) {
        install(&venv, &python, &stamp).map_err(fail)?;
    }
    let runner = venv.join("ckpt-opt-runner.py");
    if std::fs::read_to_string(&runner).ok().as_deref() != Some(RUNNER) {
        std::fs::write(&runner, RUNNER)
            .map_err(|e| fail(format!("writing {}: {e}", runner.display())))?;
    }
    let rt = TrainingRuntime {
        venv: venv.clone(),
        python,
        runner,
    };
    *ready = Some(rt.clone());
    Ok(rt)
}

fn install(venv: &Path, python: &Path, stamp: &Path) -> std::result::Result<(), String> {
    let run = |cmd: &mut Command, what: &str| -> std::result::Result<(), String> {
        let out = cmd
            .output()
            .map_err(|e| format!("{what}: could not start: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            Err(format!(
                "{what} failed ({}): {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ))
        }
    };
    if !python.is_file() {
        let base = std::env::var(PYTHON_ENV).unwrap_or_else(|_| "python3".to_string());
        eprintln!(
            "ckpt-opt: creating the training runtime's venv {} ({base} -m venv)",
            venv.display()
        );
        if let Some(parent) = venv.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        run(
            Command::new(&base).arg("-m").arg("venv").arg(venv),
            &format!("`{base} -m venv {}`", venv.display()),
        )?;
    }
    let req = venv.join("ckpt-opt-requirements.txt");
    std::fs::write(&req, REQUIREMENTS).map_err(|e| format!("writing {}: {e}", req.display()))?;
    eprintln!(
        "ckpt-opt: installing onnxruntime-training-cpu=={TRAINING_ORT_VERSION} into {}",
        venv.display()
    );
    run(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&req),
        &format!(
            "pip install -r {} (needs PyPI; Python 3.8-3.12)",
            req.display()
        ),
    )?;
    std::fs::write(stamp, sha256_hex(REQUIREMENTS))
        .map_err(|e| format!("writing {}: {e}", stamp.display()))
}

/// One trial's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    /// False when an allocation failed under the cap.
    pub ran: bool,
    /// Where it failed, as ORT said.
    pub out_of_memory: Option<String>,
    /// The first step's outputs, when asked for.
    pub outputs: Vec<HostTensor>,
    /// Wall time of each step, in milliseconds.
    pub step_ms: Vec<f64>,
}

/// The measured device need of several steps on the training runtime.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrainingNeed {
    /// The smallest cap (to 256 B) under which loading alone runs.
    pub load_bytes: u64,
    /// The smallest arena (to 256 B) above `load_bytes` under which every step runs.
    pub arena_bytes: u64,
    /// Step times of the first run that fitted, in milliseconds.
    pub step_ms: Vec<f64>,
    /// Trials it took.
    pub trials: usize,
}

/// A model and its inputs written where the runner reads them.
#[derive(Debug)]
pub struct Staged {
    label: String,
    model: PathBuf,
    inputs: BTreeMap<String, PathBuf>,
    outputs_dir: PathBuf,
    updated_inputs: Vec<String>,
}

static STAGE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A running `runner.py serve` and the directory its files live in (removed on drop).
pub struct TrainingRunner {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    dir: PathBuf,
    /// The version the runner's onnxruntime reports.
    pub ort_version: String,
    pub runtime: TrainingRuntime,
}

impl TrainingRunner {
    /// Starts a runner on the training runtime (making it ready first: [`training_runtime`]).
    pub fn start() -> Result<TrainingRunner> {
        let runtime = training_runtime()?;
        let fail = |message: String| RuntimeError::TrainingRuntime {
            venv: runtime.venv.clone(),
            message,
        };
        let dir = std::env::temp_dir().join(format!(
            "ckpt-opt-training-{}-{}",
            std::process::id(),
            STAGE_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| fail(format!("creating {}: {e}", dir.display())))?;
        let mut child = Command::new(&runtime.python)
            .arg(&runtime.runner)
            .arg("serve")
            .env("OMP_NUM_THREADS", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| fail(format!("starting {}: {e}", runtime.python.display())))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| fail("no stdout".into()))?,
        );
        let mut runner = TrainingRunner {
            child,
            stdin,
            stdout,
            dir,
            ort_version: String::new(),
            runtime: runtime.clone(),
        };
        let hello = runner.read_reply()?;
        runner.ort_version = hello["ort_version"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if runner.ort_version != TRAINING_ORT_VERSION {
            return Err(fail(format!(
                "its onnxruntime is {}, not {TRAINING_ORT_VERSION}",
                runner.ort_version
            )));
        }
        Ok(runner)
    }

    fn read_reply(&mut self) -> Result<serde_json::Value> {
        let mut line = String::new();
        let fail = |message: String| RuntimeError::TrainingRuntime {
            venv: self.runtime.venv.clone(),
            message,
        };
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(|e| fail(format!("reading the runner: {e}")))?;
        if n == 0 {
            return Err(fail(
                "the runner exited (is onnxruntime-training installed in the venv?)".into(),
            ));
        }
        serde_json::from_str(&line)
            .map_err(|e| fail(format!("the runner said `{}`: {e}", line.trim())))
    }

    /// Write `model` and `inputs` into the runner's directory. `updated_inputs` are the inputs the model writes
    /// in place (gradient accumulation buffers): a run's outputs end with their values after the first step, named
    /// `<input> (after the step)`.
    pub fn stage(
        &mut self,
        model: Model<'_>,
        inputs: &[HostTensor],
        updated_inputs: &[String],
    ) -> Result<Staged> {
        let n = STAGE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("m{n}"));
        let io = |path: &Path, source: std::io::Error| RuntimeError::Io {
            path: path.to_path_buf(),
            source,
        };
        let outputs_dir = dir.join("out");
        std::fs::create_dir_all(&outputs_dir).map_err(|e| io(&outputs_dir, e))?;
        let model_path = dir.join("model.onnx");
        std::fs::write(&model_path, model.bytes).map_err(|e| io(&model_path, e))?;
        let mut paths = BTreeMap::new();
        for (i, t) in inputs.iter().enumerate() {
            let p = dir.join(format!("in{i}.npy"));
            crate::npy::write_npy(&p, t)?;
            paths.insert(t.name.clone(), p);
        }
        Ok(Staged {
            label: model.label.to_string(),
            model: model_path,
            inputs: paths,
            outputs_dir,
            updated_inputs: updated_inputs.to_vec(),
        })
    }

    /// Run `steps` steps of one fresh session (0: load only) under `cfg`, with the arena capped at `cap` when
    /// given (`cfg.arena` must then be an environment arena); with `outputs`, return the first step's outputs.
    pub fn trial(
        &mut self,
        staged: &Staged,
        cfg: &SessionConfig,
        steps: usize,
        hold_outputs: bool,
        cap: Option<u64>,
        outputs: bool,
    ) -> Result<Trial> {
        let request = request(staged, cfg, steps, hold_outputs, cap, outputs)?;
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| RuntimeError::TrainingRuntime {
                venv: self.runtime.venv.clone(),
                message: "the runner's stdin is closed".into(),
            })?;
        writeln!(stdin, "{request}")
            .and_then(|_| stdin.flush())
            .map_err(|e| RuntimeError::TrainingRuntime {
                venv: self.runtime.venv.clone(),
                message: format!("writing to the runner: {e}"),
            })?;
        let reply = self.read_reply()?;
        if reply["ok"] != serde_json::Value::Bool(true) {
            return Err(RuntimeError::Run {
                model: staged.label.clone(),
                message: format!(
                    "onnxruntime-training {}: {}",
                    self.ort_version,
                    reply["error"].as_str().unwrap_or("(no message)")
                ),
            });
        }
        let mut outs = Vec::new();
        for o in reply["outputs"].as_array().into_iter().flatten() {
            let (Some(name), Some(path)) = (o[0].as_str(), o[1].as_str()) else {
                continue;
            };
            outs.push(crate::npy::read_npy(Path::new(path), name, None)?);
        }
        Ok(Trial {
            ran: reply["ran"] == serde_json::Value::Bool(true),
            out_of_memory: reply["out_of_memory"].as_str().map(str::to_string),
            outputs: outs,
            step_ms: reply["step_ms"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_f64())
                .collect(),
        })
    }

    /// One step's outputs on a fresh session (no arena cap).
    pub fn run(&mut self, staged: &Staged, cfg: &SessionConfig) -> Result<Vec<HostTensor>> {
        let cfg = SessionConfig {
            arena: Arena::Session,
            arena_limit: None,
            ..cfg.clone()
        };
        Ok(self.trial(staged, &cfg, 1, false, None, true)?.outputs)
    }

    /// Whether every step runs with the arena capped at `load_bytes + arena_bytes`.
    pub fn runs_under(
        &mut self,
        staged: &Staged,
        cfg: &SessionConfig,
        steps: usize,
        hold_outputs: bool,
        load_bytes: u64,
        arena_bytes: u64,
    ) -> Result<bool> {
        let cfg = with_first_region(cfg, arena_bytes);
        Ok(self
            .trial(
                staged,
                &cfg,
                steps,
                hold_outputs,
                Some(load_bytes + arena_bytes),
                false,
            )?
            .ran)
    }

    /// The smallest `load_bytes`, then the smallest `arena_bytes` (both to 256 B, by bisection) under which
    /// `steps` steps run. `hint` (a predicted arena need) brackets the second search when given.
    pub fn measure_need(
        &mut self,
        staged: &Staged,
        cfg: &SessionConfig,
        steps: usize,
        hold_outputs: bool,
        hint: Option<u64>,
    ) -> Result<TrainingNeed> {
        if cfg.arena == Arena::Session {
            return Err(RuntimeError::SessionCreate {
                model: staged.label.clone(),
                message: "measuring a need needs a configured CPU arena (exact or BFC)".into(),
            });
        }
        let mut trials = 0;
        let load_bytes = smallest(None, &mut trials, |cap, _| {
            let c = with_first_region(cfg, cap);
            Ok(self.trial(staged, &c, 0, false, Some(cap), false)?.ran)
        })?;
        let mut step_ms = Vec::new();
        let arena_bytes = smallest(hint, &mut trials, |x, _| {
            let c = with_first_region(cfg, x);
            let t = self.trial(staged, &c, steps, hold_outputs, Some(load_bytes + x), false)?;
            if t.ran && step_ms.is_empty() {
                step_ms = t.step_ms;
            }
            Ok(t.ran)
        })?;
        Ok(TrainingNeed {
            load_bytes,
            arena_bytes,
            step_ms,
            trials,
        })
    }
}

impl Drop for TrainingRunner {
    fn drop(&mut self) {
        // Closing stdin ends `serve`.
        self.stdin.take();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An arena whose first region is the cap gets `first_region` as its initial chunk.
fn with_first_region(cfg: &SessionConfig, first_region: u64) -> SessionConfig {
    let arena = match cfg.arena {
        Arena::Bfc {
            power_of_two,
            initial_chunk_is_cap: true,
            ..
        } => Arena::Bfc {
            power_of_two,
            initial_chunk: Some(first_region.max(crate::ALIGN_BYTES)),
            initial_chunk_is_cap: true,
        },
        other => other,
    };
    SessionConfig {
        arena,
        ..cfg.clone()
    }
}

/// The smallest multiple of 256 for which `fits` holds, assuming it is monotone: bracketed around `hint`
/// (±1%, widening) when given, else doubling from 64 KiB; then bisected.
fn smallest(
    hint: Option<u64>,
    trials: &mut usize,
    mut fits: impl FnMut(u64, usize) -> Result<bool>,
) -> Result<u64> {
    let align = crate::ALIGN_BYTES;
    let round = |b: u64| b.div_ceil(align).max(1) * align;
    let mut probe = |b: u64, trials: &mut usize| -> Result<bool> {
        *trials += 1;
        fits(b, *trials)
    };
    let start = round(hint.unwrap_or(64 << 10));
    let step0 = round(hint.map_or(align, |h| h / 100));
    let (mut lo, mut hi);
    if probe(start, trials)? {
        hi = start;
        let mut step = step0;
        loop {
            let below = hi.saturating_sub(step);
            if below < align {
                lo = 0;
                break;
            }
            if probe(below, trials)? {
                hi = below;
                step *= 2;
            } else {
                lo = below;
                break;
            }
        }
    } else {
        lo = start;
        let mut step = step0.max(start);
        loop {
            let above = lo + step;
            if probe(above, trials)? {
                hi = above;
                break;
            }
            lo = above;
            step *= 2;
            if lo > (1u64 << 44) {
                return Err(RuntimeError::Run {
                    model: String::new(),
                    message: "no cap up to 16 TiB fits".into(),
                });
            }
        }
    }
    while hi - lo > align {
        let mid = (lo + (hi - lo) / 2) / align * align;
        let mid = mid.max(lo + align);
        if probe(mid, trials)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

fn request(
    staged: &Staged,
    cfg: &SessionConfig,
    steps: usize,
    hold_outputs: bool,
    cap: Option<u64>,
    outputs: bool,
) -> Result<serde_json::Value> {
    let mut entries: BTreeMap<String, String> = cfg.config_entries.iter().cloned().collect();
    if cfg.disable_cse {
        entries
            .entry(ckpt_ir::ort::DISABLE_OPTIMIZERS_KEY.to_string())
            .or_insert_with(|| ckpt_ir::ort::CSE_OPTIMIZER.to_string());
    }
    let arena = match cfg.arena {
        Arena::Session => {
            if cap.is_some() {
                return Err(RuntimeError::SessionCreate {
                    model: staged.label.clone(),
                    message: "a capped run needs a configured CPU arena (exact or BFC)".into(),
                });
            }
            serde_json::Value::Null
        }
        Arena::Exact => serde_json::json!({
            "arena_extend_strategy": 1, "max_dead_bytes_per_chunk": 256,
            "initial_chunk_size_bytes": 256, "max_mem": cap,
        }),
        Arena::Bfc {
            power_of_two,
            initial_chunk,
            ..
        } => serde_json::json!({
            "arena_extend_strategy": u8::from(!power_of_two),
            "initial_chunk_size_bytes": initial_chunk, "max_mem": cap,
        }),
    };
    Ok(serde_json::json!({
        "model": staged.model,
        "inputs": staged.inputs,
        "outputs_dir": outputs.then_some(&staged.outputs_dir),
        "opt_level": match cfg.opt_level {
            OptLevel::Disable => "disable",
            OptLevel::Basic => "basic",
            OptLevel::Extended => "extended",
            OptLevel::All => "all",
        },
        "memory_pattern": cfg.memory_pattern,
        "intra_op_num_threads": cfg.intra_threads,
        "config_entries": entries.into_iter().collect::<Vec<_>>(),
        "arena": arena,
        "steps": steps,
        "hold_outputs": hold_outputs,
        "bind_outputs": cfg.bind_outputs,
        "updated_inputs": staged.updated_inputs,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_finds_the_threshold_from_either_side() {
        for (hint, threshold) in [
            (None, 100_000u64),
            (Some(90_000), 100_000),
            (Some(200_000), 100_000),
            (Some(100_000), 300),
        ] {
            let mut trials = 0;
            let found = smallest(hint, &mut trials, |b, _| Ok(b >= threshold)).unwrap();
            assert_eq!(found, threshold.div_ceil(256) * 256, "hint {hint:?}");
        }
    }
}
