//! `baton watch RUN` (and the live view of `submit --wait`): follows a run's events through
//! the workflow's `events` query, from the start or from a turn, until the run ends.
//!
//! For people: each turn's text (as the model writes it, when the provider streams), tool calls
//! with a spinner while they run, approvals, results and token use. With `--json`: one JSON
//! line per event (`json::WatchLine`, documented in the README), and `assistant_delta` lines
//! while a model call streams (`live`: read from the call's heartbeat details, polled every
//! 100 ms while it streams). Re-attaching is always possible: the run keeps its events.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use baton_proto::{
    AssistantMessage, EventsPage, EventsRequest, RunEvent, RunResult, Usage, run_event::Kind,
};
use baton_workflows::AgentRun;
use temporalio_client::{
    Client, NamespacedClient, WorkflowDescribeOptions, WorkflowExecutionStatus, WorkflowHandle,
    WorkflowQueryOptions,
};

use crate::{
    children::Children,
    cli::WatchArgs,
    connect::{connect, handle, interaction_error, short},
    exit::{self, Exit},
    inflight::{self, InFlight},
    inspect, json,
    live::{self, Delta, Follower},
    render,
    safe_text::escape_line,
    style::{Spinner, Style},
    waiting::{self, Waited},
};

/// Events query budget for a running run (its worker has it cached).
const LIVE_QUERY_BUDGET: Duration = Duration::from_secs(3);
/// Events query budget for an ended run (a worker replays its history first).
const REPLAY_QUERY_BUDGET: Duration = Duration::from_secs(15);
/// Status query budget for the token use shown in turn headers.
const STATUS_QUERY_BUDGET: Duration = Duration::from_millis(800);
/// Between two events queries.
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Between two spinner frames.
const SPINNER_TICK: Duration = Duration::from_millis(100);

/// Polls without new events between two looks at the execution itself (its status and the
/// activities in flight).
const IDLE_POLLS_PER_CHECK: u32 = 10;

/// Why to look at the execution after a poll.
enum Check {
    /// The events query did not answer (why).
    NoEvents(String),
    /// It answered, but the run may have been closed from outside.
    Closed,
}

/// How to follow a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FollowOptions {
    /// Show events of this turn and later (0: everything). The end is always shown.
    pub(crate) since_turn: u32,
    /// JSON lines instead of text.
    pub(crate) json: bool,
    /// Show how the run ended (the `finished` event).
    pub(crate) show_end: bool,
    /// Colour and spinner (ignored with `json`).
    pub(crate) style: Style,
    /// Follow subagents inline (`--children`).
    pub(crate) children: bool,
}

/// `baton watch RUN`.
pub(crate) async fn watch(args: WatchArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let h = handle(&client, &args.run);
    let options = FollowOptions {
        since_turn: args.since,
        json: args.json,
        show_end: true,
        style: if args.json {
            Style::plain()
        } else {
            Style::detect()
        },
        children: args.children,
    };
    let seen_turn = AtomicU32::new(args.since);
    match waiting::until_detached(None, follow(&h, &args.run, options, &seen_turn)).await {
        Waited::Done(code) => code,
        Waited::TimedOut | Waited::Detached => {
            eprintln!(
                "{}",
                waiting::detached(&args.run, seen_turn.load(Ordering::Relaxed))
            );
            Ok(exit::WAIT_TIMEOUT)
        }
    }
}

