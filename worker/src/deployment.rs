//! Worker Versioning (`[deployment]`): the worker polls as one version (deployment name +
//! build id) of a Temporal Worker Deployment, and `AgentRun` is pinned to the version it
//! started on, so a run's workflow code never changes under it; it moves to the current
//! version when it continues as new (`workflow::continue_as_new` asks for auto-upgrade). The
//! rollout (start the new version, `temporal worker deployment set-current-version`, drain the
//! old one) is in docs/src/operations/upgrades.md.
//!
//! `promote` says whether this worker makes its own version the deployment's current one once
//! the server knows it: `if-none` (default: only when the deployment has no current version,
//! the first rollout), `always` (a single worker in development), `never` (an operator or a
//! pipeline promotes, after `baton replay-check`).

use std::time::Duration;

use serde::Deserialize;
use temporalio_client::{Client, NamespacedClient, grpc::WorkflowService};
use temporalio_common::{
    protos::temporal::api::workflowservice::v1::{
        DescribeWorkerDeploymentRequest, SetWorkerDeploymentCurrentVersionRequest,
    },
    worker::{VersioningBehavior, WorkerDeploymentOptions, WorkerDeploymentVersion},
};
use tracing::{info, warn};

/// The deployment name workers use unless told otherwise.
pub(crate) const DEFAULT_DEPLOYMENT: &str = "baton";

/// How long a worker tries to promote its version before it gives up (the server learns of a
/// version from its first polls).
const PROMOTE_FOR: Duration = Duration::from_secs(120);

/// `[deployment]` settings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct DeploymentSettings {
    /// Worker Deployment name (default `baton`; "" polls unversioned, as before versioning).
    pub(crate) name: String,
    /// This build's id (default: the binary's version and git commit, [`baton_workflows::BUILD_ID`]).
    pub(crate) build_id: Option<String>,
    /// Whether this worker makes its version the current one (see the module doc).
    pub(crate) promote: Promote,
}

impl Default for DeploymentSettings {
    fn default() -> Self {
        Self {
            name: DEFAULT_DEPLOYMENT.to_owned(),
            build_id: None,
            promote: Promote::IfNone,
        }
    }
}

/// When a worker promotes its own version to current.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(try_from = "String")]
pub(crate) enum Promote {
    /// Only when the deployment has no current version.
    IfNone,
    /// At every start.
    Always,
    /// Never: `temporal worker deployment set-current-version` does it.
    Never,
}

impl TryFrom<String> for Promote {
    type Error = String;

    fn try_from(value: String) -> Result<Self, String> {
        match value.trim() {
            "if-none" => Ok(Self::IfNone),
            "always" => Ok(Self::Always),
            "never" => Ok(Self::Never),
            other => Err(format!(
                "{other:?} is not a promote policy: use \"if-none\" (default: when the \
                 deployment has no current version), \"always\" or \"never\""
            )),
        }
    }
}

impl DeploymentSettings {
    /// The build id this worker polls as.
    pub(crate) fn build_id(&self) -> String {
        self.build_id
            .clone()
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| baton_workflows::BUILD_ID.to_owned())
    }

    /// Whether the worker polls as a deployment version.
    pub(crate) fn versioned(&self) -> bool {
        !self.name.is_empty()
    }

    /// Refuses names the server would reject (each error names the key).
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if self.name.contains('.') || self.name.trim() != self.name {
            anyhow::bail!(
                "deployment.name {:?} may not contain '.' or surrounding spaces (the server \
                 joins name and build id with a '.')",
                self.name
            );
        }
        let build_id = self.build_id();
        if build_id.len() > 255 || build_id.trim() != build_id {
            anyhow::bail!(
                "deployment.build_id {build_id:?} must be at most 255 characters without \
                 surrounding spaces"
            );
        }
        Ok(())
    }

    /// The SDK's deployment options: pinned by default when versioned.
    pub(crate) fn options(&self) -> WorkerDeploymentOptions {
        if !self.versioned() {
            return WorkerDeploymentOptions::from_build_id(self.build_id());
        }
        WorkerDeploymentOptions::new(self.version())
            .use_worker_versioning(true)
            .default_versioning_behavior(VersioningBehavior::Pinned)
            .build()
    }

    fn version(&self) -> WorkerDeploymentVersion {
        WorkerDeploymentVersion::builder()
            .deployment_name(self.name.clone())
            .build_id(self.build_id())
            .build()
    }
}

