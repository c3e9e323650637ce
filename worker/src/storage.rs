//! What the worker sets up before it connects its workers: the workspace root and blob store
//! ([`open_storage`], with the start-up checks `traversable` and `writable`), and the sandbox
//! of tool processes ([`sandbox_settings`]: the Temporal frontend's addresses protected, kept
//! up to date by `refresh_frontend`, and every credential path hidden).

use std::time::Duration;

use tracing::{info, warn};

use crate::settings::Settings;
use crate::{ConfigContext, hidden};

/// Where the worker keeps things: its workspace root (made, writable, reachable by the
/// sandbox user) and the blob store (with the local read-through cache when configured).
pub(crate) struct Storage {
    pub(crate) workspace_root: std::path::PathBuf,
    pub(crate) store: baton_store::SharedStore,
    pub(crate) cache_counters: Option<std::sync::Arc<baton_store::cached::CacheCounters>>,
    /// The local store's directory (hidden from tools), when the store is local.
    pub(crate) local_store: Option<std::path::PathBuf>,
}

/// Opens the workspace root and the blob store, or says which setting is wrong.
pub(crate) fn open_storage(settings: &Settings) -> anyhow::Result<Storage> {
    let workspace_root = std::path::absolute(&settings.workspace_root).misconfigured(format!(
        "bad workspace root (workspace_root) {}",
        settings.workspace_root.display()
    ))?;
    std::fs::create_dir_all(&workspace_root).misconfigured(format!(
        "cannot create the workspace root (workspace_root) {}",
        workspace_root.display()
    ))?;
    writable(&workspace_root, "workspace root (workspace_root)")?;
    // As root the worker runs tools as the sandbox user, who must reach the workspaces.
    if nix::unistd::geteuid().is_root() && settings.sandbox_uid != 0 {
        traversable(&workspace_root, settings.sandbox_uid, settings.sandbox_gid)?;
    }
    let store = baton_store::open(&settings.store).misconfigured(
        "cannot open the blob store; see docs/src/operations/configuration.md (store.*)",
    )?;
    // A local cache of the blobs this worker read or wrote: a tree it has seen (a repository
    // at another commit, an environment) restores without downloading it again.
    let mut cache_counters = None;
    let store: baton_store::SharedStore = match settings.store.cache_budget() {
        0 => store,
        budget => {
            let dir = settings
                .store
                .cache_dir
                .clone()
                .unwrap_or_else(|| workspace_root.join(".baton-blob-cache"));
            let cached = baton_store::cached::CachedStore::new(store, &dir, budget)
                .misconfigured("cannot set up the local blob cache (store.cache_dir)")?;
            info!(dir = %dir.display(), budget, used = cached.used_bytes(), "local blob cache");
            cache_counters = Some(cached.counters());
            std::sync::Arc::new(cached)
        }
    };
    let local_store = (settings.store.backend == "local")
        .then(|| std::path::absolute(&settings.store.dir).ok())
        .flatten();
    if let Some(dir) = &local_store {
        writable(dir, "blob store directory (store.dir)")?;
    }
    Ok(Storage {
        workspace_root,
        store,
        cache_counters,
        local_store,
    })
}

/// The sandbox of tool processes: the Temporal frontend's addresses protected (and kept up
/// to date), and the workspace root, the local store and every credential file hidden.
pub(crate) async fn sandbox_settings(
    settings: &Settings,
    frontend: &url::Url,
    workspace_root: &std::path::Path,
    local_store: Option<std::path::PathBuf>,
) -> anyhow::Result<baton_sandbox::SandboxSettings> {
    let frontend_hosts =
        baton_sandbox::net::ProtectedHosts::new(temporal_endpoints(frontend).await);
    // A frontend behind a name may move (a load balancer's addresses change): keep every
    // address it had protected, and add new ones as they appear.
    tokio::spawn(refresh_frontend(frontend.clone(), frontend_hosts.clone()));
    let mut sandbox = settings
        .sandbox(frontend_hosts)
        .misconfigured("sandbox_private_ranges")?;
    // Sandboxed commands of one run may read neither other runs' workspaces nor the store, nor
    // any credential file of the worker's.
    sandbox.hidden = [Some(workspace_root.to_path_buf()), local_store]
        .into_iter()
        .flatten()
        .chain(hidden::credential_paths(
            settings
                .config
                .as_deref()
                .unwrap_or(std::path::Path::new("baton.toml")),
            &|name| std::env::var(name).ok(),
            &hidden::temporal_tls_paths()
                .into_iter()
                // The GitHub App's private key.
                .chain(
                    (!settings.git.github.private_key_file.is_empty())
                        .then(|| settings.git.github.private_key_file.clone().into()),
                )
                .collect::<Vec<_>>(),
        ))
        .collect();
    Ok(sandbox)
}