/// Follows a run's events until it ends and returns the exit code for its result.
/// `seen_turn` is kept at the latest turn shown (for re-attaching after a detach).
pub(crate) async fn follow(
    h: &WorkflowHandle<Client, AgentRun>,
    run: &str,
    options: FollowOptions,
    seen_turn: &AtomicU32,
) -> Result<i32, Exit> {
    // Fails fast (exit 2) for an unknown run, before waiting on a query.
    let desc = h
        .describe(WorkflowDescribeOptions::default())
        .await
        .map_err(|e| interaction_error(run, e))?;
    let closed_at_start = desc.status() != WorkflowExecutionStatus::Running;
    let mut budget = if closed_at_start {
        REPLAY_QUERY_BUDGET
    } else {
        LIVE_QUERY_BUDGET
    };
    let mut idle_polls = 0u32;
    let mut view = View::new(run, options);
    let mut next_seq = 0;
    let mut first_page = true;
    let mut said_waiting = false;
    let mut lost_since: Option<std::time::Instant> = None;
    let mut children = options
        .children
        .then(|| Children::new(h.client().clone(), options.json, view.options.style));
    loop {
        let query = h.query(
            AgentRun::events,
            EventsRequest { since: next_seq },
            WorkflowQueryOptions::default(),
        );
        let problem = match tokio::time::timeout(budget, query).await {
            Ok(Ok(page)) => {
                said_waiting = false;
                if first_page
                    && let Some(first) = page.events.first()
                    && first.seq > 0
                {
                    view.spinner.clear();
                    eprintln!(
                        "· the first {} events of {run} are no longer kept; `baton transcript {run}` has the whole conversation",
                        first.seq
                    );
                }
                first_page = false;
                let tokens = live_tokens(h, &page, options).await;
                for e in &page.events {
                    next_seq = next_seq.max(e.seq + 1);
                    seen_turn.fetch_max(e.turn, Ordering::Relaxed);
                    let usage = tokens.filter(|(seq, _)| *seq == e.seq).map(|(_, u)| u);
                    view.show(e, usage.as_ref())?;
                    if let Some(c) = &mut children {
                        c.saw(e);
                    }
                }
                if let Some(c) = &mut children {
                    let text = c.poll().await?;
                    view.emit(&text)?;
                }
                if page.finished {
                    let result = inspect::wait_result(h, run).await?;
                    view.show_end(&result)?;
                    return Ok(exit::for_result(&result));
                }
                // A run closed from outside (terminated, timed out) never records its end:
                // look at the execution itself now and then.
                idle_polls = if page.events.is_empty() {
                    idle_polls + 1
                } else {
                    0
                };
                // From the first idle poll on (a run riding out retries shows them at once).
                if closed_at_start || idle_polls % IDLE_POLLS_PER_CHECK == 1 {
                    Some(Check::Closed)
                } else {
                    None
                }
            }
            Ok(Err(e)) => Some(Check::NoEvents(short(&e.to_string()))),
            Err(_) => Some(Check::NoEvents(format!(
                "no worker answered within {}s",
                budget.as_secs()
            ))),
        };
        // A worker that must replay a long history first may need longer than usual.
        budget = if matches!(problem, Some(Check::NoEvents(_))) {
            (budget * 2).min(REPLAY_QUERY_BUDGET)
        } else {
            LIVE_QUERY_BUDGET
        };
        if let Some(check) = problem {
            // If the run has ended, report its result from history.
            let snap = match inspect::snapshot(h, run).await {
                Ok(snap) => {
                    lost_since = None;
                    snap
                }
                // Temporal gone for a moment (a restart, a load balancer): ride it out, as
                // `result --wait` does, up to RECONNECT_BUDGET of failures in a row.
                Err(e) if e.transient => {
                    let since = *lost_since.get_or_insert_with(|| {
                        view.spinner.clear();
                        eprintln!(
                            "· lost the connection to Temporal while watching {run} ({}); \
                             retrying (the run goes on)",
                            e.message
                        );
                        std::time::Instant::now()
                    });
                    if since.elapsed() >= inspect::RECONNECT_BUDGET {
                        return Err(e);
                    }
                    view.pause(h).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if snap.temporal_status != WorkflowExecutionStatus::Running {
                let result = inspect::wait_result(h, run).await?;
                if let Check::NoEvents(problem) = &check
                    && view.options.show_end
                    && first_page
                {
                    view.spinner.clear();
                    eprintln!(
                        "· {problem}; the run's events are read from a worker, so only its result is shown"
                    );
                }
                view.show_end(&result)?;
                return Ok(exit::for_result(&result));
            }
            view.retries(&snap.activities);
            if let Check::NoEvents(problem) = check
                && !said_waiting
            {
                view.spinner.clear();
                eprintln!(
                    "· {problem} for {run}; waiting (last state: {})",
                    snap.status.state().as_str_name()
                );
                said_waiting = true;
            }
        }
        view.pause(h).await?;
    }
}

/// The run's token use for the header of the newest turn of a live page: `(seq of that
/// assistant event, usage)`, when a worker answers quickly and no later turn has begun.
async fn live_tokens(
    h: &WorkflowHandle<Client, AgentRun>,
    page: &EventsPage,
    options: FollowOptions,
) -> Option<(u32, Usage)> {
    if options.json || page.finished {
        return None;
    }
    let newest = page
        .events
        .iter()
        .rev()
        .find(|e| matches!(e.kind, Some(Kind::Assistant(_))) && e.turn >= options.since_turn)?;
    let query = h.query(AgentRun::status, (), WorkflowQueryOptions::default());
    let status = tokio::time::timeout(STATUS_QUERY_BUDGET, query)
        .await
        .ok()?
        .ok()?;
    (status.turn == newest.turn).then(|| (newest.seq, status.usage.unwrap_or_default()))
}

/// What has been shown, and what the run is doing now (for the spinner).
struct View<'a> {
    run: &'a str,
    options: FollowOptions,
    spinner: Spinner,
    /// Tools running: call id -> (tool, started at ms).
    running: BTreeMap<String, (String, i64)>,
    /// Retries already told: (activity type, attempt).
    retries_told: BTreeSet<(String, i32)>,
    /// Calls awaiting a decision: call id -> requested at ms.
    awaiting: BTreeMap<String, i64>,
    last_event_ms: Option<i64>,
    /// The text of the last turn shown (not repeated as the answer at the end).
    last_text: String,
    /// The model call in flight, as it streams.
    live: Follower,
    /// A model call is streaming: look at it at every spinner tick.
    live_fast: bool,
    /// People: streamed text is on screen, its turn's header shown.
    live_open: bool,
    /// The turn of the last `assistant` event (the call in flight is the next one).
    model_turn: u32,
    ended: bool,
    end_shown: bool,
}

impl<'a> View<'a> {
    fn new(run: &'a str, options: FollowOptions) -> Self {
        let spinner_style = if options.json {
            Style::plain()
        } else {
            options.style
        };
        Self {
            run,
            options,
            spinner: Spinner::new(spinner_style),
            running: BTreeMap::new(),
            retries_told: BTreeSet::new(),
            awaiting: BTreeMap::new(),
            last_event_ms: None,
            last_text: String::new(),
            live: Follower::default(),
            live_fast: false,
            live_open: false,
            model_turn: 0,
            ended: false,
            end_shown: false,
        }
    }

    /// Tracks `e` and prints it, unless it is before `--since` (the end is always shown, when
    /// `show_end`).
    fn show(&mut self, e: &RunEvent, tokens: Option<&Usage>) -> Result<(), Exit> {
        self.track(e);
        let finished = matches!(e.kind, Some(Kind::Finished(_)));
        if finished && !self.options.show_end {
            return Ok(());
        }
        if !finished && e.turn < self.options.since_turn {
            return Ok(());
        }
        let mut text = String::new();
        if let Some(Kind::Assistant(a)) = &e.kind {
            // The end of a streamed reply: what the last looks missed, then the event (for
            // people, without the text already on screen).
            let rest = self.live.finish(a);
            let streamed = std::mem::take(&mut self.live_open);
            match rest {
                Some(d) if self.options.json && !d.is_empty() => {
                    text = json::line(&json::WatchLine::delta(self.run, e.turn, &d))? + "\n";
                }
                Some(d) if !self.options.json && streamed => {
                    let rest = RunEvent {
                        kind: Some(Kind::Assistant(AssistantMessage {
                            text: String::new(),
                            ..a.clone()
                        })),
                        ..e.clone()
                    };
                    let shown = render::event_human(self.run, &rest, &self.options.style, tokens);
                    text = format!("{}\n", crate::safe_text::escape(d.text.trim_end()));
                    // Without the header: it came before the streamed text.
                    text.push_str(shown.split_once('\n').map_or("", |(_, body)| body));
                    self.last_text.clone_from(&a.text);
                    return self.emit(&text);
                }
                _ if streamed => text.push('\n'),
                _ => {}
            }
        }
        text.push_str(&match &e.kind {
            _ if self.options.json => match json::WatchLine::of(self.run, e) {
                Some(line) => json::line(&line)? + "\n",
                None => String::new(),
            },
            Some(Kind::Finished(r)) => render::finished_human(
                r,
                &self.options.style,
                !r.answer.trim().is_empty() && self.last_text.trim() == r.answer.trim(),
            ),
            _ => render::event_human(self.run, e, &self.options.style, tokens),
        });
        if let Some(Kind::Assistant(a)) = &e.kind {
            self.last_text.clone_from(&a.text);
        }
        self.end_shown |= finished;
        self.emit(&text)
    }

    /// Tells (people, on stderr; JSON lines stay events only) about each new attempt of an
    /// activity that is being retried, with its last error: a model call riding out a rate
    /// limit shows no event for minutes otherwise.
    fn retries(&mut self, activities: &[InFlight]) {
        if self.options.json {
            return;
        }
        let now = render::now_ms();
        for a in activities {
            if a.last_failure.is_none()
                || !self.retries_told.insert((a.activity.clone(), a.attempt))
            {
                continue;
            }
            self.spinner.clear();
            eprintln!("· {}", inflight::human(a, now));
        }
    }

    /// Shows how the run ended, unless its `finished` event was shown already.
    fn show_end(&mut self, result: &RunResult) -> Result<(), Exit> {
        self.ended = true;
        if !self.options.show_end || self.end_shown {
            self.spinner.clear();
            return Ok(());
        }
        self.end_shown = true;
        let text = if self.options.json {
            json::line(&json::WatchLine::finished(self.run, result))? + "\n"
        } else {
            render::finished_human(result, &self.options.style, false)
        };
        self.emit(&text)
    }

    /// Reads the model call in flight from a describe and shows what it wrote since the last
    /// look. A describe that fails is skipped (the next poll tells about a lost connection).
    async fn look_at_model(&mut self, h: &WorkflowHandle<Client, AgentRun>) -> Result<(), Exit> {
        let streaming = match h.describe(WorkflowDescribeOptions::default()).await {
            Ok(desc) => live::read(h.client().data_converter(), desc.raw()).await,
            Err(_) => None,
        };
        self.live_fast = streaming.as_ref().is_some_and(|s| s.started);
        let turn = self.model_turn + 1;
        let Some(delta) = streaming.and_then(|s| self.live.update(&s)) else {
            return Ok(());
        };
        if turn < self.options.since_turn {
            return Ok(());
        }
        self.show_delta(turn, &delta)
    }

    /// Shows a model call's new output: an `assistant_delta` line, or (people) the text as it
    /// comes, the abandoned output of a retried attempt replaced by the new one's.
    fn show_delta(&mut self, turn: u32, d: &Delta) -> Result<(), Exit> {
        if self.options.json {
            if d.is_empty() {
                return Ok(());
            }
            let line = json::line(&json::WatchLine::delta(self.run, turn, d))? + "\n";
            return self.emit(&line);
        }
        let out = live::human(d, turn, &mut self.live_open, &self.options.style);
        self.emit(&out)
    }

    fn emit(&mut self, text: &str) -> Result<(), Exit> {
        self.spinner.clear();
        if text.is_empty() {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::BrokenPipe => reader_gone(),
                _ => Exit::infra(format!("cannot write to stdout: {e}")),
            })
    }

    fn track(&mut self, e: &RunEvent) {
        self.last_event_ms = Some(e.at_ms);
        match &e.kind {
            Some(Kind::Assistant(_)) => {
                self.model_turn = self.model_turn.max(e.turn);
                self.running.clear();
                self.awaiting.clear();
            }
            Some(Kind::ApprovalRequested(p)) => {
                self.awaiting.insert(p.call_id.clone(), e.at_ms);
            }
            Some(Kind::ApprovalDecided(d)) => {
                self.awaiting.remove(&d.call_id);
            }
            Some(Kind::ToolStarted(c)) => {
                self.awaiting.clear();
                self.running.insert(c.id.clone(), (c.name.clone(), e.at_ms));
            }
            Some(Kind::ToolFinished(r)) => {
                self.running.remove(&r.call_id);
            }
            Some(Kind::VerificationStarted(v)) => {
                self.running.clear();
                self.running.insert(
                    format!("verify-{}-{}", v.round, v.index),
                    ("verify".to_owned(), e.at_ms),
                );
            }
            Some(Kind::VerificationFinished(_)) => self.running.clear(),
            Some(Kind::Finished(_)) => {
                self.ended = true;
                self.running.clear();
                self.awaiting.clear();
            }
            Some(Kind::Note(_) | Kind::SubagentStarted(_) | Kind::SubagentFinished(_)) | None => {}
        }
    }

    /// Waits until the next poll, animating the spinner meanwhile and showing the model's
    /// output as it streams. Ends the watch (exit 3) as soon as stdout's reader has gone, even
    /// with nothing new to print.
    async fn pause(&mut self, h: &WorkflowHandle<Client, AgentRun>) -> Result<(), Exit> {
        let ticks = (POLL_INTERVAL.as_millis() / SPINNER_TICK.as_millis()).max(1);
        for tick in 0..ticks {
            if stdout_reader_gone() {
                return Err(reader_gone());
            }
            // While the run waits for its model: a look once per poll, at every tick while a
            // call streams.
            let thinking = !self.ended && self.running.is_empty() && self.awaiting.is_empty();
            if thinking && (tick == 0 || self.live_fast) {
                self.look_at_model(h).await?;
            }
            if !self.ended && !self.live_open {
                let text = spinner_text(
                    &self.running,
                    &self.awaiting,
                    self.last_event_ms,
                    render::now_ms(),
                );
                self.spinner.draw(Some(&text));
            }
            tokio::time::sleep(SPINNER_TICK).await;
        }
        Ok(())
    }
}

