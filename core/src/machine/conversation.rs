//! Conversations (`RunSpec.idle_timeout_seconds`): a run that answered its task stays open
//! ([`Step::AwaitMessage`], status `IDLE`) for the next message, which becomes its next task;
//! the idle timeout, the run's deadline or a cancel end it with the last task's result.
//! Messages may carry an id; an id already taken changes nothing, so a redelivered webhook
//! or a retried send is taken once. The id of the run's own task (`RunSpec.task_message_id`)
//! is taken when its message first comes (update-with-start sends the task as the update
//! too), and a duplicate after that. Each task hands back its own change set, delivered on top of the last one (the
//! same branch gets one more commit).
//!
//! `max_turns` counts the turns of the current task; tokens, cost and the deadline count the
//! whole run.

use baton_proto::{Changes, Delivered, SendOutcome, TerminationReason};
use serde::{Deserialize, Serialize};

use super::{Phase, RunState, Step, outputs::WorkspaceStart};

/// Message ids a run remembers (the newest), for duplicates.
pub const MAX_MESSAGE_IDS: usize = 512;

/// Where a conversation is.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FollowUps {
    /// Tasks after the spec's (the current task is `1 + later_tasks`).
    #[serde(default)]
    pub later_tasks: u32,
    /// The turn count when the current task began (`max_turns` counts from here).
    #[serde(default)]
    pub task_turn: u32,
    /// The run answered and waits for a message.
    #[serde(default)]
    pub idle: bool,
    /// No message came in time (or the run was cancelled or passed its deadline while idle):
    /// the run ends with its last task's result.
    #[serde(default)]
    pub over: bool,
    /// Ids of the messages taken, the newest [`MAX_MESSAGE_IDS`].
    #[serde(default)]
    pub message_ids: Vec<String>,
    /// The message of `RunSpec.task_message_id` came (update-with-start's own update): the
    /// next one with that id is a duplicate.
    #[serde(default)]
    pub task_message_taken: bool,
}

impl RunState {
    /// Whether this run is a conversation.
    fn conversing(&self) -> bool {
        self.spec.idle_timeout_seconds > 0
    }

    /// Whether the run answered its task and may take another (not over yet).
    fn between_tasks(&self) -> bool {
        self.conversing()
            && !self.follow_ups.over
            && matches!(&self.phase, Phase::Finished(r) if r.reason() == TerminationReason::Completed)
    }

    /// Whether a message can still reach the model: the run is working, or it is a
    /// conversation between tasks.
    pub fn takes_messages(&self) -> bool {
        !matches!(self.phase, Phase::Finished(_)) || self.between_tasks()
    }

    /// The current task (1 = the spec's).
    pub fn task_number(&self) -> u32 {
        1 + self.follow_ups.later_tasks
    }

    /// Whether message `id` was taken already (the run's own task counts once it came).
    pub fn is_duplicate_message(&self, id: &str) -> bool {
        !id.is_empty()
            && ((id == self.spec.task_message_id && self.follow_ups.task_message_taken)
                || self.follow_ups.message_ids.iter().any(|seen| seen == id))
    }

    /// A message for the run (signal `message`, update `send`): queued for the next model
    /// call (or the next task, when the run is idle), unless its id was taken before or the
    /// run has ended.
    pub(crate) fn on_message(&mut self, text: String, id: &str, now_ms: i64) -> SendOutcome {
        let task = self.task_number();
        if !id.is_empty() && id == self.spec.task_message_id && !self.follow_ups.task_message_taken
        {
            // Update-with-start's own update: the message is the run's task already.
            self.follow_ups.task_message_taken = true;
            return SendOutcome {
                accepted: true,
                duplicate: false,
                task: 1,
            };
        }
        if self.is_duplicate_message(id) {
            self.note(now_ms, &format!("message {id} was taken before; ignored"));
            // In the run already (as its task, or queued before): taken, once.
            return SendOutcome {
                accepted: true,
                duplicate: true,
                task,
            };
        }
        if !self.takes_messages() {
            // Too late: no turn follows. Nothing is recorded, so the run's last event stays
            // its `finished` one (what `status` shows).
            return SendOutcome::default();
        }
        if !id.is_empty() {
            self.follow_ups.message_ids.push(id.to_owned());
            let over = self
                .follow_ups
                .message_ids
                .len()
                .saturating_sub(MAX_MESSAGE_IDS);
            self.follow_ups.message_ids.drain(..over);
        }
        self.on_user_message(text, now_ms);
        SendOutcome {
            accepted: true,
            duplicate: false,
            // A message to an idle run begins the next task.
            task: if self.between_tasks() { task + 1 } else { task },
        }
    }

    /// The step of a conversation between tasks (`None`: not a conversation, or over): the
    /// next task when a message waits, else the wait for one.
    pub(super) fn between_tasks_step(&mut self, now_ms: i64) -> Option<Step> {
        if !self.between_tasks() {
            return None;
        }
        if !self.inbox.is_empty() {
            self.next_task(now_ms);
            return Some(self.next_step(now_ms));
        }
        if !self.follow_ups.idle {
            self.follow_ups.idle = true;
            self.note(
                now_ms,
                &format!(
                    "task {} answered; waiting up to {} s for the next message",
                    self.task_number(),
                    self.spec.idle_timeout_seconds
                ),
            );
        }
        Some(Step::AwaitMessage {
            timeout_seconds: self.spec.idle_timeout_seconds,
        })
    }

    /// No message came within the idle timeout: the run ends with its last result.
    pub(crate) fn on_idle_timeout(&mut self, now_ms: i64) {
        self.end_conversation(
            now_ms,
            &format!(
                "no message for {} s: the conversation ends",
                self.spec.idle_timeout_seconds
            ),
        );
    }

    /// The conversation ends between tasks (idle timeout, cancel, deadline): its last
    /// task's result stands.
    pub(super) fn end_conversation(&mut self, now_ms: i64, why: &str) {
        if !self.between_tasks() {
            return;
        }
        self.follow_ups.idle = false;
        self.follow_ups.over = true;
        self.note(now_ms, why);
    }

    /// The messages in the inbox begin the next task: the run thinks again, with the turn
    /// limit counted afresh; its change set starts where the last delivery left off.
    fn next_task(&mut self, now_ms: i64) {
        self.follow_ups.idle = false;
        self.follow_ups.later_tasks += 1;
        self.follow_ups.task_turn = self.turn;
        self.note(now_ms, &format!("task {} begins", self.task_number()));
        let delivered = self.outputs.delivered.take();
        let changes = self.outputs.changes.take();
        if let (
            Some(start),
            Some(Delivered { commit, error, .. }),
            Some(Changes { final_snapshot, .. }),
        ) = (self.outputs.start.as_mut(), delivered, changes)
            && error.is_empty()
            && !commit.is_empty()
        {
            // Pushed: the next change set is against what was pushed, committed on top of it.
            *start = WorkspaceStart {
                snapshot: final_snapshot,
                commit,
                base_branch: start.base_branch.clone(),
            };
            self.outputs.touched = false;
        }
        self.outputs.schema_retried = false;
        self.outputs.announced = false;
        self.verify = Default::default();
        self.phase = Phase::Thinking;
    }
}
