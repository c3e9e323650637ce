//! `baton fleet status`: the Worker Deployment's builds as the server routes them (current,
//! ramping, draining, drained) and, for each build, the open runs pinned to it, counted from
//! visibility. An old build can be retired once it shows no open runs (and "drained").
//!
//! `baton fleet patches`: for each patch marker of this build's registry, the open runs that
//! lack it (their `TemporalChangeVersion` search attribute, which the SDK keeps, does not list
//! it). With pinned runs only the unversioned ones can ever be replayed by another build, so a
//! marker no unversioned open run lacks can move to its next stage (AGENTS.md "Patches").

use std::collections::BTreeMap;

use baton_workflows::WORKFLOW_TYPE;
use futures::StreamExt;
use temporalio_client::{Client, NamespacedClient, WorkflowListOptions, grpc::WorkflowService};
use temporalio_common::protos::temporal::api::{
    enums::v1::{VersionDrainageStatus, WorkerDeploymentVersionStatus},
    workflow::v1::WorkflowExecutionInfo,
    workflowservice::v1::DescribeWorkerDeploymentRequest,
};

use crate::{
    cli::FleetStatusArgs,
    connect::{connect, short},
    exit::{self, Exit},
    json::{self, Fleet, FleetBuild},
};

/// Open runs counted at most (beyond it the counts say so).
const MAX_OPEN_RUNS: usize = 100_000;

/// Builds listed for open runs that no deployment version holds.
const UNVERSIONED: &str = "(unversioned)";

/// `baton fleet status`.
pub(crate) async fn status(args: FleetStatusArgs) -> Result<i32, Exit> {
    let client = connect().await?;
    let mut builds = versions(&client, &args.deployment).await?;
    let (pinned, truncated) = open_runs_by_build(&client, &args.deployment).await?;
    for (build_id, runs) in pinned {
        match builds.iter_mut().find(|b| b.build_id == build_id) {
            Some(b) => b.open_runs = runs,
            None => builds.push(FleetBuild {
                build_id,
                state: String::new(),
                drainage: String::new(),
                open_runs: runs,
            }),
        }
    }
    let fleet = Fleet {
        deployment: args.deployment,
        open_runs_truncated: truncated,
        builds,
    };
    if args.json {
        json::print(&fleet)?;
    } else {
        print(&fleet);
    }
    Ok(exit::COMPLETED)
}

