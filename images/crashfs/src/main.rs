//! crashfs: a crash-consistency FUSE filesystem (README.md beside this folder says how to use it).
//!
//!   crashfs --backing DIR --mount DIR --control SOCKET [--rename-over-flushes] [--fsync-commits-journal] [--write-through]
//!
//! The control socket takes one line per command and answers one JSON line:
//!   ping | status | sync | cut [lose-unsynced|keep-prefix|torn] [SEED] | unmount

mod control;
mod fs;
mod model;

use std::path::PathBuf;
use std::process::exit;
use std::sync::{Arc, Mutex};

use fuser::{Config, MountOption, SessionACL};

fn usage(msg: &str) -> ! {
    eprintln!("crashfs: {msg}");
    eprintln!("usage: crashfs --backing DIR --mount DIR --control SOCKET [--rename-over-flushes] [--fsync-commits-journal] [--write-through]");
    exit(2)
}

fn main() {
    let mut backing = None;
    let mut mount = None;
    let mut control = None;
    let mut rename_over_flushes = false;
    let mut fsync_commits_journal = false;
    let mut write_through = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--backing" => backing = args.next().map(PathBuf::from),
            "--mount" => mount = args.next().map(PathBuf::from),
            "--control" => control = args.next().map(PathBuf::from),
            "--rename-over-flushes" => rename_over_flushes = true,
            "--fsync-commits-journal" => fsync_commits_journal = true,
            "--write-through" => write_through = true,
            "--version" => {
                println!("crashfs {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let backing = backing.unwrap_or_else(|| usage("--backing is required"));
    let mount = mount.unwrap_or_else(|| usage("--mount is required"));
    let control = control.unwrap_or_else(|| usage("--control is required"));
    let state = match fs::State::new(backing.clone(), fs::Options { rename_over_flushes, fsync_commits_journal, writeback_cache: !write_through }) {
        Ok(s) => Arc::new(Mutex::new(s)),
        Err(e) => usage(&format!("cannot use backing directory {}: {e}", backing.display())),
    };
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("crashfs".into()),
        MountOption::Subtype("crashfs".into()),
        MountOption::DefaultPermissions,
    ];
    // allow_other: a docker container bind-mounts the store, and its root must reach it.
    cfg.acl = SessionACL::All;
    // Two workers: the kernel's writeback during a cut's syncfs must find one free.
    cfg.n_threads = Some(2);
    let session = match fuser::spawn_mount(fs::CrashFs(state.clone()), &mount, &cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("crashfs: cannot mount {}: {e} (is /dev/fuse there, and are we root?)", mount.display());
            exit(1)
        }
    };
    let notifier = session.notifier();
    let listener = match control::bind(&control) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("crashfs: cannot listen on {}: {e}", control.display());
            exit(1)
        }
    };
    let ctl = control::Control { state, notifier, mount: mount.clone() };
    std::thread::spawn(move || ctl.serve(listener));
    eprintln!("crashfs: {} on {} (control {})", backing.display(), mount.display(), control.display());
    let res = session.join();
    let _ = std::fs::remove_file(&control);
    if let Err(e) = res {
        eprintln!("crashfs: session ended: {e}");
        exit(1)
    }
}
