//! What sandboxed commands may not read (`SandboxSettings::hidden`): the workspace root (every
//! run's workspace but the call's own), the local blob store, and every credential file the
//! worker knows of. Tools run as the worker's user when it is not root (the shipped Kubernetes
//! manifests), so without this they could read the mTLS key, the settings file or a projected
//! service-account token the worker's user may read.

use std::path::{Path, PathBuf};

/// Variables naming credential files the worker (or a library it uses) reads: the settings
/// file, the Temporal client config and mTLS client certificate and key, the AWS web identity,
/// Pod Identity, shared credential and config files (the S3 store), Google credentials.
const PATH_VARIABLES: &[&str] = &[
    "BATON_CONFIG",
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// Where platforms mount credentials for the pod or container: the Kubernetes service account
/// token, EKS IRSA and Pod Identity tokens, Docker/Compose secrets.
pub(crate) const SECRET_DIRS: &[&str] = &[
    "/var/run/secrets/kubernetes.io/serviceaccount",
    "/var/run/secrets/eks.amazonaws.com/serviceaccount",
    "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount",
    "/run/secrets",
];

/// The credential paths of this worker that exist: `settings_file` (the file its settings
/// were read from), the files the variables of [`PATH_VARIABLES`] name (`env` reads the
/// worker's environment), `tls_paths` (client certificate and key paths of the Temporal
/// profile), the default Temporal and AWS config locations under `HOME`, and [`SECRET_DIRS`].
/// Each absolute, and also in its resolved form when links lead elsewhere (a Kubernetes
/// secret's files are links into `..data/`); without duplicates.
pub(crate) fn credential_paths(
    settings_file: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    tls_paths: &[PathBuf],
) -> Vec<PathBuf> {
    let home = env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let config_home = env("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    let candidates = std::iter::once(settings_file.to_path_buf())
        .chain(
            PATH_VARIABLES
                .iter()
                .filter_map(|name| env(name).filter(|v| !v.is_empty()).map(PathBuf::from)),
        )
        .chain(tls_paths.iter().cloned())
        .chain(config_home.map(|d| d.join("temporalio")))
        .chain(home.map(|h| h.join(".aws")))
        .chain(SECRET_DIRS.iter().map(PathBuf::from));
    let mut paths: Vec<PathBuf> = Vec::new();
    for candidate in candidates {
        if std::fs::symlink_metadata(&candidate).is_err() {
            continue;
        }
        let Ok(absolute) = std::path::absolute(&candidate) else {
            continue;
        };
        let resolved = std::fs::canonicalize(&absolute).ok();
        for path in std::iter::once(absolute).chain(resolved) {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths
}

/// The client certificate and key paths of the Temporal profile the worker connects with
/// (`TEMPORAL_CONFIG_FILE` / `TEMPORAL_PROFILE`, then `TEMPORAL_TLS_*`); none when it cannot be
/// read (the connection settings were checked before this).
pub(crate) fn temporal_tls_paths() -> Vec<PathBuf> {
    use temporalio_common::envconfig::{
        DataSource, LoadClientConfigProfileOptions, load_client_config_profile,
    };
    let Ok(profile) = load_client_config_profile(LoadClientConfigProfileOptions::default(), None)
    else {
        return Vec::new();
    };
    profile
        .tls
        .iter()
        .flat_map(|tls| [&tls.client_cert, &tls.client_key])
        .filter_map(|source| match source {
            Some(DataSource::Path(path)) => Some(PathBuf::from(path)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Every credential file the worker knows of is in the list, with the target of a link
    /// (a Kubernetes secret volume); a variable naming nothing that exists adds nothing.
    #[test]
    fn the_worker_s_credential_files_are_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, "secret").unwrap();
            path
        };
        let settings = file("baton.toml");
        let data = dir.path().join("..data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("tls.key"), "key").unwrap();
        let key = dir.path().join("tls.key");
        std::os::unix::fs::symlink(data.join("tls.key"), &key).unwrap();
        let cert = file("tls.crt");
        let token = file("web-identity-token");
        let profile_key = file("profile.key");
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".config/temporalio")).unwrap();
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        let vars: HashMap<&str, String> = [
            ("TEMPORAL_TLS_CLIENT_KEY_PATH", key.display().to_string()),
            ("TEMPORAL_TLS_CLIENT_CERT_PATH", cert.display().to_string()),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()),
            (
                "GOOGLE_APPLICATION_CREDENTIALS",
                dir.path().join("missing.json").display().to_string(),
            ),
            ("HOME", home.display().to_string()),
        ]
        .into_iter()
        .collect();
        let env = |name: &str| vars.get(name).cloned();
        let hidden = credential_paths(&settings, &env, std::slice::from_ref(&profile_key));
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap();
        for path in [
            settings.clone(),
            key.clone(),
            canonical(&data.join("tls.key")),
            cert,
            token,
            profile_key,
            home.join(".config/temporalio"),
            home.join(".aws"),
        ] {
            assert!(
                hidden.contains(&path),
                "{} not in {hidden:?}",
                path.display()
            );
        }
        assert!(
            !hidden.iter().any(|p| p.ends_with("missing.json")),
            "{hidden:?}"
        );
        for dir in SECRET_DIRS {
            assert_eq!(
                hidden.contains(&PathBuf::from(dir)),
                Path::new(dir).exists(),
                "{dir}: {hidden:?}"
            );
        }
        let mut unique = hidden.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), hidden.len());
    }
}
