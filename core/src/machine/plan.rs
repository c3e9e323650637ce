//! How the calls of a [`Step::RunTools`](super::Step::RunTools) run: the machine plans, the
//! workflow (`workflows/src/workflow/batch.rs`) only executes the plan.
//!
//! - Calls that change the workspace run one at a time, each from the snapshot the previous
//!   one left: they may run on different workers, whose copies cannot be merged. Subagents of
//!   one batch start from the same tree and run side by side (their change sets land one after
//!   another, three-way, once they end), so they do not make a batch serial.
//! - Otherwise up to `max_parallel_tools` calls run at once.
//! - A batch of read-only built-in calls runs as local activities: one workflow task per turn
//!   instead of two. They change nothing, so running one again after a worker failure is
//!   harmless. Each runs within a budget, after which it runs again as a regular activity
//!   (a slow read must not hold the workflow task). `remote_read_tools` opts out;
//!   `local_read_tools` still asks for them then, without the budget.

use std::ops::Range;

use baton_proto::ToolRequest;

/// Where one call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// A local `run_tool` activity. `fallback`: it runs within a budget, and again as a
    /// regular activity when it does not finish in it (or fails).
    Local {
        /// Run again as a regular activity after the budget.
        fallback: bool,
    },
    /// A `run_tool` activity (a built-in tool).
    Tool,
    /// An `mcp_call_tool` activity.
    Mcp,
    /// A child workflow (`spawn_agent`).
    Child,
}

/// The plan of one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPlan {
    /// Calls per group: groups run one after another, the calls of a group at once. 1 when
    /// the batch runs one call at a time.
    pub group_size: usize,
    /// Where each call runs, in the order of the step's requests. Local runners come as a
    /// whole batch or not at all.
    pub runners: Vec<Runner>,
}

impl ToolPlan {
    /// Plans `requests` (the approved calls of a batch, in call order) under the run's
    /// concurrency limit and its `local_read_tools` / `remote_read_tools` choices.
    pub fn new(
        requests: &[ToolRequest],
        max_parallel: u32,
        local_read_tools: bool,
        remote_read_tools: bool,
    ) -> Self {
        let serial =
            requests.len() > 1 && requests.iter().any(|r| r.mutating && r.subagent.is_none());
        let read_only = !requests.is_empty()
            && requests
                .iter()
                .all(|r| !r.mutating && r.mcp.is_none() && r.subagent.is_none());
        let fallback = read_only && !remote_read_tools;
        let local = read_only && (fallback || local_read_tools);
        let runners = requests
            .iter()
            .map(|r| {
                if local {
                    Runner::Local { fallback }
                } else if r.subagent.is_some() {
                    Runner::Child
                } else if r.mcp.is_some() {
                    Runner::Mcp
                } else {
                    Runner::Tool
                }
            })
            .collect();
        Self {
            group_size: if serial {
                1
            } else {
                max_parallel.max(1) as usize
            },
            runners,
        }
    }

    /// The groups, as ranges of request indices, in the order they run.
    pub fn groups(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let n = self.runners.len();
        (0..n)
            .step_by(self.group_size.max(1))
            .map(move |start| start..(start + self.group_size.max(1)).min(n))
    }

    /// `Some(fallback)` when the batch runs as local activities.
    pub fn local(&self) -> Option<bool> {
        match self.runners.first() {
            Some(Runner::Local { fallback }) => Some(*fallback),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::{McpOrigin, RunSpec, ToolCall};

    use super::*;

    fn call(id: &str) -> Option<ToolCall> {
        Some(ToolCall {
            id: id.to_owned(),
            name: "read_file".to_owned(),
            ..Default::default()
        })
    }

    fn read(id: &str) -> ToolRequest {
        ToolRequest {
            call: call(id),
            ..Default::default()
        }
    }

    fn write(id: &str) -> ToolRequest {
        ToolRequest {
            mutating: true,
            ..read(id)
        }
    }

    fn mcp(id: &str, mutating: bool) -> ToolRequest {
        ToolRequest {
            mcp: Some(McpOrigin::default()),
            mutating,
            ..read(id)
        }
    }

    fn child(id: &str) -> ToolRequest {
        ToolRequest {
            subagent: Some(RunSpec::default()),
            ..write(id)
        }
    }

    /// The groups as (first, end) pairs.
    fn groups(plan: &ToolPlan) -> Vec<(usize, usize)> {
        plan.groups().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn read_only_built_in_calls_run_locally_in_groups_of_max_parallel() {
        let plan = ToolPlan::new(&[read("a"), read("b"), read("c")], 2, false, false);
        assert_eq!(plan.runners, [Runner::Local { fallback: true }; 3]);
        assert_eq!(plan.local(), Some(true));
        assert_eq!(groups(&plan), [(0, 2), (2, 3)]);
    }

    #[test]
    fn remote_read_tools_opts_out_and_local_read_tools_asks_again_without_the_budget() {
        let plan = ToolPlan::new(&[read("a")], 4, false, true);
        assert_eq!(plan.runners, [Runner::Tool]);
        assert_eq!(plan.local(), None);
        let plan = ToolPlan::new(&[read("a")], 4, true, true);
        assert_eq!(plan.runners, [Runner::Local { fallback: false }]);
        assert_eq!(plan.local(), Some(false));
    }

    #[test]
    fn a_mutating_call_makes_a_batch_serial_and_no_call_local() {
        let plan = ToolPlan::new(&[read("a"), write("b"), read("c")], 8, true, false);
        assert_eq!(plan.runners, [Runner::Tool; 3]);
        assert_eq!(groups(&plan), [(0, 1), (1, 2), (2, 3)]);
        // Alone, it runs as it is: one group of one.
        let plan = ToolPlan::new(&[write("a")], 8, false, false);
        assert_eq!(groups(&plan), [(0, 1)]);
    }

    #[test]
    fn mcp_calls_are_mcp_activities_and_serial_only_when_they_mutate() {
        let plan = ToolPlan::new(&[mcp("a", false), read("b")], 4, false, false);
        assert_eq!(plan.runners, [Runner::Mcp, Runner::Tool]);
        assert_eq!(groups(&plan), [(0, 2)]);
        let plan = ToolPlan::new(&[mcp("a", true), read("b")], 4, false, false);
        assert_eq!(groups(&plan), [(0, 1), (1, 2)]);
    }

    #[test]
    fn subagents_run_side_by_side_as_child_workflows() {
        let plan = ToolPlan::new(&[child("a"), child("b"), read("c")], 4, false, false);
        assert_eq!(plan.runners, [Runner::Child, Runner::Child, Runner::Tool]);
        assert_eq!(groups(&plan), [(0, 3)]);
    }

    #[test]
    fn an_empty_batch_has_no_groups_and_a_zero_limit_runs_one_at_a_time() {
        let plan = ToolPlan::new(&[], 4, false, false);
        assert!(groups(&plan).is_empty());
        assert_eq!(plan.local(), None);
        let plan = ToolPlan::new(&[read("a"), read("b")], 0, false, true);
        assert_eq!(groups(&plan), [(0, 1), (1, 2)]);
    }
}
