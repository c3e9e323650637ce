//! The tables `baton-bench` prints (Markdown, so they can go into BENCHMARKS.md as they are).

use std::fmt::Write as _;

use crate::{
    history::{Phases, Profile},
    per_turn::Settings,
    stats::{median, percentile},
};

/// Measurements of one variant.
#[derive(Debug, Default)]
pub(crate) struct Row {
    /// Wall time of each timed run divided by its turns, in ms.
    pub(crate) wall_ms_per_turn: Vec<f64>,
    /// Every turn of every timed run, in ms.
    pub(crate) turn_ms: Vec<f64>,
    /// History counts per turn, averaged over the runs (Temporal variants only).
    pub(crate) history: Option<Profile>,
    /// Where the time went per turn, median over the runs (Temporal variants only).
    pub(crate) phases: Option<Phases>,
}

impl Row {
    /// Median over the runs of wall ms per turn.
    pub(crate) fn ms_per_turn(&self) -> f64 {
        median(&self.wall_ms_per_turn)
    }

    fn p50(&self) -> f64 {
        median(&self.turn_ms)
    }

    fn p95(&self) -> f64 {
        percentile(&self.turn_ms, 95.0)
    }
}

/// The result of one per-turn scenario run.
#[derive(Debug)]
pub(crate) struct PerTurnReport {
    /// What was measured.
    pub(crate) settings: Settings,
    /// (a) baton.
    pub(crate) a: Row,
    /// (a') baton with read-only tools as regular activities (`--remote-read-tools`; the
    /// default before local read-only tools, the lever of scenario 5).
    pub(crate) l: Row,
    /// (b) bare Temporal.
    pub(crate) b: Row,
    /// (b+) bare Temporal with `AgentRun`'s status upserts (ablation).
    pub(crate) u: Row,
    /// (c) in-process.
    pub(crate) c: Row,
}

impl PerTurnReport {
    /// baton / bare Temporal, by ms per turn: the headline.
    pub(crate) fn headline(&self) -> f64 {
        self.a.ms_per_turn() / self.b.ms_per_turn()
    }

    /// The report as Markdown.
    pub(crate) fn render(&self) -> String {
        let s = &self.settings;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### per-turn, server: {}, mock model: {}, N = {} turns, R = {} reps\n",
            s.server_label(),
            s.model_label(),
            s.turns,
            s.reps
        );
        let _ = writeln!(
            out,
            "| variant | ms/turn (wall / N, median of reps) | turn p50 ms | turn p95 ms | \
             history bytes/turn | events/turn | workflow tasks/turn |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|");
        for (label, row) in [
            (
                "(a) baton AgentRun (baton-worker process, default: local read-only tools)",
                &self.a,
            ),
            (
                "(a') lever: (a) with read-only tools as regular activities",
                &self.l,
            ),
            ("(b) bare Temporal BareLoop (in-process worker)", &self.b),
            (
                "(b+) ablation: (b) + one memo and one search-attribute upsert per turn",
                &self.u,
            ),
            ("(c) in-process RunState loop (no Temporal)", &self.c),
        ] {
            let (bytes, events, tasks) = match &row.history {
                Some(h) => (
                    format!("{:.0}", h.json_bytes),
                    format!("{:.1}", h.events),
                    format!("{:.2}", h.workflow_tasks),
                ),
                None => ("–".to_owned(), "–".to_owned(), "–".to_owned()),
            };
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {} | {bytes} | {events} | {tasks} |",
                ms(row.ms_per_turn()),
                ms(row.p50()),
                ms(row.p95()),
            );
        }
        let _ = writeln!(
            out,
            "\nbaton / bare Temporal (headline): **{:.2}x** by ms/turn ({:.2}x by turn p50, \
             {:.2}x by p95); baton adds {:.1} ms per turn",
            self.headline(),
            self.a.p50() / self.b.p50(),
            self.a.p95() / self.b.p95(),
            self.a.ms_per_turn() - self.b.ms_per_turn(),
        );
        let _ = writeln!(
            out,
            "baton / in-process: {:.1}x by ms/turn ({:.1}x by turn p50)",
            self.a.ms_per_turn() / self.c.ms_per_turn(),
            self.a.p50() / self.c.p50(),
        );
        let _ = writeln!(
            out,
            "lever (a) / (a'): **{:.2}x** by ms/turn (local activities for read-only tools save \
             {:.1} ms per turn); (a') / bare Temporal: {:.2}x",
            self.a.ms_per_turn() / self.l.ms_per_turn(),
            self.l.ms_per_turn() - self.a.ms_per_turn(),
            self.l.ms_per_turn() / self.b.ms_per_turn(),
        );
        if let (Some(a), Some(b), Some(u)) = (&self.a.phases, &self.b.phases, &self.u.phases) {
            let _ = writeln!(
                out,
                "\nWhere the time goes, ms per turn by the server's clock (whole run / N, median of \
                 reps):\n\n\
                 | variant | activities (scheduled -> completed) | workflow task queue | \
                 workflow task run | rest (server) | total |\n|---|--:|--:|--:|--:|--:|"
            );
            let (diff, upserts) = (a.minus(b), u.minus(b));
            let l = self.l.phases.unwrap_or_default();
            for (label, p) in [
                ("(a) baton", a),
                ("(a') baton, read-only tools as activities", &l),
                ("(b) bare Temporal", b),
                ("(b+) bare + upserts", u),
                ("(a) - (b): what baton adds", &diff),
                ("(b+) - (b): what the upserts add", &upserts),
            ] {
                let _ = writeln!(
                    out,
                    "| {label} | {} | {} | {} | {} | {} |",
                    ms(p.activities),
                    ms(p.workflow_task_queue),
                    ms(p.workflow_task_run),
                    ms(p.other),
                    ms(p.total),
                );
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "(b+) - (b), by ms/turn: the upserts add {:.1} ms per turn",
            self.u.ms_per_turn() - self.b.ms_per_turn()
        );
        for (label, row) in [
            ("(a) baton", &self.a),
            ("(a') baton, read-only tools as activities", &self.l),
            ("(b) bare", &self.b),
            ("(b+) bare + upserts", &self.u),
        ] {
            if let Some(h) = &row.history {
                let _ = writeln!(
                    out,
                    "{label} per turn: {:.2} activities, {:.2} memo upserts, {:.2} search \
                     attribute upserts; {:.0} run(s) per workflow",
                    h.activities, h.memo_upserts, h.search_attribute_upserts, h.runs
                );
            }
        }
        out
    }
}

/// A summary of several per-turn reports (one per server setting), as Markdown.
pub(crate) fn summary(reports: &[PerTurnReport]) -> String {
    let mut out = String::from(
        "### summary\n\n| server | baton ms/turn | baton, read-only tools as activities, ms/turn | \
         bare Temporal ms/turn | in-process ms/turn | baton / bare Temporal | (a') / bare \
         Temporal | baton / in-process |\n|---|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for r in reports {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.2}x | {:.2}x | {:.1}x |",
            r.settings.server_label(),
            ms(r.a.ms_per_turn()),
            ms(r.l.ms_per_turn()),
            ms(r.b.ms_per_turn()),
            ms(r.c.ms_per_turn()),
            r.headline(),
            r.l.ms_per_turn() / r.b.ms_per_turn(),
            r.a.ms_per_turn() / r.c.ms_per_turn(),
        );
    }
    out
}

/// Milliseconds with a precision that suits their size.
fn ms(v: f64) -> String {
    if v.abs() < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}
