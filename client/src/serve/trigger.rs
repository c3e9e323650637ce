//! What a webhook event asks for, and sending it to its run: an issue labelled with the
//! repository's label, or a comment that starts with its command (or mentions it), from a
//! user with the permission, becomes a message to the issue's (or pull request's) run.

use baton_github::webhook::{EventRepository, Issue};
use baton_github::{Event, GitHubError};
use baton_proto::{GitHubThread, SendMessage};
use serde_json::{Value, json};

use super::Serve;
use super::decide::{Command, command_of, decide};
use super::settings::{OnPullRequest, RepoRule};
use crate::converse::{self, Outgoing};

/// Why an event could not be acted on now (GitHub may redeliver it).
pub(crate) enum Failed {
    /// GitHub or Temporal could not be reached.
    Unavailable(String),
}

/// A run asked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Trigger {
    pub(crate) repository: EventRepository,
    pub(crate) issue: Issue,
    /// Who asked (the labeller or the commenter).
    pub(crate) author: String,
    /// What they asked: the issue for a label, the comment after the command.
    pub(crate) text: String,
    /// A comment (else a label).
    pub(crate) comment: bool,
    /// A decision on pending calls (`/approve`, `/deny`), or what is wrong with it.
    pub(crate) decision: Option<Result<Command, String>>,
}

/// The trigger in `event` for `rules`, or why there is none.
pub(crate) fn trigger_of(
    rule: impl Fn(&str) -> Option<RepoRule>,
    event: Event,
) -> Result<(Trigger, RepoRule), String> {
    match event {
        Event::Ping => Err("ping".into()),
        Event::IssueLabeled {
            issue,
            label,
            sender,
            repository,
        } => {
            let rule = rule(&repository.full_name)
                .ok_or_else(|| format!("{} is not served", repository.full_name))?;
            if !label.name.eq_ignore_ascii_case(&rule.label) {
                return Err(format!("label {} is not {}", label.name, rule.label));
            }
            let text = issue_text(&issue);
            Ok((
                Trigger {
                    repository,
                    issue,
                    author: sender.login,
                    text,
                    comment: false,
                    decision: None,
                },
                rule,
            ))
        }
        Event::CommentCreated {
            issue,
            comment,
            repository,
        } => {
            let rule = rule(&repository.full_name)
                .ok_or_else(|| format!("{} is not served", repository.full_name))?;
            if comment.user.kind.eq_ignore_ascii_case("bot") {
                // Never a bot's, baton's own included.
                return Err("a bot's comment".into());
            }
            if let Some(decision) = command_of(&comment.body) {
                return Ok((
                    Trigger {
                        repository,
                        issue,
                        author: comment.user.login,
                        text: String::new(),
                        comment: true,
                        decision: Some(decision),
                    },
                    rule,
                ));
            }
            let text = command_text(&rule, &comment.body)
                .ok_or_else(|| "the comment is not for baton".to_owned())?;
            if text.is_empty() {
                return Err(format!("{} without a task", rule.command));
            }
            Ok((
                Trigger {
                    repository,
                    issue,
                    author: comment.user.login,
                    text,
                    comment: true,
                    decision: None,
                },
                rule,
            ))
        }
        Event::Other { event, action } => Err(format!("event {event} {action}")),
    }
}

/// The task in a comment: what follows the command at its start (`/baton fix it`), or the
/// whole comment without the mention when it mentions the app.
fn command_text(rule: &RepoRule, body: &str) -> Option<String> {
    let trimmed = body.trim_start();
    if let Some(rest) = trimmed.strip_prefix(&rule.command)
        && (rest.is_empty() || rest.starts_with(char::is_whitespace))
    {
        return Some(rest.trim().to_owned());
    }
    let mention = rule.mention.trim();
    if !mention.is_empty() && body.contains(mention) {
        return Some(body.replace(mention, "").trim().to_owned());
    }
    None
}

/// An issue as a task.
fn issue_text(issue: &Issue) -> String {
    let body = issue.body.as_deref().unwrap_or("").trim();
    if body.is_empty() {
        issue.title.clone()
    } else {
        format!("{}\n\n{body}", issue.title)
    }
}

/// The run of an issue or pull request: `gh-<owner>-<repo>-<number>`, lowercase, characters
/// other than letters, digits, `.` and `_` as `-`.
pub(crate) fn run_id_for(full_name: &str, number: u64) -> String {
    let name: String = full_name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("gh-{name}-{number}")
}

