//! What a run hands back, on the submitting side: `baton diff` (the change set as a git-style
//! patch, or `--stat`), `baton apply` (onto a directory, atomically, through `git apply`) and
//! `baton download` (the final files). Neither writes in a `.git` directory or outside the
//! target (`patch_paths`, `changes::extract`). The change set's patch and files live in the blob store;
//! the run's result names them.

use std::borrow::Cow;

use std::{io::Write, path::Path, process::Stdio};

use baton_proto::Changes;
use baton_store::{BlobId, SharedStore, changes};

use crate::{
    blobs,
    cli::{ApplyArgs, DiffArgs, DownloadArgs},
    connect::{connect, handle},
    exit::{self, Exit},
    inspect, json, patch_paths,
};

/// The ended run's change set and the store holding it.
async fn changes_of(run: &str) -> Result<(Changes, SharedStore), Exit> {
    let client = connect().await?;
    let h = handle(&client, run);
    let result = match inspect::ended_result(&h, run).await? {
        Ok(result) => result,
        Err(state) => {
            return Err(Exit {
                code: exit::WAIT_TIMEOUT,
                message: format!(
                    "run {run} has not ended ({}); its change set is collected when it ends: \
                     `baton result {run} --wait`, then try again",
                    state.as_str_name()
                ),
                transient: false,
            });
        }
    };
    let Some(changes) = result.changes else {
        return Err(Exit::usage(format!(
            "run {run} has no change set: it ran on a baton version that did not collect one"
        )));
    };
    if !changes.error.is_empty() {
        return Err(Exit::infra(format!(
            "run {run}'s change set could not be collected: {}",
            changes.error
        )));
    }
    let store = blobs::open().map_err(|e| {
        Exit::usage(format!(
            "the change set is in the workers' blob store, which cannot be opened here ({e}); \
             set BATON_STORE__DIR or BATON_STORE__S3__* like the workers'"
        ))
    })?;
    Ok((changes, store))
}

/// The patch text of a change set ("" when nothing changed).
async fn patch_of(run: &str, changes: &Changes, store: &SharedStore) -> Result<Vec<u8>, Exit> {
    if changes.patch.is_empty() {
        return Ok(Vec::new());
    }
    let id = BlobId::parse(&changes.patch)
        .map_err(|e| Exit::infra(format!("run {run}: bad patch id: {e}")))?;
    store.get(&id).await.map_err(|e| {
        Exit::infra(format!(
            "cannot read run {run}'s patch {id} from the blob store: {e}"
        ))
    })
}

/// `baton diff RUN [--stat]`.
pub(crate) async fn diff(args: DiffArgs) -> Result<i32, Exit> {
    let (changes, store) = changes_of(&args.run).await?;
    if args.json {
        let patch = if args.stat {
            None
        } else {
            Some(
                String::from_utf8_lossy(&patch_of(&args.run, &changes, &store).await?).into_owned(),
            )
        };
        json::print(&json::Diff {
            run_id: Cow::from(&args.run),
            changes: json::ChangeSet::from(&changes),
            patch,
        })?;
        return Ok(exit::COMPLETED);
    }
    if args.stat {
        print!("{}", changes::diffstat_of(&changes));
        return Ok(exit::COMPLETED);
    }
    let patch = patch_of(&args.run, &changes, &store).await?;
    if patch.is_empty() {
        eprintln!("run {} changed nothing", args.run);
    }
    std::io::stdout()
        .write_all(&patch)
        .map_err(|e| Exit::infra(format!("cannot write the patch: {e}")))?;
    Ok(exit::COMPLETED)
}

/// `baton apply RUN [--check] [-C DIR]`.
pub(crate) async fn apply(args: ApplyArgs) -> Result<i32, Exit> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()
            .map_err(|e| Exit::infra(format!("cannot read the current directory: {e}")))?,
    };
    if !dir.is_dir() {
        return Err(Exit::usage(format!(
            "-C {}: no such directory",
            dir.display()
        )));
    }
    let (changes, store) = changes_of(&args.run).await?;
    let patch = patch_of(&args.run, &changes, &store).await?;
    if patch.is_empty() {
        eprintln!("run {} changed nothing; nothing to apply", args.run);
        return Ok(exit::COMPLETED);
    }
    // The patch comes from the run: no path outside `dir`, in a `.git` directory or
    // through a link, whatever `git apply` would make of it.
    patch_paths::check(&dir, &patch).map_err(|refused| {
        Exit::usage(format!(
            "run {}'s change set names paths baton does not apply; nothing was changed:\n  \
             {refused}\n(`baton diff {}` shows the patch; `baton download {} DIR` writes the \
             run's other files, never git's own)",
            args.run, args.run, args.run
        ))
    })?;
    // `git apply` checks every hunk before it writes anything: on a conflict nothing changes.
    git_apply(&dir, &patch, true)?;
    if args.check {
        eprintln!(
            "run {}'s change set applies cleanly to {} ({} files)",
            args.run,
            dir.display(),
            changes.files_changed
        );
        return Ok(exit::COMPLETED);
    }
    git_apply(&dir, &patch, false)?;
    eprintln!(
        "applied run {}'s change set to {}: {} files changed, +{} -{}",
        args.run,
        dir.display(),
        changes.files_changed,
        changes.insertions,
        changes.deletions
    );
    Ok(exit::COMPLETED)
}

