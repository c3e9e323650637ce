//! Bare repositories in a private temp dir ([`GitRepos`]), each a [`BareRepo`] handle that
//! makes commits on `main` with git's plumbing (no work tree to go stale when someone pushes)
//! and reads back what a push left there. Every git command runs with the environment of
//! [`git_command`]: no system or user config, no prompts, a fixed author.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use tempfile::TempDir;

use crate::process::{CmdOutput, clean_command, keep_dirs, run_cmd};

/// Author and committer of the commits and tags the harness makes: (name, email).
pub const GIT_AUTHOR: (&str, &str) = ("Baton Test", "baton-test@example.invalid");

/// The date of every commit and tag the harness makes, so the same files give the same shas.
pub const GIT_DATE: &str = "2024-01-01T00:00:00+00:00";

/// The branch [`GitRepos::create`] and [`BareRepo::commit`] write.
pub const MAIN_BRANCH: &str = "main";

/// Environment that keeps a git process away from the machine's and the user's git config
/// (`/etc/gitconfig`, `~/.gitconfig`: a `commit.gpgsign`, an `init.defaultBranch`, a
/// credential helper) and from prompting on a terminal. [`git_command`] sets it; pass it to
/// a worker that runs git too.
pub const GIT_ISOLATION_ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Variable read by [`TOKEN_CREDENTIAL_HELPER`].
pub const TOKEN_ENV: &str = "BATON_TEST_GIT_TOKEN";

/// A credential helper (for `-c credential.helper=...`) that answers user `x` and the
/// password in [`TOKEN_ENV`], so the token is in neither the arguments nor a file.
pub const TOKEN_CREDENTIAL_HELPER: &str =
    "!f() { echo username=x; echo \"password=$BATON_TEST_GIT_TOKEN\"; }; f";

/// How long one git command of the harness may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);

/// `git` with [`GIT_ISOLATION_ENV`], the fixed author and committer ([`GIT_AUTHOR`],
/// [`GIT_DATE`]), and the environment scrubbed like every child of the harness (no `GIT_*`
/// from the developer's shell, e.g. a `GIT_DIR` set by a hook running the tests).
pub fn git_command() -> Command {
    let mut cmd = clean_command("git");
    cmd.envs(GIT_ISOLATION_ENV.iter().copied());
    let (name, email) = GIT_AUTHOR;
    for who in ["AUTHOR", "COMMITTER"] {
        cmd.env(format!("GIT_{who}_NAME"), name)
            .env(format!("GIT_{who}_EMAIL"), email)
            .env(format!("GIT_{who}_DATE"), GIT_DATE);
    }
    cmd
}

/// Runs `git <args>` in `dir` ([`git_command`]) and returns its output; an error holding
/// the command, exit code and stderr when it fails or takes over a minute.
pub fn run_git(dir: &Path, args: &[&str]) -> anyhow::Result<CmdOutput> {
    git_raw(dir, args, None, None)?.ensure_success()
}

/// `git <args>` in `dir` with `stdin` and, when given, `GIT_INDEX_FILE=index`, whatever its
/// exit code.
fn git_raw(
    dir: &Path,
    args: &[&str],
    stdin: Option<&str>,
    index: Option<&Path>,
) -> anyhow::Result<CmdOutput> {
    let mut cmd = git_command();
    cmd.current_dir(dir).args(args);
    if let Some(index) = index {
        cmd.env("GIT_INDEX_FILE", index);
    }
    run_cmd(cmd, stdin, GIT_TIMEOUT)
}

/// The trimmed stdout of `git <args>` (see [`git_raw`]); an error when git fails.
fn git_out(
    dir: &Path,
    args: &[&str],
    stdin: Option<&str>,
    index: Option<&Path>,
) -> anyhow::Result<String> {
    Ok(git_raw(dir, args, stdin, index)?
        .ensure_success()?
        .stdout
        .trim()
        .to_owned())
}

/// A private temp dir of bare repositories, removed on drop (kept with
/// `BATON_TEST_KEEP_DIRS=1`). Serve them with [`crate::GitDaemon`] and [`crate::GitHttp`];
/// the [`BareRepo`] handles it gives out are valid while it lives.
pub struct GitRepos {
    dir: Option<TempDir>,
    root: PathBuf,
}

