//! `docs/src/reference/cli.md` is generated from the clap definitions, so the reference cannot
//! drift from the CLI: the test fails when a command, flag or help text changes and the page
//! does not. `BATON_BLESS=1 cargo test -p baton-cli cli_reference` rewrites the page.

use clap::CommandFactory;

use crate::cli::Cli;

const PAGE: &str = "docs/src/reference/cli.md";

/// The page: an introduction, then each command's long help, depth first, in the order
/// `baton --help` lists them.
fn reference() -> String {
    let mut cli = without_env_values(Cli::command());
    cli.build();
    let mut out = [
        "# CLI reference",
        "",
        "<!-- Generated from the CLI's clap definitions by client/src/cli_reference.rs: do not",
        "edit. BATON_BLESS=1 cargo test -p baton-cli cli_reference rewrites it. -->",
        "",
        "Every command of `baton`, with its flags, as `baton COMMAND --help` prints them. Flags",
        "that read an environment variable say so (`[env: ...]`). For what a run does with",
        "them, see the guide; for `--json` output, [JSON output](json.md).",
        "",
    ]
    .join("\n");
    section(&mut cli, "baton", &mut out);
    out
}

/// `cmd` with the environment's values left out of every `[env: NAME]`, so the page does not
/// depend on the environment the test runs in.
fn without_env_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| arg.hide_env_values(true))
        .mut_subcommands(without_env_values)
}

fn section(cmd: &mut clap::Command, path: &str, out: &mut String) {
    let help = cmd.render_long_help().to_string();
    let help: Vec<&str> = help.lines().map(str::trim_end).collect();
    out.push_str(&format!(
        "\n## `{path}`\n\n```text\n{}\n```\n",
        help.join("\n")
    ));
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .map(|c| c.get_name().to_owned())
        .collect();
    for name in names {
        if let Some(sub) = cmd.find_subcommand_mut(&name) {
            section(sub, &format!("{path} {name}"), out);
        }
    }
}

#[test]
fn cli_reference_page_matches_the_cli() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(PAGE);
    let generated = reference();
    if std::env::var_os("BATON_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{PAGE} does not match the CLI (a command, flag or help text changed): run \
         `BATON_BLESS=1 cargo test -p baton-cli cli_reference` and commit the page"
    );
}

#[test]
fn the_reference_covers_every_flag() {
    let page = reference();
    let mut cli = Cli::command();
    cli.build();
    let mut missing = Vec::new();
    let mut stack = vec![cli];
    while let Some(cmd) = stack.pop() {
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long()
                && !page.contains(&format!("--{long}"))
            {
                missing.push(format!("{} --{long}", cmd.get_name()));
            }
        }
        stack.extend(cmd.get_subcommands().cloned());
    }
    assert!(
        missing.is_empty(),
        "flags missing from the reference: {missing:?}"
    );
}