fn print(fleet: &Fleet) {
    println!("deployment {}", fleet.deployment);
    println!(
        "{:<40} {:<10} {:<10} {:>9}",
        "BUILD", "STATE", "DRAINAGE", "OPEN RUNS"
    );
    for b in &fleet.builds {
        println!(
            "{:<40} {:<10} {:<10} {:>9}",
            b.build_id,
            or_dash(&b.state),
            or_dash(&b.drainage),
            b.open_runs
        );
    }
    if fleet.open_runs_truncated {
        println!("(open runs counted up to {MAX_OPEN_RUNS})");
    }
    let retirable: Vec<&str> = fleet
        .builds
        .iter()
        .filter(|b| b.open_runs == 0 && b.state != "current" && b.state != "ramping")
        .filter(|b| b.build_id != UNVERSIONED)
        .map(|b| b.build_id.as_str())
        .collect();
    if !retirable.is_empty() {
        println!(
            "no open run is pinned to: {} (their workers can be stopped once nothing else \
             polls them)",
            retirable.join(", ")
        );
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

/// The deployment's versions, current first, then ramping, then by creation, newest first.
async fn versions(client: &Client, deployment: &str) -> Result<Vec<FleetBuild>, Exit> {
    let mut service = client.clone();
    let described = WorkflowService::describe_worker_deployment(
        &mut service,
        tonic::Request::new(DescribeWorkerDeploymentRequest {
            namespace: client.namespace(),
            deployment_name: deployment.to_owned(),
        }),
    )
    .await;
    let info = match described {
        Ok(r) => r.into_inner().worker_deployment_info.unwrap_or_default(),
        Err(s) if s.code() == tonic::Code::NotFound => {
            return Err(Exit::usage(format!(
                "no Worker Deployment '{deployment}' on this namespace: workers create it when \
                 they start with deployment.name = \"{deployment}\" (name another with \
                 --deployment)"
            )));
        }
        Err(s) => {
            return Err(Exit::infra(format!(
                "cannot describe the Worker Deployment '{deployment}': {}",
                short(s.message())
            )));
        }
    };
    let mut summaries = info.version_summaries;
    summaries.sort_by_key(|v| {
        let rank = match v.status() {
            WorkerDeploymentVersionStatus::Current => 0,
            WorkerDeploymentVersionStatus::Ramping => 1,
            _ => 2,
        };
        let created = v.create_time.map(|t| -t.seconds).unwrap_or_default();
        (rank, created)
    });
    Ok(summaries
        .into_iter()
        .map(|v| FleetBuild {
            build_id: v.deployment_version.clone().unwrap_or_default().build_id,
            state: state_name(v.status()),
            drainage: drainage_name(v.drainage_status()),
            open_runs: 0,
        })
        .collect())
}

fn state_name(status: WorkerDeploymentVersionStatus) -> String {
    match status {
        WorkerDeploymentVersionStatus::Unspecified => "",
        WorkerDeploymentVersionStatus::Inactive => "inactive",
        WorkerDeploymentVersionStatus::Current => "current",
        WorkerDeploymentVersionStatus::Ramping => "ramping",
        WorkerDeploymentVersionStatus::Draining => "draining",
        WorkerDeploymentVersionStatus::Drained => "drained",
        WorkerDeploymentVersionStatus::Created => "created",
    }
    .to_owned()
}

fn drainage_name(status: VersionDrainageStatus) -> String {
    match status {
        VersionDrainageStatus::Unspecified => "",
        VersionDrainageStatus::Draining => "draining",
        VersionDrainageStatus::Drained => "drained",
    }
    .to_owned()
}

/// The build of `deployment` a run is on: its versioning info when the server fills it in
/// (describe), else the `TemporalWorkerDeploymentVersion` search attribute
/// (`"<deployment>:<build id>"`), which list results carry.
fn build_of(run: &WorkflowExecutionInfo, deployment: &str) -> Option<String> {
    let from_info = run
        .versioning_info
        .as_ref()
        .and_then(|v| v.deployment_version.as_ref())
        .filter(|v| v.deployment_name == deployment && !v.build_id.is_empty())
        .map(|v| v.build_id.clone());
    from_info.or_else(|| {
        let value: String = attribute(run, VERSION_ATTRIBUTE)?;
        let (name, build) = value.split_once(':')?;
        (name == deployment && !build.is_empty()).then(|| build.to_owned())
    })
}

/// What each marker in use (active or deprecated) of `registry` needs before its next stage,
/// from the open runs: `(pinned to a build of the deployment, the markers it recorded)`.
/// Retired markers are left out: no code checks them.
fn verdicts(
    registry: &[baton_workflows::workflow::patches::Patch],
    runs: &[(bool, Vec<String>)],
) -> Vec<json::FleetPatch> {
    use baton_workflows::workflow::patches::Stage;
    registry
        .iter()
        .filter(|p| p.stage != Stage::Retired)
        .map(|p| {
            let lacking = runs.iter().filter(|(_, m)| !m.iter().any(|id| id == p.id));
            let (pinned, unversioned) =
                lacking.fold(
                    (0, 0),
                    |(p, u), (pinned, _)| {
                        if *pinned { (p + 1, u) } else { (p, u + 1) }
                    },
                );
            let (stage, next) = match p.stage {
                Stage::Active => ("active", "deprecated"),
                _ => ("deprecated", "retired"),
            };
            let verdict = if unversioned == 0 {
                format!("can be {next}: no open run that could move to another build lacks it")
            } else {
                format!("keep: {unversioned} unversioned open run(s) lack it")
            };
            json::FleetPatch {
                id: p.id.to_owned(),
                stage: stage.to_owned(),
                open_runs_without: pinned + unversioned,
                unversioned_without: unversioned,
                verdict,
            }
        })
        .collect()
}

/// The system search attribute listing the patch markers a run recorded.
const CHANGE_ATTRIBUTE: &str = "TemporalChangeVersion";

/// `baton fleet patches`.
pub(crate) async fn patches(args: FleetStatusArgs) -> Result<i32, Exit> {
    use baton_workflows::workflow::patches::REGISTRY;
    let client = connect().await?;
    let mut runs = Vec::new();
    let (_, truncated) = for_each_open_run(&client, |run| {
        let markers = keywords(run, CHANGE_ATTRIBUTE);
        runs.push((build_of(run, &args.deployment).is_some(), markers));
    })
    .await?;
    let markers = verdicts(&REGISTRY, &runs);
    let report = json::FleetPatches {
        open_runs: runs.len(),
        open_runs_truncated: truncated,
        markers,
    };
    if args.json {
        json::print(&report)?;
    } else {
        println!(
            "{} open run(s){}",
            report.open_runs,
            if truncated {
                " (counted up to the bound)"
            } else {
                ""
            }
        );
        println!(
            "{:<28} {:<11} {:>12} {:>12}  VERDICT",
            "PATCH", "STAGE", "RUNS W/O", "UNVERSIONED"
        );
        for m in &report.markers {
            println!(
                "{:<28} {:<11} {:>12} {:>12}  {}",
                m.id, m.stage, m.open_runs_without, m.unversioned_without, m.verdict
            );
        }
    }
    Ok(exit::COMPLETED)
}

/// A search attribute of `run` as the JSON value the server keeps (None when absent).
fn attribute<T: serde::de::DeserializeOwned>(run: &WorkflowExecutionInfo, name: &str) -> Option<T> {
    let payload = run.search_attributes.as_ref()?.indexed_fields.get(name)?;
    serde_json::from_slice(&payload.data).ok()
}

/// The strings of a keyword-list search attribute of `run` (none when absent).
fn keywords(run: &WorkflowExecutionInfo, name: &str) -> Vec<String> {
    attribute(run, name).unwrap_or_default()
}

/// The system search attribute naming a run's deployment version.
const VERSION_ATTRIBUTE: &str = "TemporalWorkerDeploymentVersion";

/// Open runs per build id of `deployment` (runs on no version of it under [`UNVERSIONED`]),
/// and whether the count stopped at [`MAX_OPEN_RUNS`].
async fn open_runs_by_build(
    client: &Client,
    deployment: &str,
) -> Result<(BTreeMap<String, usize>, bool), Exit> {
    let mut counts = BTreeMap::new();
    let (_, truncated) = for_each_open_run(client, |run| {
        let build = build_of(run, deployment).unwrap_or_else(|| UNVERSIONED.to_owned());
        *counts.entry(build).or_insert(0) += 1;
    })
    .await?;
    Ok((counts, truncated))
}

/// Calls `f` on each open `AgentRun` (up to [`MAX_OPEN_RUNS`]); how many, and whether the bound
/// stopped the listing.
async fn for_each_open_run(
    client: &Client,
    mut f: impl FnMut(&WorkflowExecutionInfo),
) -> Result<(usize, bool), Exit> {
    let query = format!("WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'");
    let mut stream = client.list_workflows(
        query,
        WorkflowListOptions::builder().limit(MAX_OPEN_RUNS).build(),
    );
    let mut seen = 0;
    while let Some(item) = stream.next().await {
        let run = item.map_err(|e| {
            Exit::infra(format!("cannot list open runs: {}", short(&e.to_string())))
        })?;
        seen += 1;
        f(run.raw());
    }
    Ok((seen, seen >= MAX_OPEN_RUNS))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use temporalio_common::protos::temporal::api::common::v1::{Payload, SearchAttributes};

    #[test]
    fn a_listed_runs_build_comes_from_its_deployment_version_attribute() {
        let mut run = WorkflowExecutionInfo::default();
        assert_eq!(build_of(&run, "baton"), None);
        run.search_attributes = Some(SearchAttributes {
            indexed_fields: [(
                VERSION_ATTRIBUTE.to_owned(),
                Payload {
                    data: br#""baton:0.1.0-abc""#.to_vec(),
                    ..Default::default()
                },
            )]
            .into(),
        });
        assert_eq!(build_of(&run, "baton").as_deref(), Some("0.1.0-abc"));
        assert_eq!(build_of(&run, "other"), None, "another deployment's run");
    }

    #[test]
    fn a_marker_in_use_can_move_on_once_no_unversioned_open_run_lacks_it() {
        use baton_workflows::workflow::patches::{Patch, Stage};
        let patch = |id, stage| Patch {
            id,
            changed: "",
            covered_by: &[],
            stage,
        };
        let registry = [
            patch("old-v1", Stage::Retired),
            patch("kept-v1", Stage::Deprecated),
            patch("new-v1", Stage::Active),
        ];
        let runs = [
            (true, vec!["kept-v1".to_owned()]),
            (false, vec!["kept-v1".to_owned(), "new-v1".to_owned()]),
            (false, vec!["kept-v1".to_owned()]),
        ];
        let found = verdicts(&registry, &runs);
        let ids: Vec<&str> = found.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["kept-v1", "new-v1"], "retired markers are not listed");
        let (kept, new) = (&found[0], &found[1]);
        assert_eq!(
            (kept.stage.as_str(), kept.open_runs_without),
            ("deprecated", 0)
        );
        assert!(
            kept.verdict.starts_with("can be retired"),
            "{}",
            kept.verdict
        );
        // A pinned run lacking it cannot move to another build; the unversioned one can.
        assert_eq!((new.open_runs_without, new.unversioned_without), (2, 1));
        assert!(
            new.verdict.starts_with("keep: 1 unversioned"),
            "{}",
            new.verdict
        );
        let without_unversioned = verdicts(&registry, &runs[..1]);
        assert!(
            without_unversioned[1]
                .verdict
                .starts_with("can be deprecated")
        );
    }

    #[test]
    fn a_runs_patch_markers_come_from_its_change_version_attribute() {
        let mut run = WorkflowExecutionInfo::default();
        assert!(keywords(&run, CHANGE_ATTRIBUTE).is_empty());
        run.search_attributes = Some(SearchAttributes {
            indexed_fields: [(
                CHANGE_ATTRIBUTE.to_owned(),
                Payload {
                    data: br#"["run-outputs-v1","strict-shell-rules-v1"]"#.to_vec(),
                    ..Default::default()
                },
            )]
            .into(),
        });
        assert_eq!(
            keywords(&run, CHANGE_ATTRIBUTE),
            ["run-outputs-v1", "strict-shell-rules-v1"]
        );
    }
}