/// Acts on `event` (delivery `delivery`): what the webhook answers.
pub(crate) async fn handle(serve: &Serve, event: Event, delivery: &str) -> Result<Value, Failed> {
    let rules = |name: &str| serve.settings.rule_for(name).cloned();
    let (trigger, rule) = match trigger_of(rules, event) {
        Ok(found) => found,
        Err(why) => return Ok(json!({ "ignored": why })),
    };
    let (owner, repo) = trigger.repository.owner_and_name();
    let number = trigger.issue.number;
    let permission = serve
        .github
        .permission(owner, repo, &trigger.author)
        .await
        .map_err(unavailable)?;
    if permission < rule.min_permission() {
        let (what, outcome) = if trigger.decision.is_some() {
            ("decisions", "nothing changed")
        } else {
            ("tasks", "nothing was started")
        };
        let reply = format!(
            "@{}: baton takes {what} only from users with {} permission on {owner}/{repo} (you \
             have {}); {outcome}.",
            trigger.author,
            rule.min_permission().as_str(),
            permission.as_str()
        );
        serve
            .github
            .comment(owner, repo, number, &reply)
            .await
            .map_err(unavailable)?;
        return Ok(json!({ "refused": reply }));
    }
    let run_id = run_id_for(&trigger.repository.full_name, number);
    if let Some(decision) = trigger.decision.clone() {
        let reply = match decision {
            Err(usage) => Some(format!("@{}: {usage}", trigger.author)),
            Ok(command) => decide(
                &serve.github,
                (owner, repo),
                &run_id,
                &trigger.author,
                command,
                delivery,
            )
            .await
            .map_err(Failed::Unavailable)?,
        };
        if let Some(reply) = &reply {
            serve
                .github
                .comment(owner, repo, number, reply)
                .await
                .map_err(unavailable)?;
        }
        return Ok(json!({ "run_id": run_id, "decided": reply.is_none(), "reply": reply }));
    }
    let start = match start_spec(serve, &trigger, &rule, &run_id, delivery).await {
        Ok(start) => start,
        Err(Refusal(why)) => {
            let reply = format!("@{}: baton cannot take this: {why}", trigger.author);
            serve
                .github
                .comment(owner, repo, number, &reply)
                .await
                .map_err(unavailable)?;
            return Ok(json!({ "refused": reply }));
        }
    };
    let message = SendMessage {
        text: if trigger.comment {
            format!("{}\n\n(@{} on GitHub)", trigger.text, trigger.author)
        } else {
            trigger.text.clone()
        },
        id: delivery.to_owned(),
    };
    let delivered = converse::deliver(
        &serve.client,
        Outgoing {
            run_id: run_id.clone(),
            message,
            start: Some(start),
        },
    )
    .await
    .map_err(|e| Failed::Unavailable(e.message))?;
    let outcome = delivered.outcome;
    Ok(json!({
        "run_id": run_id,
        "task": outcome.task,
        "duplicate": outcome.duplicate,
    }))
}

fn unavailable(e: GitHubError) -> Failed {
    Failed::Unavailable(e.to_string())
}

/// Why a run cannot be made for a trigger (said in a reply).
struct Refusal(String);

/// The spec of the issue's run: the rule's `baton submit` flags, the repository's default
/// branch (an issue) or the pull request's head branch, delivered as a pull request.
async fn start_spec(
    serve: &Serve,
    trigger: &Trigger,
    rule: &RepoRule,
    run_id: &str,
    delivery: &str,
) -> Result<(baton_proto::RunSpec, String), Refusal> {
    let (owner, repo) = trigger.repository.owner_and_name();
    let number = trigger.issue.number;
    let (git_ref, head_sha, kind) = if trigger.issue.is_pull_request() {
        let pull = serve
            .github
            .pull_request(owner, repo, number)
            .await
            .map_err(|e| Refusal(e.to_string()))?;
        let same_repo = pull.head.repo.as_ref().is_some_and(|r| {
            r.full_name
                .eq_ignore_ascii_case(&trigger.repository.full_name)
        });
        if !same_repo {
            return Err(Refusal(
                "the pull request's branch is in another repository (a fork); baton works on \
                 branches of this repository only"
                    .into(),
            ));
        }
        (pull.head.name, pull.head.sha, "pull request")
    } else {
        let branch = trigger.repository.default_branch.clone();
        // The check run's commit; without it the run reports in its comment only.
        let sha = serve
            .github
            .commit_sha(owner, repo, &branch)
            .await
            .unwrap_or_default();
        (branch, sha, "issue")
    };
    let task = format!(
        "{}\n\n(GitHub {kind} {owner}/{repo}#{number}: {}; asked by @{}.)",
        if trigger.comment {
            format!("{}\n\n---\n{}", trigger.text, issue_text(&trigger.issue))
        } else {
            trigger.text.clone()
        },
        trigger.issue.title,
        trigger.author
    );
    let push_to_head =
        trigger.issue.is_pull_request() && rule.on_pull_request == OnPullRequest::Push;
    let mut argv: Vec<String> = vec!["baton".into(), "submit".into()];
    argv.extend(rule.submit.iter().cloned());
    if push_to_head {
        argv.extend([
            "--deliver".into(),
            "branch".into(),
            "--branch".into(),
            git_ref.clone(),
        ]);
    } else {
        argv.extend(["--deliver".into(), "pr".into()]);
    }
    argv.extend([
        "--git".into(),
        trigger.repository.clone_url.clone(),
        "--ref".into(),
        git_ref,
        "--label".into(),
        format!("github={owner}/{repo}#{number}"),
        "--id".into(),
        run_id.into(),
        "--".into(),
        task,
    ]);
    let submit =
        converse::submit_args(&argv, "the rule's submit flags").map_err(|e| Refusal(e.message))?;
    let mut spec = converse::conversation(&submit, rule.idle_timeout, delivery)
        .map_err(|e| Refusal(e.message))?;
    // The run keeps its comment (and check run) there up to date.
    spec.github = Some(GitHubThread {
        repo: trigger.repository.full_name.clone(),
        number,
        pull_request: trigger.issue.is_pull_request(),
        head_sha,
    });
    crate::workspace::apply_source(&submit, &serve.client, &mut spec)
        .await
        .map_err(|e| Refusal(e.message))?;
    if let Some(deliver) = spec.deliver.as_mut() {
        // Onto the pull request's own branch, though it is the run's source.
        deliver.onto_source = push_to_head;
    }
    Ok((spec, submit.task_queue.clone()))
}

