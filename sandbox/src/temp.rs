//! The private temp dir of each confined process (`TMPDIR`, and `HOME` under the sandbox
//! user), and the sweep of those a killed worker left behind.

use std::ffi::OsString;
use std::path::Path;

/// The name prefix of every private temp dir; `<prefix><worker pid>-` is a worker's.
const TEMP_PREFIX: &str = "baton-tool-";

/// The name prefix of the private temp dirs of worker process `pid`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn temp_prefix(pid: u32) -> String {
    format!("{TEMP_PREFIX}{pid}-")
}

/// The environment pointing a process at its private temp dir `temp` (and `HOME` there too
/// when `home`: the sandbox user's own home is not its to write).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn temp_env(temp: &Path, home: bool) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = ["TMPDIR", "TMP", "TEMP"]
        .into_iter()
        .map(|name| (name, temp.as_os_str().to_owned()))
        .collect();
    if home {
        env.push(("HOME", temp.as_os_str().to_owned()));
    }
    env
}

/// Removes the private temp dirs (in the system temp dir) that workers no longer running left
/// behind: a worker killed outright (`kill -9`, OOM) cannot remove those of its calls in
/// flight, and what a command wrote there (build caches, downloads) would pile up. Dirs of
/// live processes are left alone. Returns how many were removed.
pub fn sweep_stale_temp_dirs() -> usize {
    sweep_temp_dirs_in(&std::env::temp_dir())
}

fn sweep_temp_dirs_in(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use tempfile::TempDir;

    use super::*;

    #[test]
    fn temp_dirs_of_dead_workers_are_swept() {
        let dir = TempDir::new().unwrap();
        let dead = dir.path().join(format!("{}x1", temp_prefix(4_194_305)));
        let live = dir
            .path()
            .join(format!("{}x2", temp_prefix(std::process::id())));
        let other = dir.path().join("baton-tool-abc");
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d.join("cache")).unwrap();
        }
        assert_eq!(sweep_temp_dirs_in(dir.path()), 1);
        assert!(!dead.exists() && live.exists() && other.exists());
    }
}
