//! Where a submitted run's workspace comes from (`submit --workspace-from`, `--git`,
//! `--workspace-of`) and what it does with its changes (`--deliver`): flags to the spec's
//! `workspace` and `deliver`, checked before the run starts.

use baton_proto::{
    Delivery, GitSource, RunSpec, SnapshotSource, WorkspaceSource, workspace_source,
};
use baton_store::snapshot::{self, UploadError, UploadOptions};
use temporalio_client::Client;

use crate::{blobs, cli::SubmitArgs, exit::Exit, inspect};

/// Checks the source and delivery flags that need nothing but themselves (before connecting).
pub(crate) fn check_flags(args: &SubmitArgs) -> Result<(), Exit> {
    if let Some(url) = &args.workspace.git {
        check_git_url(url)?;
    }
    if let Some(dir) = &args.workspace.workspace_from
        && !dir.is_dir()
    {
        return Err(Exit::usage(format!(
            "--workspace-from {}: no such directory; pass the directory to start the run from \
             (e.g. `.` for the current checkout)",
            dir.display()
        )));
    }
    if let Some(mode) = args.workspace.deliver
        && args.workspace.git.is_none()
        && args.workspace.workspace_of.is_none()
    {
        return Err(Exit::usage(format!(
            "--deliver {} pushes to the run's git repository: start the run with --git URL \
             [--ref REF] (the worker clones it and pushes back with its own credentials), or \
             --workspace-of a run that delivered; for a --workspace-from run use \
             `baton apply RUN` in a later job instead",
            mode.as_str()
        )));
    }
    Ok(())
}

/// A git URL the worker can clone, without credentials (they would be recorded in history).
fn check_git_url(url: &str) -> Result<(), Exit> {
    let url = url.trim();
    if url.is_empty() {
        return Err(Exit::usage("--git needs a repository URL"));
    }
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None if url.contains("::") => {
            return Err(Exit::usage(format!(
                "--git {url}: git's transport helpers (ext::, fd::) are not allowed; use an \
                 https://, ssh:// or git:// URL"
            )));
        }
        // scp-like `git@github.com:org/repo.git`
        None if url.contains(':') && !url.starts_with('/') => ("ssh", url),
        None => {
            return Err(Exit::usage(format!(
                "--git {url}: not a URL the workers can clone; use https://host/org/repo.git, \
                 ssh://, git:// or file:// (a local path means nothing on the workers)"
            )));
        }
    };
    if !matches!(scheme, "https" | "http" | "ssh" | "git" | "file") {
        return Err(Exit::usage(format!(
            "--git {url}: unsupported scheme '{scheme}'; use https, http, ssh, git or file"
        )));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if matches!(scheme, "https" | "http") && authority.contains('@') {
        return Err(Exit::usage(
            "--git: the URL holds credentials (user:token@host); the URL is recorded in the \
             run's history, so give the token to the workers instead: \
             [git.credentials.\"HOST\"] token_env = \"VAR\" in their settings",
        ));
    }
    Ok(())
}

/// The spec's `workspace` and `deliver` from the flags: uploads `--workspace-from`, looks up
/// the run of `--workspace-of`.
pub(crate) async fn apply_source(
    args: &SubmitArgs,
    client: &Client,
    spec: &mut RunSpec,
) -> Result<(), Exit> {
    let source = if let Some(dir) = &args.workspace.workspace_from {
        Some(upload(args, dir).await?)
    } else if let Some(url) = &args.workspace.git {
        Some(workspace_source::Source::Git(GitSource {
            url: url.trim().to_owned(),
            r#ref: args.workspace.git_ref.clone().unwrap_or_default(),
        }))
    } else if let Some(run) = &args.workspace.workspace_of {
        Some(follow_up(args, client, run).await?)
    } else {
        None
    };
    spec.workspace = source.map(|source| WorkspaceSource {
        source: Some(source),
    });
    spec.deliver = args.workspace.deliver.map(|mode| Delivery {
        mode: mode.as_str().to_owned(),
        branch: args.workspace.branch.clone().unwrap_or_default(),
        draft: args.workspace.pr_draft,
        onto_source: false,
    });
    Ok(())
}