impl GitRepos {
    /// Makes the temp dir.
    pub fn new() -> anyhow::Result<GitRepos> {
        let dir = tempfile::Builder::new()
            .prefix("baton-git-")
            .tempdir()
            .context("creating a temp dir for git repositories")?;
        let root = dir.path().to_path_buf();
        Ok(GitRepos {
            dir: Some(dir),
            root,
        })
    }

    /// The directory holding the repositories (the servers' base path).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes bare repository `name` with one commit on `main` holding `files` (path,
    /// contents). The name is a relative path such as `acme/parser.git`; `.git` is added when
    /// missing, so `acme/parser` names the same repository. The last two components are the
    /// owner and repository of [`crate::GitHubStandIn`].
    pub fn create(&self, name: &str, files: &[(&str, &str)]) -> anyhow::Result<BareRepo> {
        let name = repo_name(name)?;
        let path = self.root.join(&name);
        if path.exists() {
            bail!(
                "git repository {name} already exists in {}",
                self.root.display()
            );
        }
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        git_out(
            &path,
            &["init", "--quiet", "--bare", "--initial-branch", MAIN_BRANCH],
            None,
            None,
        )?;
        // Push over HTTP (`git http-backend`), and fetch a commit by sha as GitHub allows.
        for (key, value) in [
            ("http.receivepack", "true"),
            ("uploadpack.allowReachableSHA1InWant", "true"),
            ("uploadpack.allowFilter", "true"),
        ] {
            git_out(&path, &["config", key, value], None, None)?;
        }
        let repo = BareRepo { name, path };
        repo.commit(files, "Initial commit")?;
        Ok(repo)
    }

    /// The handle of repository `name` made earlier by [`GitRepos::create`].
    pub fn repo(&self, name: &str) -> anyhow::Result<BareRepo> {
        let name = repo_name(name)?;
        let path = self.root.join(&name);
        if !path.join("HEAD").is_file() {
            bail!("no git repository {name} in {}", self.root.display());
        }
        Ok(BareRepo { name, path })
    }
}

impl Drop for GitRepos {
    fn drop(&mut self) {
        if keep_dirs()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping git repositories in {}", dir.keep().display());
        }
    }
}

/// `name` checked to be a plain relative path (letters, digits, `.`, `_`, `-`, `/`; no `..`)
/// and ending in `.git`.
pub(crate) fn repo_name(name: &str) -> anyhow::Result<String> {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        && !name.ends_with('/')
        && !name.contains("//");
    if !plain {
        bail!(
            "bad git repository name {name:?}: use a relative path of letters, digits, `.`, `_`, \
             `-` and `/`, such as `acme/parser.git`"
        );
    }
    Ok(if name.ends_with(".git") {
        name.to_owned()
    } else {
        format!("{name}.git")
    })
}

/// One bare repository of a [`GitRepos`].
#[derive(Debug, Clone)]
pub struct BareRepo {
    name: String,
    path: PathBuf,
}

impl BareRepo {
    /// The handle of the repository `name` (checked by [`repo_name`]) at `path`.
    pub(crate) fn at(name: String, path: PathBuf) -> BareRepo {
        BareRepo { name, path }
    }

    /// Its name, ending in `.git` (`acme/parser.git`): what `url(name)` of the servers takes.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `git <args>` in the repository and returns its trimmed stdout.
    pub fn git(&self, args: &[&str]) -> anyhow::Result<String> {
        git_out(&self.path, args, None, None)
    }

