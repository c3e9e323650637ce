use std::os::unix::fs::symlink;

use super::testing::Racer;
use super::*;
use tempfile::TempDir;

fn tree() -> (TempDir, TempDir) {
    let ws = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    std::fs::create_dir(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("d/inside"), "inside").unwrap();
    std::fs::write(outside.path().join("secret"), "OUTSIDE-MARKER").unwrap();
    symlink(outside.path(), ws.path().join("e")).unwrap();
    (ws, outside)
}

#[test]
fn a_link_on_the_way_or_at_the_end_is_never_followed() {
    let (ws, _outside) = tree();
    symlink("d/inside", ws.path().join("alias")).unwrap();
    let root = Beneath::open(ws.path()).unwrap();
    let mut text = String::new();
    root.open_regular(Path::new("d/inside"))
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, "inside");
    for rel in ["e/secret", "alias", "e"] {
        match root.open_regular(Path::new(rel)) {
            Err(OpenError::Io(e)) => assert!(is_link_error(&e), "{rel}: {e}"),
            other => panic!("{rel}: {other:?}"),
        }
    }
    let err = root.create_dirs(Path::new("e/new")).unwrap_err();
    assert!(is_link_error(&err), "{err}");
    assert!(root.open_dir(Path::new("e")).is_err());
    assert!(root.symlink_metadata(Path::new("e")).unwrap().is_symlink());
    for rel in ["../x", "/etc/passwd", "d/../../x"] {
        let err = root.open_regular(Path::new(rel)).unwrap_err();
        assert!(
            err.to_string().contains("not a plain relative path"),
            "{err}"
        );
    }
}

#[test]
fn fifos_devices_and_directories_are_refused_without_blocking() {
    let (ws, _outside) = tree();
    let status = std::process::Command::new("mkfifo")
        .arg(ws.path().join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    let root = Beneath::open(ws.path()).unwrap();
    assert!(matches!(
        root.open_regular(Path::new("fifo")),
        Err(OpenError::Special)
    ));
    assert!(matches!(
        root.open_regular(Path::new("d")),
        Err(OpenError::Directory)
    ));
    let dev = Beneath::open(Path::new("/dev")).unwrap();
    assert!(matches!(
        dev.open_regular(Path::new("zero")),
        Err(OpenError::Special)
    ));
}

#[test]
fn read_bounded_stops_at_the_bound() {
    let dev = Beneath::open(Path::new("/dev")).unwrap();
    let (dir, name) = dev.parent_of(Path::new("zero")).unwrap();
    let zero = dir.open_entry(&name, OFlag::O_RDONLY, 0).unwrap();
    let (bytes, more) = read_bounded(zero, 4096).unwrap();
    assert_eq!(bytes.len(), 4096);
    assert!(more);
}

#[test]
fn create_dirs_makes_real_directories_and_keeps_existing_ones() {
    let (ws, _outside) = tree();
    let root = Beneath::open(ws.path()).unwrap();
    let dir = root.create_dirs(Path::new("a/b/c")).unwrap();
    dir.open_entry(OsStr::new("f"), OFlag::O_WRONLY | OFlag::O_CREAT, 0o644)
        .unwrap();
    assert!(ws.path().join("a/b/c/f").is_file());
    root.create_dirs(Path::new("a/b")).unwrap();
    std::fs::write(ws.path().join("file"), "x").unwrap();
    let err = root.create_dirs(Path::new("file/sub")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(Errno::ENOTDIR as i32), "{err}");
}

/// The review's race: a thread exchanges the directory `d` with a link `e` to a
/// directory outside while the worker writes and reads beneath `d`. Nothing may be written or
/// read outside.
#[test]
fn a_directory_swapped_for_a_link_meanwhile_leads_nowhere_outside() {
    let (ws, outside) = tree();
    std::fs::write(ws.path().join("d/secret"), "inside").unwrap();
    let racer = Racer::start(ws.path(), "d", "e").unwrap();
    let root = Beneath::open(ws.path()).unwrap();
    let (mut written, mut read) = (0, 0);
    for i in 0..2000 {
        let name = format!("x{i}");
        if let Ok(dir) = root.create_dirs(Path::new("d"))
            && dir
                .open_entry(
                    OsStr::new(&name),
                    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
                    0o644,
                )
                .is_ok()
        {
            written += 1;
        }
        if let Ok(file) = root.open_regular(Path::new("d/secret")) {
            let (bytes, _) = read_bounded(file, 1024).unwrap();
            assert_eq!(bytes, b"inside");
            read += 1;
        }
    }
    let swaps = racer.stop();
    let escaped: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "secret")
        .collect();
    assert!(escaped.is_empty(), "written outside: {escaped:?}");
    assert!(swaps > 100, "the racer ran: {swaps} swaps");
    assert!(
        written > 0 && read > 0,
        "some attempts got through: {written} {read}"
    );
}