/// The reader of stdout went away (`baton watch RUN --json | grep -m1 ...`): detach quietly,
/// as `--wait-timeout` would (the run goes on).
fn reader_gone() -> Exit {
    Exit {
        code: exit::WAIT_TIMEOUT,
        message: String::new(),
        transient: false,
    }
}

/// Whether stdout is a pipe whose reading end is closed. A write would fail with `EPIPE`,
/// but a watch with nothing new to print would not write, possibly for hours, and keep a
/// pipeline like `baton watch RUN --json | grep -m1 approval_requested && baton approve ...`
/// from going on. `poll` reports `POLLERR` on such a pipe without writing to it.
fn stdout_reader_gone() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLOUT)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}

/// What the run is doing, for the spinner line.
fn spinner_text(
    running: &BTreeMap<String, (String, i64)>,
    awaiting: &BTreeMap<String, i64>,
    last_event_ms: Option<i64>,
    now_ms: i64,
) -> String {
    let since = |at: i64| render::duration(((now_ms - at).max(0) / 1000) as u64);
    if let Some(start) = running.values().map(|(_, at)| *at).min() {
        let names: Vec<String> = running
            .values()
            .map(|(tool, _)| escape_line(tool).into_owned())
            .collect();
        return match running.iter().next() {
            Some((id, (tool, _))) if running.len() == 1 => {
                format!(
                    "running {} [{}] {}",
                    escape_line(tool),
                    escape_line(id),
                    since(start)
                )
            }
            _ => format!(
                "running {} tools ({}) {}",
                names.len(),
                names.join(", "),
                since(start)
            ),
        };
    }
    if let Some(start) = awaiting.values().min() {
        return format!(
            "waiting for a decision on {} call(s) {}",
            awaiting.len(),
            since(*start)
        );
    }
    match last_event_ms {
        Some(at) => format!("waiting for the model {}", since(at)),
        None => "waiting for the run to start".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spinner_says_what_the_run_is_doing() {
        let mut running = BTreeMap::new();
        let mut awaiting = BTreeMap::new();
        assert_eq!(
            spinner_text(&running, &awaiting, None, 0),
            "waiting for the run to start"
        );
        assert_eq!(
            spinner_text(&running, &awaiting, Some(1_000), 4_000),
            "waiting for the model 3s"
        );
        awaiting.insert("c1".to_owned(), 1_000);
        assert_eq!(
            spinner_text(&running, &awaiting, Some(1_000), 61_000),
            "waiting for a decision on 1 call(s) 1m 0s"
        );
        running.insert("c1".to_owned(), ("shell".to_owned(), 2_000));
        assert_eq!(
            spinner_text(&running, &awaiting, Some(2_000), 7_000),
            "running shell [c1] 5s"
        );
        running.insert("c2".to_owned(), ("read_file".to_owned(), 1_000));
        assert_eq!(
            spinner_text(&running, &awaiting, Some(2_000), 7_000),
            "running 2 tools (shell, read_file) 6s"
        );
    }
}
