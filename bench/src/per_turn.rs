//! Scenario 1, per-turn orchestration overhead: the same agent turns measured three ways in
//! one process run, on one dev server — (a) baton, (b) the bare Temporal floor, (c) the
//! in-process floor — plus one ablation, (b+) the bare floor with `AgentRun`'s per-step status
//! upserts; repetitions interleaved so that noise hits all of them alike.

use std::time::Duration;

use anyhow::Context;
use baton_tests::{DevServer, MockOpenAi, unique};

use crate::{
    agent::{self, BatonWorker},
    bare::{self, BareWorker},
    history::{self, Phases, Profile},
    inprocess::InProcess,
    report::{PerTurnReport, Row},
};

/// Dynamic config of `--fast-server`: the history service polls its transfer queue much more
/// often; its default (20 polls/s) is what bounds sequential latency on the dev server.
pub(crate) const FAST_SERVER_CONFIG: &str = "history.transferProcessorMaxPollRPS=1000";
/// Turns of the untimed warm-up run of each variant (connections, caches, first-run paths).
const WARMUP_TURNS: u32 = 3;

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Turns per run.
    pub(crate) turns: u32,
    /// Timed runs of each variant.
    pub(crate) reps: u32,
    /// Start the dev server with [`FAST_SERVER_CONFIG`].
    pub(crate) fast_server: bool,
    /// Ask the mock model for streamed (SSE) answers; off by default (see `--stream`).
    pub(crate) stream: bool,
}

impl Settings {
    /// How the dev server was configured, for the report.
    pub(crate) fn server_label(&self) -> String {
        if self.fast_server {
            format!("fast ({FAST_SERVER_CONFIG})")
        } else {
            "default".to_owned()
        }
    }

    /// How the model answers, for the report.
    pub(crate) fn model_label(&self) -> &'static str {
        if self.stream {
            "streamed (SSE) answers"
        } else {
            "non-streamed answers"
        }
    }
}

/// Runs the scenario: starts a dev server (baton's search attributes; with `fast_server` the
/// faster transfer queue), the mock model, a `baton-worker` process and the bare worker, warms
/// each variant up, then times `reps` runs of each.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<PerTurnReport> {
    anyhow::ensure!(
        settings.turns >= 1 && settings.reps >= 1,
        "--turns and --reps must be at least 1"
    );
    let server = start_server(settings.fast_server)?;
    let llm = MockOpenAi::start()?;
    let baton = BatonWorker::start(&server, &llm, settings.stream).await?;
    let mut bare = BareWorker::start(&server.url(), &unique("bench-bare")).await?;
    let inprocess = InProcess::new(&llm, settings.stream)?;
    let tag = unique("bench");

    eprintln!(
        "per-turn [{}]: warm-up, then {} x {} turns of each variant",
        settings.server_label(),
        settings.reps,
        settings.turns
    );
    baton
        .run(&llm, &format!("{tag}-a-warmup"), WARMUP_TURNS)
        .await?;
    baton
        .run_with(&llm, &format!("{tag}-l-warmup"), WARMUP_TURNS, true)
        .await?;
    bare.run(&format!("{tag}-b-warmup"), WARMUP_TURNS, false)
        .await?;
    bare.run(&format!("{tag}-u-warmup"), WARMUP_TURNS, true)
        .await?;
    inprocess
        .run(&llm, &format!("{tag}-c-warmup"), WARMUP_TURNS)
        .await?;

    let n = f64::from(settings.turns);
    let mut report = PerTurnReport {
        settings,
        a: Row::default(),
        l: Row::default(),
        b: Row::default(),
        u: Row::default(),
        c: Row::default(),
    };
    let (mut a_ids, mut b_ids, mut u_ids) = (Vec::new(), Vec::new(), Vec::new());
    let mut l_ids = Vec::new();
    let per_turn = |wall: Duration| wall.as_secs_f64() * 1000.0 / n;
    for rep in 1..=settings.reps {
        let id = format!("{tag}-a-{rep}");
        let wall = baton.run(&llm, &id, settings.turns).await?;
        report.a.wall_ms_per_turn.push(per_turn(wall));
        a_ids.push(id);

        let id = format!("{tag}-l-{rep}");
        let wall = baton.run_with(&llm, &id, settings.turns, true).await?;
        report.l.wall_ms_per_turn.push(per_turn(wall));
        l_ids.push(id);

        let id = format!("{tag}-b-{rep}");
        let wall = bare.run(&id, settings.turns, false).await?;
        report.b.wall_ms_per_turn.push(per_turn(wall));
        b_ids.push(id);

        let id = format!("{tag}-u-{rep}");
        let wall = bare.run(&id, settings.turns, true).await?;
        report.u.wall_ms_per_turn.push(per_turn(wall));
        u_ids.push(id);

        let id = format!("{tag}-c-{rep}");
        let run = inprocess.run(&llm, &id, settings.turns).await?;
        report.c.wall_ms_per_turn.push(per_turn(run.wall));
        report.c.turn_ms.extend(run.turn_ms);
        let last = |row: &Row| row.wall_ms_per_turn.last().copied().unwrap_or_default();
        eprintln!(
            "  rep {rep}/{}: ms/turn: baton {:.1}, baton reads as activities {:.1}, bare Temporal {:.1}, \
             bare + upserts {:.1}, in-process {:.2}",
            settings.reps,
            last(&report.a),
            last(&report.l),
            last(&report.b),
            last(&report.u),
            last(&report.c),
        );
    }
    bare.stop()?;

    for (row, ids, activity) in [
        (&mut report.a, &a_ids, agent::TURN_ACTIVITY),
        (&mut report.l, &l_ids, agent::TURN_ACTIVITY),
        (&mut report.b, &b_ids, bare::TURN_ACTIVITY),
        (&mut report.u, &u_ids, bare::TURN_ACTIVITY),
    ] {
        let (mut profiles, mut phases) = (Vec::new(), Vec::new());
        for id in ids {
            let h = history::fetch(&server, id).with_context(|| format!("history of {id}"))?;
            let errors = h.error_results();
            anyhow::ensure!(
                errors == 0,
                "{id}: {errors} activities returned an error result"
            );
            row.turn_ms.extend(h.turn_ms(activity)?);
            profiles.push(h.profile().per(n));
            phases.push(h.phases()?.per(n));
        }
        row.history = Some(Profile::mean(&profiles));
        row.phases = Some(Phases::median(&phases));
    }
    Ok(report)
}

/// A dev server with baton's search attributes (as `DevServer::start` registers them) and,
/// if `fast`, [`FAST_SERVER_CONFIG`].
pub(crate) fn start_server(fast: bool) -> anyhow::Result<DevServer> {
    let extra: &[&str] = if fast {
        &["--dynamic-config-value", FAST_SERVER_CONFIG]
    } else {
        &[]
    };
    DevServer::start_baton(extra)
}
