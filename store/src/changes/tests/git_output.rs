//! Our output next to git's own: `git diff --stat`, `git diff --full-index`, and which
//! paths `git ls-files --others --exclude-standard` lists.

use pretty_assertions::assert_eq;

use super::*;

#[tokio::test]
async fn ignore_rules_agree_with_git() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("blobs")).unwrap();
    let d = tmp.path().join("tree");
    write(
        &d,
        ".gitignore",
        "*.log\n!keep.log\n/build\ndist/\n**/gen/*.rs\n# comment\n\\#hash\n",
    );
    for path in [
        "a.log",
        "keep.log",
        "sub/b.log",
        "sub/keep.log",
        "build/x",
        "src/build/y",
        "dist/z",
        "src/dist/w",
        "gen/a.rs",
        "src/gen/b.rs",
        "src/gen/c.txt",
        "#hash",
        "plain.txt",
        "sub/.gitignore",
        "sub/mine.txt",
        "sub/deep/mine.txt",
        "sub/deep/.gitignore",
        "sub/deep/c.log",
        "sub/deep/d.log",
        "dist/.gitignore",
        "dist/again.txt",
    ] {
        write(&d, path, "x\n");
    }
    write(&d, "sub/.gitignore", "mine.txt\n!b.log\n");
    write(&d, "sub/deep/.gitignore", "!mine.txt\n!c.log\n");
    write(&d, "dist/.gitignore", "!again.txt\n");
    link(&d, "link.log", "a.log");
    let id = take(&store, &d).await.unwrap().id;
    let set = change_set(&store, None, &id).await.unwrap();
    let ours: Vec<&str> = set.files.iter().map(|f| f.path.as_str()).collect();

    git(&d, &["init", "-q"]);
    write(&d, ".git/info/exclude", ".baton\n");
    let listed = git(&d, &["ls-files", "-z", "--others", "--exclude-standard"]);
    let mut theirs: Vec<&str> = listed
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| std::str::from_utf8(p).unwrap())
        .collect();
    theirs.sort_unstable();
    assert_eq!(ours, theirs);
    assert!(ours.contains(&"sub/b.log") && !ours.contains(&"dist/again.txt"));
}

#[tokio::test]
async fn diffstat_matches_git_diff_stat() {
    let (set, _tmp, repo) = staged(
        |d| {
            write(d, "a.txt", numbered(1..6));
            write(d, "longer/name.rs", "x\n");
        },
        |d| {
            write(
                d,
                "a.txt",
                numbered(1..6).replace("line 2\n", "two\n") + "six\n",
            );
            remove(d, "longer/name.rs");
            write(d, "b", "");
        },
    )
    .await;
    let expected = " a.txt          | 3 ++-\n b              | 0\n longer/name.rs | 1 -\n \
                    3 files changed, 2 insertions(+), 2 deletions(-)\n";
    assert_eq!(diffstat(&set.files), expected);
    let git_stat = git(&repo, &["diff", "--cached", "--stat"]);
    assert_eq!(String::from_utf8(git_stat).unwrap(), expected);

    let binary = [FileDiff {
        path: "img.png".to_owned(),
        status: FileStatus::Added,
        insertions: 0,
        deletions: 0,
        binary: true,
    }];
    assert_eq!(
        diffstat(&binary),
        " img.png | Bin\n 1 file changed, 0 insertions(+), 0 deletions(-)\n"
    );
}

#[tokio::test]
async fn small_text_patches_are_byte_identical_to_git_diff() {
    // Hunks that start at line 1 (git adds no function context) and short files (git's
    // diff algorithm and ours agree line for line).
    let (set, _tmp, repo) = staged(
        |d| {
            write(d, "a.txt", numbered(1..6));
            write(d, "space dir/my file", "one\n");
            write(d, "run.sh", "#!/bin/sh\n");
            write(d, "tool.sh", "#!/bin/sh\necho 1\n");
            write(d, "eof", "x\ny");
            write(d, "gone", "bye\n");
            link(d, "l", "a.txt");
        },
        |d| {
            write(
                d,
                "a.txt",
                numbered(1..6).replace("line 2\n", "two\n") + "six\n",
            );
            write(d, "space dir/my file", "one\ntwo\n");
            chmod(d, "run.sh", 0o755);
            write(d, "tool.sh", "#!/bin/sh\necho 2\n");
            chmod(d, "tool.sh", 0o755);
            write(d, "eof", "x\ny\n");
            remove(d, "gone");
            link(d, "l", "space dir/my file");
            link(d, "new-link", "eof");
            write(d, "na\u{ef}ve.txt", "hi\n");
            write(d, "empty", "");
        },
    )
    .await;
    assert_eq!(set.files.len(), 10);
    let git_patch = git(&repo, &["diff", "--cached", "--full-index"]);
    assert_eq!(patch_text(&set), String::from_utf8(git_patch).unwrap());
}