#[cfg(test)]
mod tests {
    use baton_github::webhook::{IssueComment, Label, User};

    use super::*;

    fn rule() -> RepoRule {
        toml::from_str(
            r#"name = "acme/*"
               mention = "@baton-bot""#,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn repository() -> EventRepository {
        EventRepository {
            full_name: "Acme/Parser".into(),
            default_branch: "main".into(),
            clone_url: "https://github.com/Acme/Parser.git".into(),
        }
    }

    fn issue() -> Issue {
        Issue {
            number: 7,
            title: "Tabs break the parser".into(),
            body: Some("See the attached file.".into()),
            pull_request: None,
            html_url: String::new(),
        }
    }

    fn commented(body: &str, kind: &str) -> Event {
        Event::CommentCreated {
            issue: issue(),
            comment: IssueComment {
                id: 1,
                body: body.into(),
                user: User {
                    login: "ann".into(),
                    kind: kind.into(),
                },
            },
            repository: repository(),
        }
    }

    fn text_of(event: Event) -> Result<String, String> {
        trigger_of(|name| rule().serves(name).then(rule), event).map(|(t, _)| t.text)
    }

    #[test]
    fn commands_mentions_labels_and_what_is_ignored() {
        assert_eq!(
            text_of(commented("/baton fix the tabs", "User")),
            Ok("fix the tabs".into())
        );
        assert_eq!(
            text_of(commented("  /baton\nfix it\nplease", "User")),
            Ok("fix it\nplease".into())
        );
        assert_eq!(
            text_of(commented("hey @baton-bot fix it", "User")),
            Ok("hey  fix it".into())
        );
        assert!(text_of(commented("/batonic", "User")).is_err());
        assert!(text_of(commented("/baton", "User")).is_err(), "no task");
        assert!(text_of(commented("looks fine", "User")).is_err());
        assert!(text_of(commented("/baton fix", "Bot")).is_err(), "bots");
        let labelled = |name: &str| Event::IssueLabeled {
            issue: issue(),
            label: Label { name: name.into() },
            sender: User {
                login: "ann".into(),
                kind: "User".into(),
            },
            repository: repository(),
        };
        assert_eq!(
            text_of(labelled("Baton")),
            Ok("Tabs break the parser\n\nSee the attached file.".into())
        );
        assert!(text_of(labelled("bug")).is_err());
        let elsewhere = Event::IssueLabeled {
            repository: EventRepository {
                full_name: "other/parser".into(),
                ..repository()
            },
            issue: issue(),
            label: Label {
                name: "baton".into(),
            },
            sender: User {
                login: "ann".into(),
                kind: "User".into(),
            },
        };
        assert!(text_of(elsewhere).is_err(), "not served");
    }

    #[test]
    fn run_ids_name_the_issue() {
        assert_eq!(run_id_for("Acme/Parser", 7), "gh-acme-parser-7");
        assert_eq!(run_id_for("a.b/c_d", 1), "gh-a.b-c_d-1");
    }
}
