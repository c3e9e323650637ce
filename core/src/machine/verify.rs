//! The verification gate: when the model answers, the workflow, not the model, runs
//! the run's checks (`RunSpec.verify`) in the final workspace.
//!
//! The answer waits in [`Phase::Verifying`] while [`Step::Verify`] runs the commands one at a
//! time (activity `run_verification`), in order, stopping at the first failure. All pass: the
//! run completes with the evidence in `RunResult.verification`. One fails: the model gets the
//! failure (command, exit code, the end of its output) as a synthetic user turn and may go
//! on; after `verify_attempts` rounds ([`DEFAULT_VERIFY_ATTEMPTS`]) the run ends
//! `verification_failed` and delivery is refused (the change set is still collected).

use baton_proto::{
    RunSpec, TerminationReason, Verification, VerificationStarted, VerifyRequest, run_event,
};
use serde::{Deserialize, Serialize};

use super::{Phase, RunState, Step};
use crate::error::StateError;

/// Verification rounds a run gets when its spec says 0.
pub const DEFAULT_VERIFY_ATTEMPTS: u32 = 2;
/// Most verification commands one run may have.
pub const MAX_VERIFY_COMMANDS: usize = 32;
/// Most verification rounds one run may ask for.
pub const MAX_VERIFY_ATTEMPTS: u32 = 10;
/// Longest verification command line, in bytes.
pub const MAX_VERIFY_COMMAND_BYTES: usize = 4096;

/// Where the run's verification stands (carried across continue-as-new).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VerifyState {
    /// Rounds started so far.
    #[serde(default)]
    pub rounds: u32,
    /// The current (or last) round's results, in command order.
    #[serde(default)]
    pub results: Vec<Verification>,
    /// Commands of the current round whose `verification_started` event is out.
    #[serde(default)]
    pub started: usize,
    /// The last round passed.
    #[serde(default)]
    pub passed: bool,
}

/// Checks the spec's verification commands.
pub(super) fn validate(spec: &RunSpec) -> Result<(), StateError> {
    let bad = |detail: String| Err(StateError::InvalidVerify { detail });
    if spec.verify.len() > MAX_VERIFY_COMMANDS {
        return bad(format!(
            "{} commands; a run may have at most {MAX_VERIFY_COMMANDS} (join related checks \
             with && in one command)",
            spec.verify.len()
        ));
    }
    if let Some(i) = spec.verify.iter().position(|c| c.trim().is_empty()) {
        return bad(format!(
            "command {} is empty; pass the command line to run, e.g. --verify 'cargo test'",
            i + 1
        ));
    }
    if let Some(c) = spec
        .verify
        .iter()
        .find(|c| c.len() > MAX_VERIFY_COMMAND_BYTES)
    {
        return bad(format!(
            "a command is {} bytes long, over {MAX_VERIFY_COMMAND_BYTES}; put it in a script \
             in the repository and run that",
            c.len()
        ));
    }
    if spec.verify_attempts > MAX_VERIFY_ATTEMPTS {
        return bad(format!(
            "--verify-attempts {} is over {MAX_VERIFY_ATTEMPTS}",
            spec.verify_attempts
        ));
    }
    Ok(())
}

impl RunState {
    /// The commands the run's answers are verified with.
    pub fn verify_commands(&self) -> &[String] {
        match self.environment() {
            Some(env) if self.spec.verify.is_empty() => &env.verify,
            _ => &self.spec.verify,
        }
    }

    /// Rounds the run gets before it ends `verification_failed`.
    pub fn verify_attempts(&self) -> u32 {
        let from_env = self.environment().map_or(0, |e| e.verify_attempts);
        match (self.spec.verify_attempts, from_env) {
            (0, 0) => DEFAULT_VERIFY_ATTEMPTS,
            (0, n) | (n, _) => n,
        }
    }

    /// Whether the run's verification passed, or it has none (delivery may go ahead).
    pub(super) fn verification_allows_delivery(&self) -> Option<String> {
        if self.verify_commands().is_empty() || self.verify.passed {
            return None;
        }
        let why = match self.verify.results.iter().find(|v| !passed(v)) {
            Some(v) => format!("`{}` {}", v.command, v.status),
            None => "it did not run".to_owned(),
        };
        Some(format!(
            "not delivered: the run's verification did not pass ({why})"
        ))
    }