    /// Makes a commit on `main` whose tree is main's (empty for the first commit) with
    /// `files` (path, contents) written over it, and returns its sha. Regular files, mode
    /// 644; directories are made as needed.
    pub fn commit(&self, files: &[(&str, &str)], message: &str) -> anyhow::Result<String> {
        let parent = self.branch_head(MAIN_BRANCH)?;
        let scratch = tempfile::Builder::new()
            .prefix("baton-git-commit-")
            .tempdir()
            .context("creating a temp dir for a commit")?;
        let index = scratch.path().join("index");
        let git = |args: &[&str], stdin: Option<&str>| {
            git_out(&self.path, args, stdin, Some(&index))
                .with_context(|| format!("committing to {}", self.name))
        };
        match &parent {
            Some(parent) => git(&["read-tree", parent], None)?,
            None => git(&["read-tree", "--empty"], None)?,
        };
        if !files.is_empty() {
            let mut blob_paths = Vec::new();
            for (n, (_, contents)) in files.iter().enumerate() {
                let blob = scratch.path().join(format!("blob-{n}"));
                fs::write(&blob, contents)
                    .with_context(|| format!("writing {}", blob.display()))?;
                blob_paths.push(blob.display().to_string());
            }
            let shas = git(
                &["hash-object", "-w", "--stdin-paths"],
                Some(&(blob_paths.join("\n") + "\n")),
            )?;
            let entries: String = shas
                .lines()
                .zip(files)
                .map(|(sha, (path, _))| format!("100644 {sha}\t{path}\n"))
                .collect();
            git(&["update-index", "--index-info"], Some(&entries))?;
        }
        let tree = git(&["write-tree"], None)?;
        let mut args = vec!["commit-tree", &tree];
        if let Some(parent) = &parent {
            args.extend(["-p", parent]);
        }
        args.extend(["-F", "-"]);
        let sha = git(&args, Some(message))?;
        let main = format!("refs/heads/{MAIN_BRANCH}");
        let old = parent.unwrap_or_default();
        git(&["update-ref", &main, &sha, &old], None)?;
        Ok(sha)
    }

    /// Makes the annotated tag `name` (message = the name) on commit `sha`.
    pub fn tag(&self, name: &str, sha: &str) -> anyhow::Result<()> {
        self.git(&["tag", "--annotate", "--message", name, name, sha])?;
        Ok(())
    }

    /// The commit branch `branch` points at, `None` when there is no such branch.
    pub fn branch_head(&self, branch: &str) -> anyhow::Result<Option<String>> {
        let reference = format!("refs/heads/{branch}^{{commit}}");
        let args = ["rev-parse", "--verify", "--quiet", &reference];
        let out = git_raw(&self.path, &args, None, None)?;
        match out.code {
            0 => Ok(Some(out.stdout.trim().to_owned())),
            1 => Ok(None),
            _ => bail!("reading branch {branch} of {}:\n{out}", self.name),
        }
    }

    /// The names of the repository's branches, sorted.
    pub fn branches(&self) -> anyhow::Result<Vec<String>> {
        let out = self.git(&["for-each-ref", "--format=%(refname:short)", "refs/heads/"])?;
        Ok(out.lines().map(str::to_owned).collect())
    }

    /// The commits of `branch`, newest first: (sha, subject). An error naming the branches
    /// there are when `branch` does not exist.
    pub fn commits(&self, branch: &str) -> anyhow::Result<Vec<(String, String)>> {
        let Some(head) = self.branch_head(branch)? else {
            bail!(
                "{} has no branch {branch}; its branches: {}",
                self.name,
                self.branches()?.join(", ")
            );
        };
        let out = self.git(&["log", "--format=%H%x09%s", &head, "--"])?;
        Ok(out
            .lines()
            .map(|l| {
                let (sha, subject) = l.split_once('\t').unwrap_or((l, ""));
                (sha.to_owned(), subject.to_owned())
            })
            .collect())
    }

    /// The contents of `path` at commit (or branch, tag) `rev`.
    pub fn show(&self, rev: &str, path: &str) -> anyhow::Result<String> {
        let object = format!("{rev}:{path}");
        let out = git_raw(&self.path, &["cat-file", "blob", &object], None, None)?;
        if !out.success() {
            bail!("{} has no file {path} at {rev}:\n{out}", self.name);
        }
        Ok(out.stdout)
    }

    /// Installs hook `hook` (`pre-receive`, `update`, ...) running `script` (`#!/bin/sh` is
    /// put in front when it has no `#!` line). A `pre-receive` hook that exits non-zero
    /// refuses a push, as a protected branch does.
    pub fn set_hook(&self, hook: &str, script: &str) -> anyhow::Result<()> {
        if hook.is_empty() || !hook.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
            bail!("bad git hook name {hook:?}: use a name such as `pre-receive`");
        }
        let dir = self.path.join("hooks");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(hook);
        let text = if script.starts_with("#!") {
            script.to_owned()
        } else {
            format!("#!/bin/sh\n{script}")
        };
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", path.display()))?;
        Ok(())
    }
}
