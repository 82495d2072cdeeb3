//! The hard end of `--time-limit`. The search, the probes and the load check stop at the limit
//! by themselves; import, the analyses, the rewrite and the write are not interruptible. A
//! [`Watchdog`] armed at the start of the run ends the process when the run is still short of
//! its output at the limit plus its slack ([`slack`]): it removes every temporary file staged
//! so far, says which stage the time ran out in, and exits [`CANNOT_FIT`](crate::exit::CANNOT_FIT)
//! with nothing written. Disarmed, it never fires; disarming and firing exclude each other, so
//! a run that disarms it before publishing is never cut off while publishing.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What the run may take past `--time-limit`: 10% of it, and at least 2 s.
pub fn slack(limit: Duration) -> Duration {
    (limit / 10).max(Duration::from_secs(2))
}

/// The share of the time limit the searches leave for the work after the plan (the rewrite
/// analysed and verified, the output written, read back and checked, the load check): twice
/// what import and analysis took, `before_plan`, and at most half the limit.
pub fn tail_reserve(before_plan: Duration, limit: Duration) -> Duration {
    before_plan.saturating_mul(2).min(limit / 2)
}

/// What the watchdog keeps back from the slack for ending the process.
const MARGIN: Duration = Duration::from_millis(400);

/// Armed until [`Watchdog::disarm`] or drop.
pub struct Watchdog {
    armed: Arc<(Mutex<bool>, Condvar)>,
}

impl Watchdog {
    /// Arm: at `t0 + limit + slack(limit)`, less a margin to exit in, the process ends unless
    /// disarmed before.
    pub fn arm(t0: Instant, limit: Duration) -> Watchdog {
        let armed = Arc::new((Mutex::new(true), Condvar::new()));
        let at = t0 + limit + slack(limit).saturating_sub(MARGIN);
        let shared = Arc::clone(&armed);
        let spawned = std::thread::Builder::new()
            .name("time-limit".into())
            .spawn(move || watch(&shared, at, limit));
        if spawned.is_err() {
            // Without a thread the limit is the cooperative one only.
            *armed.0.lock().unwrap_or_else(|e| e.into_inner()) = false;
        }
        Watchdog { armed }
    }

    /// Disarm: the run goes on to its end, whatever the time.
    pub fn disarm(self) {}
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, cv) = &*self.armed;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = false;
        cv.notify_all();
    }
}

/// Wait until `at`; still armed then, end the process (holding the lock, so a disarm that
/// comes later waits for the end).
fn watch(armed: &(Mutex<bool>, Condvar), at: Instant, limit: Duration) {
    let (lock, cv) = armed;
    let mut on = lock.lock().unwrap_or_else(|e| e.into_inner());
    while *on {
        let now = Instant::now();
        if now >= at {
            break;
        }
        on = cv
            .wait_timeout(on, at - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    if !*on {
        return;
    }
    ckpt_ir::remove_temp_files();
    crate::progress::finish();
    eprintln!(
        "error: the time limit of {} s ran out while {}, before the output was written; nothing was written (that stage cannot stop early: raise --time-limit)",
        limit.as_secs_f64(),
        crate::progress::current(),
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: `_exit` only ends the process; nothing runs after it.
    unsafe { libc::_exit(i32::from(crate::exit::CANNOT_FIT)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_twice_the_analysis_and_at_most_half_the_limit() {
        let s = Duration::from_secs;
        assert_eq!(tail_reserve(s(1), s(10)), s(2));
        assert_eq!(tail_reserve(s(4), s(10)), s(5));
    }

    #[test]
    fn the_slack_is_a_tenth_and_at_least_two_seconds() {
        assert_eq!(slack(Duration::from_secs(5)), Duration::from_secs(2));
        assert_eq!(slack(Duration::from_secs(100)), Duration::from_secs(10));
    }

    /// Disarmed before its time, the watchdog's thread ends without ending the process.
    #[test]
    fn a_disarmed_watchdog_does_not_fire() {
        let w = Watchdog::arm(Instant::now(), Duration::from_millis(1));
        w.disarm();
        std::thread::sleep(Duration::from_millis(50));
    }
}