    /// The model answered and the answer is otherwise acceptable: verify it, or complete.
    pub(super) fn answered(&mut self, now_ms: i64, answer: String, output: String) {
        if self.verify_commands().is_empty() {
            self.complete(answer, output);
            return;
        }
        self.verify.rounds += 1;
        self.verify.results.clear();
        self.verify.started = 0;
        self.verify.passed = false;
        let n = self.verify_commands().len();
        self.note(
            now_ms,
            &format!(
                "verifying the answer: {n} command{} (round {} of {})",
                if n == 1 { "" } else { "s" },
                self.verify.rounds,
                self.verify_attempts()
            ),
        );
        self.phase = Phase::Verifying { answer, output };
    }

    /// The next verification command of the round (`verification_started` told once).
    pub(super) fn verify_step(&mut self, now_ms: i64) -> Step {
        let index = self.verify.results.len();
        let command = self.verify_commands()[index].clone();
        let of = self.verify_commands().len();
        let round = self.verify.rounds;
        if self.verify.started <= index {
            self.verify.started = index + 1;
            self.push_event(
                now_ms,
                run_event::Kind::VerificationStarted(VerificationStarted {
                    command: command.clone(),
                    round,
                    index: u32::try_from(index + 1).unwrap_or(u32::MAX),
                    of: u32::try_from(of).unwrap_or(u32::MAX),
                }),
            );
        }
        let snapshot = self
            .workspace_snapshot
            .clone()
            .or_else(|| self.outputs.start.as_ref().map(|s| s.snapshot.clone()))
            .unwrap_or_default();
        Step::Verify(VerifyRequest {
            command,
            snapshot,
            timeout_seconds: self.limits().tool_timeout_seconds,
            sandbox: self.spec.sandbox.clone(),
            round,
            index: u32::try_from(index + 1).unwrap_or(u32::MAX),
        })
    }

    /// A verification command ran.
    pub(crate) fn on_verified(&mut self, mut verification: Verification, now_ms: i64) {
        let Phase::Verifying { answer, output } = &self.phase else {
            self.ignored(now_ms, "verification result", "verifying");
            return;
        };
        let (answer, output) = (answer.clone(), output.clone());
        verification.round = self.verify.rounds;
        self.push_event(
            now_ms,
            run_event::Kind::VerificationFinished(verification.clone()),
        );
        let ok = passed(&verification);
        self.verify.results.push(verification.clone());
        if ok {
            if self.verify.results.len() < self.verify_commands().len() {
                return;
            }
            self.verify.passed = true;
            self.note(now_ms, "verification passed");
            self.complete(answer, output);
            return;
        }
        let (round, attempts) = (self.verify.rounds, self.verify_attempts());
        if round >= attempts {
            let detail = format!(
                "verification failed in round {round} of {attempts}: `{}` {}",
                verification.command, verification.status
            );
            self.finish(now_ms, TerminationReason::VerificationFailed, detail);
            return;
        }
        self.note(
            now_ms,
            &format!(
                "verification failed (round {round} of {attempts}): `{}` {}; the model is told",
                verification.command, verification.status
            ),
        );
        let text = failure_turn(&verification, round, attempts, self.verify_commands());
        self.conversation.push(super::user(&text, true));
        self.phase = Phase::Thinking;
    }

    /// The verification activity failed for good (the workspace could not be restored, the
    /// host cannot sandbox): the answer cannot be verified, so the run ends
    /// `verification_failed`.
    pub(crate) fn on_verify_failed(&mut self, detail: &str, now_ms: i64) {
        if !matches!(self.phase, Phase::Verifying { .. }) {
            self.ignored(now_ms, "verification failure", "verifying");
            return;
        }
        self.finish(
            now_ms,
            TerminationReason::VerificationFailed,
            format!("the answer could not be verified: {detail}"),
        );
    }
}

/// Whether a command passed.
fn passed(v: &Verification) -> bool {
    v.exit_code == 0 && !v.timed_out
}

/// What the model is told when a round fails.
fn failure_turn(v: &Verification, round: u32, attempts: u32, commands: &[String]) -> String {
    let seconds = v.duration_ms as f64 / 1000.0;
    let listed = commands
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let left = attempts - round;
    format!(
        "[baton: verification failed] Your answer was checked by running the run's \
         verification commands in the workspace ({listed}). `{}` {} after {seconds:.1} s \
         (round {round} of {attempts}). The end of its output:\n```\n{}\n```\nFix the cause in \
         the workspace, then give your final answer again; the commands run again then \
         ({left} more round{} before the run fails).",
        v.command,
        v.status,
        v.output_tail.trim_end(),
        if left == 1 { "" } else { "s" },
    )
}
