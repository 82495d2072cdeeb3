//! Progress on stderr for the stages that can take more than a second: import, analysis, the
//! plan search (trials, best simulated total), each validation run.
//!
//! Rules: progress is shown only when stderr is a terminal and `--quiet` was not given
//! ([`enable`]); it never goes to stdout, so `--json` and pipes stay clean. Library code
//! reports with [`stage`] and [`trials`], which do nothing until the binary enables progress;
//! validation's stages ([`ckpt_validate::progress::Stage`]) arrive through [`stage`] once it is
//! enabled.
//! One spinner line is redrawn in place and cleared when the job ends ([`finish`]).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);
/// The stage now running, kept whether or not progress is shown ([`current`]).
static CURRENT: Mutex<String> = Mutex::new(String::new());

/// Whether progress would be drawn: stderr is a terminal and not `quiet`.
pub fn wanted(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// Show progress from now on, if [`wanted`]. Returns whether it is shown.
pub fn enable(quiet: bool) -> bool {
    if !wanted(quiet) {
        return false;
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    if let Ok(mut b) = BAR.lock() {
        *b = Some(bar);
    }
    ckpt_validate::progress::report_to(|s| stage(s.to_string()));
    true
}

/// The stage now running, in words (`importing model.onnx`, `validation: running the
/// control`).
pub fn stage(what: impl Into<String>) {
    let what = what.into();
    if let Ok(b) = BAR.lock() {
        if let Some(bar) = b.as_ref() {
            bar.set_message(what.clone());
        }
    }
    if let Ok(mut c) = CURRENT.lock() {
        *c = what;
    }
}

/// The last stage [`stage`] named (`starting` before the first).
pub fn current() -> String {
    match CURRENT.lock() {
        Ok(c) if !c.is_empty() => c.clone(),
        _ => "starting".to_string(),
    }
}

/// The plan search's progress: trials simulated, the best simulated device total so far.
pub fn trials(count: usize, best_total_bytes: u64) {
    if let Ok(b) = BAR.lock() {
        if let Some(bar) = b.as_ref() {
            bar.set_message(format!(
                "searching for a plan: {count} trials, best simulated total {}",
                crate::size::human(best_total_bytes)
            ));
        }
    }
}

/// Clear the progress line (before the job's own output, and at exit).
pub fn finish() {
    if let Ok(mut b) = BAR.lock() {
        if let Some(bar) = b.take() {
            bar.finish_and_clear();
        }
    }
}
