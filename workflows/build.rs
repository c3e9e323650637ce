//! Sets `BATON_BUILD_ID`, the default Worker Deployment build id of every binary built from
//! this tree: `<version>-<git sha, 12>` for a clean checkout. When the workflow code (this
//! crate, the pure core it drives, or the proto contract) differs from the commit, or there is no git, a fingerprint of
//! that code is added (`-dirty-<fp>` / `-src-<fp>`), so two builds whose workflow code differs
//! never share a build id. `BATON_BUILD_ID` in the build's environment overrides it all (image
//! builds without `.git`).

// Build time, not workflow code: the crate's determinism rules (clippy.toml) do not apply.
#![allow(clippy::disallowed_methods)]

use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    println!("cargo:rerun-if-env-changed=BATON_BUILD_ID");
    if let Ok(id) = std::env::var("BATON_BUILD_ID")
        && !id.trim().is_empty()
    {
        println!("cargo:rustc-env=BATON_BUILD_ID={}", id.trim());
        return;
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let sources = [
        manifest.join("src"),
        manifest.join("../core/src"),
        manifest.join("../proto/proto"),
    ];
    for dir in &sources {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let fingerprint = || format!("{:016x}", fingerprint(&sources))[..10].to_owned();
    let id = match git(&manifest, &["rev-parse", "HEAD"]) {
        Some(sha) => {
            watch_git(&manifest);
            let sha = &sha[..sha.len().min(12)];
            let dirty = git(
                &manifest,
                &[
                    "status",
                    "--porcelain",
                    "--",
                    ".",
                    "../core",
                    "../proto/proto",
                ],
            )
            .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{version}-{sha}-dirty-{}", fingerprint())
            } else {
                format!("{version}-{sha}")
            }
        }
        None => format!("{version}-src-{}", fingerprint()),
    };
    println!("cargo:rustc-env=BATON_BUILD_ID={id}");
}

/// `git args` in `dir`, trimmed, or None when git or the repository is missing.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Reruns this script when the commit moves: HEAD itself (a checkout, a detached HEAD) and the
/// branch it points to, as a loose ref file or else in `packed-refs`. Only paths that exist
/// are watched (cargo reruns a script for a watched path that is missing, on every build),
/// and never the index: `git add` or `git status` changes neither the commit nor the workflow
/// sources, whose own changes rerun the script through their directories.
fn watch_git(dir: &Path) {
    let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    let git_dir = PathBuf::from(git_dir);
    // A linked worktree has its own HEAD; the refs live in the common directory.
    let common = git(
        dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .map_or_else(|| git_dir.clone(), PathBuf::from);
    let mut watched = vec![git_dir.join("HEAD")];
    if let Some(head) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        let loose = common.join(&head);
        let packed = common.join("packed-refs");
        if loose.is_file() {
            watched.push(loose);
        } else if packed.is_file() {
            watched.push(packed);
        }
    }
    for file in watched.iter().filter(|f| f.exists()) {
        println!("cargo:rerun-if-changed={}", file.display());
    }
}

/// FNV-1a over every file's relative path and bytes under `dirs`, in sorted order.
fn fingerprint(dirs: &[PathBuf]) -> u64 {
    let mut files = Vec::new();
    for dir in dirs {
        collect(dir, &mut files);
    }
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        for b in name.unwrap_or_default().bytes().chain(bytes) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}