/// Promotes this worker's version per `settings.promote`, retrying until the server knows
/// the version (it registers it from the worker's first polls) or [`PROMOTE_FOR`] passes.
pub(crate) async fn promote(client: Client, settings: DeploymentSettings, identity: String) {
    if !settings.versioned() || settings.promote == Promote::Never {
        return;
    }
    let build_id = settings.build_id();
    let started = tokio::time::Instant::now();
    let mut last_error = String::new();
    while started.elapsed() < PROMOTE_FOR {
        match try_promote(&client, &settings, &build_id, &identity).await {
            Ok(Promoted::Now) => {
                info!(deployment = %settings.name, build_id = %build_id,
                    "this build is now the deployment's current version: new runs start on it");
                return;
            }
            Ok(Promoted::Already) => return,
            Ok(Promoted::Other(current)) => {
                info!(deployment = %settings.name, build_id = %build_id, current = %current,
                    "another build is the deployment's current version: this worker serves the \
                     runs pinned to this build until an operator makes it current \
                     (`temporal worker deployment set-current-version`)");
                return;
            }
            Err(e) => last_error = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    warn!(deployment = %settings.name, build_id = %build_id, cause = %last_error,
        "could not make this build the deployment's current version; new runs wait until one \
         is set (`temporal worker deployment set-current-version --deployment-name {} \
         --build-id {}`)", settings.name, build_id);
}

enum Promoted {
    Now,
    Already,
    Other(String),
}

async fn try_promote(
    client: &Client,
    settings: &DeploymentSettings,
    build_id: &str,
    identity: &str,
) -> Result<Promoted, String> {
    let mut service = client.clone();
    let described = WorkflowService::describe_worker_deployment(
        &mut service,
        tonic::Request::new(DescribeWorkerDeploymentRequest {
            namespace: client.namespace(),
            deployment_name: settings.name.clone(),
        }),
    )
    .await
    .map_err(|s| s.message().to_owned())?
    .into_inner();
    let current = described
        .worker_deployment_info
        .and_then(|i| i.routing_config)
        .and_then(|r| r.current_deployment_version)
        .map(|v| v.build_id)
        .filter(|b| !b.is_empty());
    match (&current, settings.promote) {
        (Some(c), _) if c == build_id => return Ok(Promoted::Already),
        (Some(c), Promote::IfNone) => return Ok(Promoted::Other(c.clone())),
        _ => {}
    }
    WorkflowService::set_worker_deployment_current_version(
        &mut service,
        tonic::Request::new(SetWorkerDeploymentCurrentVersionRequest {
            namespace: client.namespace(),
            deployment_name: settings.name.clone(),
            build_id: build_id.to_owned(),
            conflict_token: described.conflict_token,
            identity: identity.to_owned(),
            ..Default::default()
        }),
    )
    .await
    .map_err(|s| s.message().to_owned())?;
    Ok(Promoted::Now)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_pinned_on_deployment_baton_with_this_builds_id() {
        let s = DeploymentSettings::default();
        assert!(s.versioned());
        assert_eq!(s.build_id(), baton_workflows::BUILD_ID);
        let o = s.options();
        assert!(o.use_worker_versioning);
        assert_eq!(
            o.default_versioning_behavior,
            Some(VersioningBehavior::Pinned)
        );
        assert_eq!(o.version.deployment_name, "baton");
    }

    #[test]
    fn an_empty_name_polls_unversioned() {
        let s = DeploymentSettings {
            name: String::new(),
            ..Default::default()
        };
        assert!(!s.options().use_worker_versioning);
    }

    #[test]
    fn names_the_server_rejects_are_refused_naming_the_key() {
        let s = DeploymentSettings {
            name: "a.b".to_owned(),
            ..Default::default()
        };
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("deployment.name"), "{e}");
        let s = DeploymentSettings {
            build_id: Some(" x".to_owned()),
            ..Default::default()
        };
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("deployment.build_id"), "{e}");
    }
}
