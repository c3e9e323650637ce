//! `baton watch RUN --children`: a run's subagents followed inline. Each `subagent_started`
//! event of the run (or of a followed child: grandchildren too) adds the child; every poll
//! reads each unfinished child's new events (query `events`, as for the run itself) and prints
//! them: JSON lines carry the child's `run_id`, lines for people are indented under
//! `┆ <child>`.

use std::time::Duration;

use baton_proto::{EventsRequest, RunEvent, run_event::Kind};
use baton_workflows::AgentRun;
use temporalio_client::{Client, WorkflowQueryOptions};

use crate::{connect::handle, exit::Exit, json, render, style::Style};

/// Events query budget per child and poll (a slow child is read again at the next poll).
const CHILD_QUERY_BUDGET: Duration = Duration::from_secs(2);

/// The children being followed.
pub(crate) struct Children {
    client: Client,
    json: bool,
    style: Style,
    followed: Vec<Child>,
}

struct Child {
    run_id: String,
    next_seq: u32,
    ended: bool,
}

impl Children {
    pub(crate) fn new(client: Client, json: bool, style: Style) -> Self {
        Self {
            client,
            json,
            style,
            followed: Vec::new(),
        }
    }

    /// Follows the child an event announces, if it does.
    pub(crate) fn saw(&mut self, e: &RunEvent) {
        if let Some(Kind::SubagentStarted(s)) = &e.kind
            && !self.followed.iter().any(|c| c.run_id == s.run_id)
        {
            self.followed.push(Child {
                run_id: s.run_id.clone(),
                next_seq: 0,
                ended: false,
            });
        }
    }

    /// The new events of every unfinished child, rendered.
    pub(crate) async fn poll(&mut self) -> Result<String, Exit> {
        let mut out = String::new();
        let mut i = 0;
        while i < self.followed.len() {
            if self.followed[i].ended {
                i += 1;
                continue;
            }
            let run_id = self.followed[i].run_id.clone();
            let h = handle(&self.client, &run_id);
            let since = self.followed[i].next_seq;
            let query = h.query(
                AgentRun::events,
                EventsRequest { since },
                WorkflowQueryOptions::default(),
            );
            if let Ok(Ok(page)) = tokio::time::timeout(CHILD_QUERY_BUDGET, query).await {
                for e in &page.events {
                    self.followed[i].next_seq = self.followed[i].next_seq.max(e.seq + 1);
                    out.push_str(&self.render(&run_id, e)?);
                    self.saw(e);
                }
                self.followed[i].ended |= page.finished;
            }
            i += 1;
        }
        Ok(out)
    }

    fn render(&self, run_id: &str, e: &RunEvent) -> Result<String, Exit> {
        if self.json {
            return Ok(match json::WatchLine::of(run_id, e) {
                Some(line) => json::line(&line)? + "\n",
                None => String::new(),
            });
        }
        let text = match &e.kind {
            Some(Kind::Finished(r)) => render::finished_human(r, &self.style, false),
            _ => render::event_human(run_id, e, &self.style, None),
        };
        let prefix = self.style.dim(&format!("┆ {run_id} "));
        Ok(text
            .lines()
            .map(|line| format!("{prefix}{line}\n"))
            .collect())
    }
}
