//! Tool processes that outlived their call.
//!
//! A call's processes are killed as a group when the call ends, and `sh` dies with its worker
//! (`PR_SET_PDEATHSIG`), but a worker killed outright (`kill -9`, OOM, a second SIGTERM) cannot
//! kill the rest of the group: a background job such as `(sleep 25; echo late >> f) &` lives on
//! and writes into the workspace after the call was retried elsewhere, breaking exactly-once.
//!
//! Every tool process carries two environment variables that find them again:
//! [`WORKER_ENV`] (`<pid namespace>:<pid>:<start time>` of the worker that ran it: a worker
//! judges only workers of its own pid namespace, as pids mean nothing across them; the start
//! time tells a live worker from a new process that got a dead one's pid) and the call's idempotency
//! key (`BATON_IDEMPOTENCY_KEY`, `<run>/<call>`). Before a retried call runs, the processes of
//! its earlier attempts on this host are killed ([`kill_call`]); a starting worker kills those
//! whose worker is gone ([`kill_orphans`]); a worker exiting without waiting kills its own
//! ([`kill_of_worker`]). Best effort: a process that clears its environment or leaves for
//! another host is not found. Sandboxed calls on hosts that give them a PID namespace
//! ([`baton_sandbox::Prepared::own_pid_namespace`]) need none of this: the namespace's
//! supervisor dies with the worker and takes every process of the call with it.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The environment variable naming the worker a tool process belongs to.
pub const WORKER_ENV: &str = "BATON_WORKER";
/// The environment variable holding a call's idempotency key (`<run id>/<call id>`).
pub const CALL_ENV: &str = "BATON_IDEMPOTENCY_KEY";

/// Rounds of look-and-kill: a process may fork while the first round kills its parent.
const ROUNDS: usize = 20;
const BETWEEN_ROUNDS: Duration = Duration::from_millis(25);

/// This worker's [`WORKER_ENV`] value: `<pid namespace>:<pid>:<start time in clock ticks>`.
pub fn this_worker() -> String {
    let pid = std::process::id();
    format!(
        "{}:{pid}:{}",
        pid_namespace(),
        start_time(pid).unwrap_or_default()
    )
}

/// The inode of this process's pid namespace (`/proc/self/ns/pid` -> `pid:[4026531836]`).
fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            l.to_str()
                .and_then(|l| l.strip_prefix("pid:["))
                .and_then(|l| l.strip_suffix(']'))
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// Kills the processes of call `key` (every attempt's) on this host. Returns how many.
pub fn kill_call(key: &str) -> usize {
    kill_where(|env| env_value(env, CALL_ENV) == Some(key.as_bytes()))
}

/// Kills the tool processes of workers that are no longer running. Returns how many.
pub fn kill_orphans() -> usize {
    kill_where(|env| {
        env_value(env, WORKER_ENV)
            .and_then(|v| std::str::from_utf8(v).ok())
            .is_some_and(|worker| !is_running(worker))
    })
}

/// Kills the tool processes of the worker `worker` (a [`this_worker`] value). Returns how many.
pub fn kill_of_worker(worker: &str) -> usize {
    kill_where(|env| env_value(env, WORKER_ENV) == Some(worker.as_bytes()))
}