/// How often the worker resolves the Temporal frontend's name again.
const FRONTEND_REFRESH: Duration = Duration::from_secs(60);

/// The addresses of the Temporal frontend the worker talks to, which no tool may reach on any
/// port through the proxy (a resolution failure leaves only loopback/private blocking, logged).
async fn temporal_endpoints(frontend: &url::Url) -> Vec<baton_sandbox::net::ProtectedHost> {
    let (Some(host), Some(port)) = (frontend.host_str(), frontend.port_or_known_default()) else {
        return Vec::new();
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match tokio::net::lookup_host((host, port)).await {
        Ok(addrs) => addrs
            .map(|a| baton_sandbox::net::ProtectedHost {
                ip: a.ip(),
                port,
                what: format!("the Temporal frontend ({host}:{port})"),
            })
            .collect(),
        Err(e) => {
            warn!(
                host,
                port,
                error = %e,
                "cannot resolve the Temporal frontend's address to keep tools away from it; \
                 the tool proxy still refuses loopback and private addresses"
            );
            Vec::new()
        }
    }
}

/// Resolves the frontend's name every [`FRONTEND_REFRESH`] and adds new addresses to `hosts`
/// (an IP literal is never looked up again).
async fn refresh_frontend(frontend: url::Url, hosts: baton_sandbox::net::ProtectedHosts) {
    if !matches!(frontend.host(), Some(url::Host::Domain(_))) {
        return;
    }
    loop {
        tokio::time::sleep(FRONTEND_REFRESH).await;
        let found = temporal_endpoints(&frontend).await;
        let addresses: Vec<String> = found.iter().map(|h| h.ip.to_string()).collect();
        if hosts.update(found) {
            info!(
                frontend = %frontend,
                addresses = %addresses.join(", "),
                "the Temporal frontend resolves to a new address: tools are kept away from it too"
            );
        }
    }
}

/// Fails start-up when the sandbox user (`uid`, `gid`) cannot traverse `root` and each of its
/// parents: tools would start in their workspace and fail on every absolute path with
/// "Permission denied".
pub(crate) fn traversable(root: &std::path::Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    let resolved = std::fs::canonicalize(root).misconfigured(format!(
        "cannot resolve the workspace root (workspace_root) {}",
        root.display()
    ))?;
    let mut dirs: Vec<&std::path::Path> = resolved.ancestors().collect();
    dirs.reverse();
    for dir in dirs {
        let meta = std::fs::metadata(dir).misconfigured(format!(
            "cannot read {}, a parent of the workspace root (workspace_root) {}",
            dir.display(),
            root.display()
        ))?;
        if let Some(problem) = untraversable(&meta, uid, gid) {
            let what = if dir == resolved {
                "the workspace root (workspace_root)".to_owned()
            } else {
                format!(
                    "{}, a parent of the workspace root (workspace_root)",
                    dir.display()
                )
            };
            return Err(anyhow::anyhow!(
                "tools run as the sandbox user (sandbox_uid, sandbox_gid) and would fail on \
                 every absolute path with \"Permission denied\""
            ))
            .misconfigured(format!(
                "the sandbox user (uid {uid}, gid {gid}) cannot traverse {} ({problem}), \
                 {what} {}: run `chmod o+x {}` (or give that user or group search permission \
                 on it), or choose a workspace root whose parents it can traverse",
                dir.display(),
                root.display(),
                dir.display()
            ));
        }
    }
    Ok(())
}

/// What keeps `uid`/`gid` from traversing a directory with `meta` (the owner's bits apply to
/// its owner, the group's to its group, the others' to everyone else), or `None`.
fn untraversable(meta: &std::fs::Metadata, uid: u32, gid: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let (mode, owner, group) = (meta.mode(), meta.uid(), meta.gid());
    let (bit, class) = if owner == uid {
        (0o100, "its owner")
    } else if group == gid {
        (0o010, "its group")
    } else {
        (0o001, "others")
    };
    (mode & bit == 0).then(|| {
        format!(
            "mode {:04o}, owner uid {owner} gid {group}: no search permission for {class}",
            mode & 0o7777
        )
    })
}

/// Fails start-up when this process cannot create files in `dir` (`what` names the setting): a
/// worker that starts anyway would fail every tool call or model call of the runs it takes.
fn writable(dir: &std::path::Path, what: &str) -> anyhow::Result<()> {
    tempfile::tempfile_in(dir).map(drop).misconfigured(format!(
        "the {what} {} is not writable by this worker; fix its permissions or point the \
         setting elsewhere",
        dir.display()
    ))
}