/// Runs `git apply [--check]` of `patch` in `dir`, as a plain patch tool relative to `dir`
/// (a repository above `dir` is not looked for: its paths would shift the patch's).
fn git_apply(dir: &Path, patch: &[u8], check: bool) -> Result<(), Exit> {
    let mut command = std::process::Command::new("git");
    command.arg("apply");
    if check {
        command.arg("--check");
    }
    command
        .arg("--whitespace=nowarn")
        .arg("-")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(parent) = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.parent().map(Path::to_path_buf))
    {
        command.env("GIT_CEILING_DIRECTORIES", parent);
    }
    let mut child = command.spawn().map_err(|e| {
        Exit::infra(format!(
            "baton apply runs `git apply`, which could not start ({e}); install git"
        ))
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(patch)
            .map_err(|e| Exit::infra(format!("cannot pass the patch to git apply: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Exit::infra(format!("git apply failed to run: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(Exit::usage(format!(
        "the change set does not apply to {}; nothing was changed.\n{}\n(see the patch with \
         `baton diff RUN`; `baton download RUN DIR` writes the run's final files instead)",
        dir.display(),
        conflict_summary(&stderr)
    )))
}

/// git's own lines about the failing file and hunk, without its noise.
fn conflict_summary(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return "git apply refused it without saying why".to_owned();
    }
    lines
        .iter()
        .map(|l| format!("  {}", l.strip_prefix("error: ").unwrap_or(l)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `baton download RUN DIR [--path GLOB]...`.
pub(crate) async fn download(args: DownloadArgs) -> Result<i32, Exit> {
    let mut globs = globset::GlobSetBuilder::new();
    for pattern in &args.paths {
        let glob = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| Exit::usage(format!("--path {pattern}: not a glob ({e})")))?;
        globs.add(glob);
    }
    let globs = globs
        .build()
        .map_err(|e| Exit::usage(format!("--path: {e}")))?;
    let (changes, store) = changes_of(&args.run).await?;
    let id = BlobId::parse(&changes.final_snapshot)
        .map_err(|e| Exit::infra(format!("run {}: bad final snapshot id: {e}", args.run)))?;
    let all = args.paths.is_empty();
    let filter = |path: &str| all || globs.is_match(path);
    let extracted = changes::extract(store.as_ref(), &id, &args.dir, &filter)
        .await
        .map_err(|e| Exit::infra(format!("cannot download run {}'s files: {e}", args.run)))?;
    // Left out on purpose, and the only thing that can be: the exit code stays 0 (anything
    // else that cannot be written is an error above), stderr says what and why.
    for (git_dir, entries) in &extracted.left_out {
        eprintln!(
            "left out {git_dir}/ ({entries} file{} or link{}): baton never writes git's own \
             files (config, hooks) from a run's tree, as they could run commands on this \
             machine",
            if *entries == 1 { "" } else { "s" },
            if *entries == 1 { "" } else { "s" },
        );
    }
    if args.json {
        json::print(&json::Downloaded {
            run_id: Cow::from(&args.run),
            dir: Cow::from(&args.dir.display().to_string()),
            files: extracted.files,
            bytes: extracted.bytes,
            left_out: extracted
                .left_out
                .iter()
                .map(|(path, entries)| json::LeftOut {
                    path: Cow::from(path),
                    entries: *entries,
                })
                .collect(),
        })?;
    } else {
        eprintln!(
            "wrote {} files ({}) of run {} into {}",
            extracted.files,
            baton_store::snapshot::human_size(extracted.bytes),
            args.run,
            args.dir.display()
        );
    }
    if extracted.files == 0 && !all {
        return Err(Exit::usage(format!(
            "no file of run {}'s final workspace matches {}",
            args.run,
            args.paths.join(", ")
        )));
    }
    Ok(exit::COMPLETED)
}

#[cfg(test)]
mod tests {
    use super::conflict_summary;

    #[test]
    fn a_conflict_names_the_file_and_the_hunk_as_git_does() {
        let stderr = "error: patch failed: src/lib.rs:3\nerror: src/lib.rs: patch does not apply\n";
        assert_eq!(
            conflict_summary(stderr),
            "  patch failed: src/lib.rs:3\n  src/lib.rs: patch does not apply"
        );
    }
}
