//! `baton`: the command-line client, as the library behind the `baton` binary. Submits runs,
//! shows their status, approves or denies tool calls, follows runs live, prints results.
//! Talks only to Temporal. Its one public module, [`json`], is the `--json` contract as types
//! that serialize and deserialize, for programs that read baton's output.
//!
//! Modules: [`cli`] (flags), [`connect`] (Temporal connection), [`submit`], [`launch`]
//! (starting a run and following it), [`fork`] (a run from another's turn N; [`fork_source`]
//! reads the source), [`inspect`]
//! (status, result, transcript), [`watch`] (live events; [`children`]: subagents followed inline), [`decide`] (approve, deny, cancel,
//! send), [`ask`] (interactive approval), [`calls`] (a call's whole arguments: `show`), [`visibility`] (list, pending), [`render`] (output
//! for people; [`safe_text`]: model and tool text escaped for a terminal), [`json`] (every
//! `--json` object, typed), [`waiting`] (`--wait-timeout` and
//! Ctrl-C detach), [`style`] (colour and spinner rule), [`exit`] (exit codes),
//! [`codec_server`] (Temporal's remote codec endpoint over the payload encryption keys),
//! [`workspace`] (submit's workspace source and delivery flags: upload, `--git`,
//! `--workspace-of`), [`changes`] (`diff`, `apply`, `download`; [`patch_paths`]: what `apply`
//! refuses), [`replay_check`] (the replay
//! gate before a rollout), [`eval`] (evaluation suites), [`fleet`] (`fleet status`, `fleet patches`: Worker Versioning).

use std::borrow::Cow;

mod ask;
mod blobs;
mod calls;
mod changes;
mod children;
#[cfg(test)]
mod ci_examples;
mod cli;
#[cfg(test)]
mod cli_reference;
mod codec_server;
mod connect;
mod converse;
mod decide;
mod eval;
mod exit;
mod fleet;
mod fork;
mod fork_source;
mod inflight;
mod inspect;
pub mod json;
mod launch;
mod live;
mod patch_paths;
mod render;
mod replay_check;
mod safe_text;
mod schedule;
mod serve;
mod strict;
mod style;
mod submit;
mod visibility;
mod waiting;
mod watch;
mod workspace;

use clap::Parser;

use cli::{Cli, Command};

/// The `baton` command: parses the arguments, runs the command, and exits with its code.
pub async fn main() {
    // `baton transcript RUN | head`: the reader has what it wanted. `println!` panics when
    // stdout's pipe is closed; end quietly instead (watch handles it itself: exit 3).
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.contains("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(exit::COMPLETED);
        }
        default_hook(info);
    }));
    // With --json, stdout holds one JSON object whatever happens (JSON lines for watch): an
    // error becomes `{"error", "exit_code"}` there too, bad flags included. Flags that do not
    // parse leave no `Cli` to ask, so the arguments are looked at first.
    let as_json = std::env::args_os().any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            if as_json && code != 0 {
                // The error's first paragraph ("the following required arguments were not
                // provided:" continues on the next lines).
                let text = e.to_string();
                let paragraph: Vec<&str> = text
                    .lines()
                    .take_while(|l| !l.trim().is_empty())
                    .map(str::trim)
                    .collect();
                let joined = paragraph.join(" ");
                let message = joined.strip_prefix("error: ").unwrap_or(&joined);
                print_json_error(message, code);
            }
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let command = match cli.command.with_json(cli.json) {
        Ok(command) => command,
        Err(message) => {
            if cli.json {
                print_json_error(&message, exit::USAGE);
            }
            eprintln!("error: {message}");
            std::process::exit(exit::USAGE);
        }
    };
    let outcome = match command {
        Command::Submit(a) => submit::run(a).await,
        Command::Fork(a) => fork::run(a).await,
        Command::Status(a) => inspect::status(a).await,
        Command::Approve(a) => decide::decide(a, true).await,
        Command::Deny(a) => decide::decide(a, false).await,
        Command::Result(a) => inspect::result(a).await,
        Command::Watch(a) => watch::watch(a).await,
        Command::Cancel(a) => decide::cancel(a).await,
        Command::Send(a) => converse::run(a).await,
        Command::Transcript(a) => inspect::transcript(a).await,
        Command::Show(a) => calls::show(a).await,
        Command::List(a) => visibility::list(a).await,
        Command::Pending(a) => visibility::pending(a).await,
        Command::Diff(a) => changes::diff(a).await,
        Command::Apply(a) => changes::apply(a).await,
        Command::Download(a) => changes::download(a).await,
        Command::ReplayCheck(a) => replay_check::run(a).await,
        Command::Eval(a) => eval::run(a).await,
        Command::Fleet {
            command: cli::FleetCommand::Status(a),
        } => fleet::status(a).await,
        Command::Fleet {
            command: cli::FleetCommand::Patches(a),
        } => fleet::patches(a).await,
        Command::Schedule { command } => schedule::run(command).await,
        Command::CodecServer(a) => codec_server::run(a).await,
        Command::Serve(a) => serve::run(a).await,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "baton", &mut std::io::stdout());
            Ok(exit::COMPLETED)
        }
    };
    let code = match outcome {
        Ok(code) => code,
        Err(e) => {
            if !e.message.is_empty() {
                if as_json {
                    print_json_error(&e.message, e.code);
                }
                // Errors quote runs, tools and servers: no control character reaches the
                // terminal raw.
                eprintln!("baton: {}", safe_text::escape(&e.message));
            }
            e.code
        }
    };
    std::process::exit(code);
}

/// The `{"error", "exit_code"}` object a failing `--json` command prints on stdout.
fn print_json_error(message: &str, code: i32) {
    let failure = json::Failure {
        error: Cow::from(message),
        exit_code: code,
    };
    // Two plain fields: nothing to fail on.
    let _ = json::print(&failure);
}