async fn upload(
    args: &SubmitArgs,
    dir: &std::path::Path,
) -> Result<workspace_source::Source, Exit> {
    let store = blobs::open().map_err(|e| {
        Exit::usage(format!(
            "--workspace-from uploads to the workers' blob store, which cannot be opened here \
             ({e}); set BATON_STORE__DIR (a shared directory) or BATON_STORE__S3__* like the \
             workers', with write access"
        ))
    })?;
    let options = UploadOptions {
        max_total_bytes: args
            .workspace
            .max_upload_size
            .unwrap_or(snapshot::DEFAULT_MAX_UPLOAD),
    };
    let started = std::time::Instant::now();
    let uploaded = snapshot::upload_dir(store.as_ref(), dir, &options)
        .await
        .map_err(|e| match e {
            UploadError::Snapshot(e) => Exit::infra(format!(
                "cannot upload {} to the blob store: {e}",
                dir.display()
            )),
            other => Exit::usage(other.to_string()),
        })?;
    eprintln!(
        "uploaded {}: {} files, {} ({} new, {} sent) in {:.1}s{}",
        dir.display(),
        uploaded.files,
        snapshot::human_size(uploaded.total_bytes),
        uploaded.uploaded,
        snapshot::human_size(uploaded.uploaded_bytes),
        started.elapsed().as_secs_f64(),
        uploaded
            .commit
            .as_deref()
            .map(|c| format!(", commit {}", c.get(..12).unwrap_or(c)))
            .unwrap_or_default()
    );
    if !uploaded.skipped.is_empty() {
        eprintln!(
            "left out (not regular files, links or directories, or unreadable): {}",
            uploaded.skipped.join(", ")
        );
    }
    let origin = std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string();
    Ok(workspace_source::Source::Snapshot(SnapshotSource {
        id: uploaded.id.to_string(),
        commit: uploaded.commit.unwrap_or_default(),
        origin,
        ..SnapshotSource::default()
    }))
}

/// `--workspace-of RUN`: the final workspace of an ended run; it builds on the commit that run
/// pushed, if it delivered one.
async fn follow_up(
    args: &SubmitArgs,
    client: &Client,
    run: &str,
) -> Result<workspace_source::Source, Exit> {
    let h = crate::connect::handle(client, run);
    let result = match inspect::ended_result(&h, run).await? {
        Ok(result) => result,
        Err(state) => {
            return Err(Exit::usage(format!(
                "--workspace-of {run}: that run has not ended ({}), so its final workspace is \
                 not known yet; wait for it (`baton result {run} --wait`) and submit again",
                state.as_str_name()
            )));
        }
    };
    let Some(changes) = result.changes.filter(|c| !c.final_snapshot.is_empty()) else {
        return Err(Exit::usage(format!(
            "--workspace-of {run}: that run recorded no final workspace (it ran on a baton \
             version that did not collect changes, or never touched its workspace)"
        )));
    };
    let pushed = result
        .delivered
        .filter(|d| d.error.is_empty() && !d.commit.is_empty() && !d.url.is_empty());
    if args.workspace.deliver.is_some() && pushed.is_none() {
        return Err(Exit::usage(format!(
            "--deliver with --workspace-of {run}: that run's changes were not pushed, so there is \
             no commit to build on; start from --git URL --ref REF instead"
        )));
    }
    Ok(workspace_source::Source::Snapshot(SnapshotSource {
        id: changes.final_snapshot,
        commit: pushed
            .as_ref()
            .map(|d| d.commit.clone())
            .unwrap_or_default(),
        from_run: run.to_owned(),
        origin: format!("run {run}"),
        git: pushed.map(|d| GitSource {
            url: d.url,
            r#ref: d.branch,
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::check_git_url;

    #[test]
    fn git_urls_without_credentials_pass_and_others_say_why_not() {
        for ok in [
            "https://github.com/acme/parser.git",
            "git://127.0.0.1:9418/acme/parser.git",
            "git@github.com:acme/parser.git",
            "file:///srv/git/parser.git",
        ] {
            assert!(check_git_url(ok).is_ok(), "{ok}");
        }
        let e =
            check_git_url("https://x-access-token:ghp_secret@github.com/acme/p.git").unwrap_err();
        assert!(e.message.contains("token_env"), "{}", e.message);
        assert!(!e.message.contains("ghp_secret"), "{}", e.message);
        let e = check_git_url("./here").unwrap_err();
        assert!(e.message.contains("local path"), "{}", e.message);
        let e = check_git_url("ext::sh -c touch% /tmp/pwned").unwrap_err();
        assert!(e.message.contains("not allowed"), "{}", e.message);
        let e = check_git_url("ftp://h/r").unwrap_err();
        assert!(
            e.message.contains("unsupported scheme 'ftp'"),
            "{}",
            e.message
        );
    }
}
