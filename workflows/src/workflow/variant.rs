//! A test-only switch that makes this build's workflow code differ from every recorded one: a
//! worker (or `baton replay-check`) started with `BATON_TEST_WORKFLOW_VARIANT=extra-step`
//! starts each run segment with a 1 ms timer. It stands in for "build B" in the fleet-upgrade
//! tests (pinned runs stay on their build, `replay-check` reports the runs B cannot replay)
//! without compiling a second binary. It is set once at process start, before any workflow
//! runs, so each process replays deterministically; it is never on in production.

use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable the worker and the CLI read at start-up.
pub const VARIANT_ENV: &str = "BATON_TEST_WORKFLOW_VARIANT";

/// Its one accepted value.
pub const EXTRA_STEP: &str = "extra-step";

static EXTRA: AtomicBool = AtomicBool::new(false);

/// Turns the variant on for this process when `value` (the variable's value) asks for it;
/// any other non-empty value is an error naming the accepted one.
pub fn set_from(value: Option<&str>) -> Result<bool, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(false),
        Some(EXTRA_STEP) => {
            EXTRA.store(true, Ordering::SeqCst);
            Ok(true)
        }
        Some(other) => Err(format!(
            "{VARIANT_ENV}={other:?} is not a test variant; the only one is {EXTRA_STEP:?} \
             (unset it outside tests)"
        )),
    }
}

/// Whether this process runs the extra step.
pub(crate) fn extra_step() -> bool {
    EXTRA.load(Ordering::SeqCst)
}
