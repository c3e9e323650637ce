use pretty_assertions::assert_eq;

use super::*;

const SUITE: &str = r#"
name = "calc"
repeat = 2

[[task]]
id = "add"
git = "git://127.0.0.1:9418/calc.git"
ref = "main"
prompt = "fix add()"
verify = ["sh test_add.sh", "sh test_sub.sh"]
verify_attempts = 1
expect_changed = ["lib.sh"]

[[task]]
id = "local"
dir = "repos/local"
prompt = "-x looks like a flag"
verify = ["true"]

[[config]]
name = "fixer"
script = "scripts/fixer-{task}.json"
max_turns = 5
max_cost_usd = 0.25

[[config]]
name = "gated"
provider = "openai"
model = "gpt-5"
reasoning_effort = "high"
instructions = "be brief"
policy = "policy.toml"
flags = ["--tool", "shell"]
"#;

/// A directory with the suite's scripts.
fn base() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("scripts")).unwrap();
    for t in ["add", "local"] {
        std::fs::write(dir.path().join(format!("scripts/fixer-{t}.json")), "[]").unwrap();
    }
    dir
}

#[test]
fn a_suite_reads_with_its_paths_resolved_against_its_directory() {
    let dir = base();
    let suite = parse(SUITE, dir.path(), "file").unwrap();
    assert_eq!(suite.name, "calc");
    assert_eq!(suite.repeat, Some(2));
    assert_eq!(
        suite.tasks[0].source,
        Source::Git {
            url: "git://127.0.0.1:9418/calc.git".into(),
            git_ref: Some("main".into())
        }
    );
    assert_eq!(
        suite.tasks[1].source,
        Source::Dir(dir.path().join("repos/local"))
    );
    assert_eq!(
        suite.configs[1].policy.as_deref(),
        Some(dir.path().join("policy.toml").as_path())
    );
    // The file's name names a suite that does not.
    let unnamed = SUITE.replacen("name = \"calc\"", "", 1);
    assert_eq!(
        parse(&unnamed, dir.path(), "nightly").unwrap().name,
        "nightly"
    );
}

#[test]
fn every_run_is_the_submit_flags_of_its_task_and_config() {
    let dir = base();
    let suite = parse(SUITE, dir.path(), "file").unwrap();
    let plan = suite.plan("ev1", 2, &[]);
    let ids: Vec<&str> = plan.iter().map(|p| p.run_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "ev1.add.fixer.1",
            "ev1.add.gated.1",
            "ev1.local.fixer.1",
            "ev1.local.gated.1",
            "ev1.add.fixer.2",
            "ev1.add.gated.2",
            "ev1.local.fixer.2",
            "ev1.local.gated.2",
        ]
    );
    let only = suite.plan("ev1", 1, &["gated".to_owned()]);
    assert_eq!(only.len(), 2);
    let script = dir.path().join("scripts/fixer-add.json");
    assert_eq!(
        suite.submit_argv("ev1", &plan[0], "q"),
        [
            "--id",
            "ev1.add.fixer.1",
            "--task-queue",
            "q",
            "--label",
            "baton.eval=calc/fixer",
            "--label",
            "baton.eval.id=ev1",
            "--label",
            "baton.eval.task=add",
            "--label",
            &format!("baton.eval.digest={}", suite.digest),
            "--git",
            "git://127.0.0.1:9418/calc.git",
            "--ref",
            "main",
            "--verify",
            "sh test_add.sh",
            "--verify",
            "sh test_sub.sh",
            "--verify-attempts",
            "1",
            "--script",
            &script.display().to_string(),
            "--max-turns",
            "5",
            "--max-cost",
            "0.25",
            "--no-approval",
            "--",
            "fix add()",
        ]
    );
    let gated = suite.submit_argv("ev1", &plan[3], "q");
    let tail: Vec<&str> = gated.iter().map(String::as_str).skip(12).collect();
    assert_eq!(
        tail,
        [
            "--workspace-from",
            &dir.path().join("repos/local").display().to_string(),
            "--verify",
            "true",
            "--provider",
            "openai",
            "--model",
            "gpt-5",
            "--reasoning-effort",
            "high",
            "--instructions",
            "be brief",
            "--policy",
            &dir.path().join("policy.toml").display().to_string(),
            "--tool",
            "shell",
            "--",
            "-x looks like a flag",
        ]
    );
}

#[test]
fn a_wrong_suite_is_refused_with_what_to_change() {
    let dir = base();
    let refused = |text: &str| parse(text, dir.path(), "s").unwrap_err();
    let task = |body: &str| format!("[[task]]\n{body}\n[[config]]\nname = \"c\"\n");
    let cases = [
        (
            task("id = \"a\"\nprompt = \"p\"\nverify = [\"true\"]"),
            "needs exactly one source",
        ),
        (
            task("id = \"a\"\ngit = \"u\"\ndir = \"d\"\nprompt = \"p\"\nverify = [\"true\"]"),
            "needs exactly one source",
        ),
        (
            task("id = \"a\"\ndir = \"d\"\nref = \"main\"\nprompt = \"p\"\nverify = [\"true\"]"),
            "ref goes with git",
        ),
        (
            task("id = \"a\"\ndir = \"d\"\nprompt = \"p\""),
            "no verify commands",
        ),
        (
            task("id = \"a.b\"\ndir = \"d\"\nprompt = \"p\"\nverify = [\"true\"]"),
            "task id 'a.b' is not",
        ),
        (
            task("id = \"a\"\ndir = \"d\"\nprompt = \"p\"\nverify = [\"true\"]\nveryfy = 1"),
            "unknown field `veryfy`",
        ),
        (
            format!(
                "{}[[task]]\nid = \"a\"\ndir = \"d\"\nprompt = \"p\"\nverify = [\"true\"]\n",
                task("id = \"a\"\ndir = \"d\"\nprompt = \"p\"\nverify = [\"true\"]")
            ),
            "task 'a' is listed twice",
        ),
        (
            task("id = \"a\"\ndir = \"d\"\nprompt = \"p\"\nverify = [\"true\"]")
                + "script = \"scripts/none-{task}.json\"\n",
            "none-a.json (for task 'a') is not a file",
        ),
        (
            "[[task]]\nid = \"a\"\ndir = \"d\"\nprompt = \"p\"\nverify = [\"true\"]\n".to_owned(),
            "at least one [[config]]",
        ),
    ];
    for (text, expected) in cases {
        let err = refused(&text);
        assert!(err.contains(expected), "{text}\n-> {err}");
    }
    assert!(refused("repeat = 0\n").contains("repeat = 0 runs nothing"));
}

#[test]
fn the_digest_follows_the_bytes_of_the_file() {
    let dir = base();
    let a = parse(SUITE, dir.path(), "s").unwrap().digest;
    assert_eq!(a, parse(SUITE, dir.path(), "s").unwrap().digest);
    let b = parse(
        &SUITE.replace("fix add()", "fix add() now"),
        dir.path(),
        "s",
    )
    .unwrap()
    .digest;
    assert_ne!(a, b);
    // Pinned: a new build reads an evaluation started by an older one.
    assert_eq!(digest(b"baton"), "998734824b00a4b1");
}