/// Whether the worker `<pid namespace>:<pid>:<start time>` still runs. A worker of another
/// pid namespace (another container seen from the host) is taken as running: its pid cannot be
/// looked up from here.
fn is_running(worker: &str) -> bool {
    let Some((namespace, worker)) = worker.split_once(':') else {
        return false;
    };
    if namespace != pid_namespace() {
        return true;
    }
    let Some((pid, started)) = worker.split_once(':') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    start_time(pid).is_some_and(|t| t.to_string() == started)
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> Option<u64> {
    stat_field(Path::new(&format!("/proc/{pid}")), 22)
}

/// Field 5 of a process's `stat` (`proc` is its `/proc/<pid>` directory): its process group.
#[cfg(test)]
pub(crate) fn process_group(proc: &Path) -> Option<u32> {
    stat_field(proc, 5)
}

/// Field `n` (1-based, as proc(5) numbers them; `n` > 2) of `proc`/stat.
fn stat_field<T: std::str::FromStr>(proc: &Path, n: usize) -> Option<T> {
    let stat = std::fs::read_to_string(proc.join("stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(n - 3)?.parse().ok()
}

/// The value of `name` in a NUL-separated environment block.
fn env_value<'a>(env: &'a [u8], name: &str) -> Option<&'a [u8]> {
    env.split(|&b| b == 0).find_map(|var| {
        var.strip_prefix(name.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}

/// SIGKILLs every live process (not this one) whose environment satisfies `matches`, in
/// rounds until none is left (or [`ROUNDS`] passed). Returns how many were killed.
fn kill_where(matches: impl Fn(&[u8]) -> bool) -> usize {
    let own = std::process::id();
    // Distinct processes: one killed in a round may still be dying (not yet a zombie) in
    // the next, and is signalled again.
    let mut killed = std::collections::BTreeSet::new();
    for round in 0..ROUNDS {
        let found: Vec<u32> = pids()
            .filter(|&pid| pid != own)
            .filter(|&pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| matches(&env))
            })
            .filter(|&pid| !is_zombie(pid))
            .collect();
        if found.is_empty() {
            break;
        }
        for pid in found {
            if let Ok(pid) = i32::try_from(pid)
                && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
            {
                killed.insert(pid);
            }
        }
        if round + 1 < ROUNDS {
            std::thread::sleep(BETWEEN_ROUNDS);
        }
    }
    killed.len()
}

fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir(Path::new("/proc"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};

    /// A `sleep` in a session of its own (no process group of ours) with `env`.
    fn detached_sleep(env: &[(&str, &str)]) -> Child {
        let mut command = Command::new("sleep");
        command.arg("30").envs(env.iter().copied());
        // SAFETY: setsid(2) is async-signal-safe and allocates nothing.
        unsafe {
            command.pre_exec(|| nix::unistd::setsid().map(drop).map_err(Into::into));
        }
        command.spawn().unwrap()
    }

    /// Waits until `child` runs the `sleep` program with `needle` in its environment (what the
    /// sweep reads in `/proc`), at most 5 s: right after spawn, /proc may still show the
    /// forked test process.
    fn wait_exec(child: &Child, needle: &str) {
        let environ = format!("/proc/{}/environ", child.id());
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let env = std::fs::read(&environ).unwrap_or_default();
            let cmd = std::fs::read(&cmdline).unwrap_or_default();
            let has = |haystack: &[u8], needle: &[u8]| {
                haystack.windows(needle.len().max(1)).any(|w| w == needle)
            };
            if cmd.starts_with(b"sleep") && has(&env, needle.as_bytes()) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "process {} did not exec sleep within 5 s",
                child.id()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether `child` was killed by SIGKILL (waits for it, bounded by the sleep itself).
    fn was_killed(child: &mut Child) -> bool {
        use std::os::unix::process::ExitStatusExt;
        for _ in 0..200 {
            if let Some(status) = child.try_wait().unwrap() {
                return status.signal() == Some(libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_calls_processes_are_found_by_its_key_and_no_others() {
        let key = format!("run-orphans-{}/call_1_1", std::process::id());
        let mut ours = detached_sleep(&[(CALL_ENV, &key)]);
        let other_key = format!("{key}0");
        let mut other = detached_sleep(&[(CALL_ENV, &other_key)]);
        wait_exec(&ours, &key);
        wait_exec(&other, &other_key);
        assert_eq!(kill_call(&key), 1);
        assert!(was_killed(&mut ours));
        assert!(
            other.try_wait().unwrap().is_none(),
            "another call's process lives on"
        );
        assert_eq!(kill_call(&other_key), 1);
        assert!(was_killed(&mut other));
    }

    #[test]
    fn processes_of_dead_workers_are_killed_and_of_live_ones_kept() {
        // A "worker" of its own (not this test process, whose marker the shell tests running
        // next to this one use).
        let mut worker = detached_sleep(&[]);
        let ns = pid_namespace();
        let started = start_time(worker.id()).unwrap();
        let live = format!("{ns}:{}:{started}", worker.id());
        let dead = format!("{ns}:{}:{}", worker.id(), started + 1);
        assert!(is_running(&live));
        assert!(!is_running(&dead));
        assert!(is_running(&this_worker()));
        // Another namespace's worker is not ours to judge.
        assert!(is_running(&format!(
            "1{ns}:{}:{}",
            worker.id(),
            started + 1
        )));
        let mut orphan = detached_sleep(&[(WORKER_ENV, &dead)]);
        let mut kept = detached_sleep(&[(WORKER_ENV, &live)]);
        wait_exec(&orphan, &dead);
        wait_exec(&kept, &live);
        assert!(kill_orphans() >= 1);
        assert!(was_killed(&mut orphan));
        assert!(
            kept.try_wait().unwrap().is_none(),
            "a live worker's process is kept"
        );
        assert_eq!(kill_of_worker(&live), 1);
        assert!(was_killed(&mut kept));
        worker.kill().unwrap();
        worker.wait().unwrap();
    }
}
