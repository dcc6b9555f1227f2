//! The control socket: one command a line, one JSON line back. The cut's order matters:
//! 1. syncfs on the mount, so dirty pages still in the kernel's page cache (a killed process's mmap)
//!    reach us now, as ordinary writes that are not durable, instead of after the cut;
//! 2. the cut itself (fs.rs), which also retires every open handle: a write arriving later through one
//!    of them is refused, so nothing written before the cut can come back after it;
//! 3. the kernel's cached pages, attributes and names of the mount invalidated, so a process started
//!    afterwards reads what survived.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use fuser::{INodeNo, Notifier};

use crate::fs::Shared;
use crate::model::Mode;

pub fn bind(path: &Path) -> io::Result<UnixListener> {
    let _ = std::fs::remove_file(path);
    UnixListener::bind(path)
}

pub struct Control {
    pub state: Shared,
    pub notifier: Notifier,
    pub mount: PathBuf,
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

impl Control {
    pub fn serve(self, listener: UnixListener) {
        for conn in listener.incoming() {
            match conn {
                Ok(c) => {
                    if let Err(e) = self.session(c) {
                        eprintln!("crashfs: control connection: {e}");
                    }
                }
                Err(e) => eprintln!("crashfs: control accept: {e}"),
            }
        }
    }

    fn session(&self, conn: UnixStream) -> io::Result<()> {
        let mut out = conn.try_clone()?;
        for line in BufReader::new(conn).lines() {
            let line = line?;
            let reply = self.command(line.trim());
            out.write_all(reply.as_bytes())?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    fn command(&self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["ping"] => {
                let g = self.state.lock().map(|s| s.status().0).unwrap_or(0);
                format!("{{\"ok\":true,\"generation\":{g}}}")
            }
            ["status"] => self.status(),
            ["sync"] => {
                // what the kernel still caches is part of "everything so far"
                if let Err(e) = syncfs(&self.mount) {
                    return err(&format!("syncfs: {e}"));
                }
                self.state.lock().unwrap_or_else(|p| p.into_inner()).sync_all();
                "{\"ok\":true}".into()
            }
            ["cut", rest @ ..] => {
                let mode = match rest.first().map(|m| Mode::parse(m)) {
                    None => Mode::LoseUnsynced,
                    Some(Some(m)) => m,
                    Some(None) => return err("mode must be lose-unsynced, keep-prefix or torn"),
                };
                let seed = match rest.get(1).map(|s| s.parse::<u64>()) {
                    None => 0,
                    Some(Ok(s)) => s,
                    Some(Err(_)) => return err("seed must be an unsigned integer"),
                };
                if mode == Mode::KeepPrefix && !self.state.lock().unwrap_or_else(|p| p.into_inner()).write_through() {
                    // The writeback cache merges and reorders writes into pages: the changes we saw are
                    // not the application's, and a prefix of them is not a prefix of its writes.
                    return err("keep-prefix needs a --write-through mount (the kernel's writeback cache reorders writes)");
                }
                self.cut(mode, seed)
            }
            ["unmount"] => {
                let r = std::process::Command::new("umount").arg("-l").arg(&self.mount).status();
                match r {
                    Ok(s) if s.success() => "{\"ok\":true}".into(),
                    _ => err("umount failed"),
                }
            }
            _ => err("commands: ping, status, sync, cut [MODE] [SEED], unmount"),
        }
    }

    fn status(&self) -> String {
        // the writes the kernel still caches count as changes not yet fsynced, as the cut will see them
        let _ = syncfs(&self.mount);
        let (generation, files, pending_meta) = self.state.lock().unwrap_or_else(|p| p.into_inner()).status();
        let mut o = format!("{{\"ok\":true,\"generation\":{generation},\"pendingNamespaceChanges\":{pending_meta},\"files\":[");
        for (i, f) in files.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push_str(&format!(
                "{{\"path\":{},\"size\":{},\"durableSize\":{},\"pendingChanges\":{},\"cachedBytes\":{}}}",
                esc(&f.path),
                f.size,
                f.durable_size,
                f.pending_changes,
                f.pending_bytes
            ));
        }
        o.push_str("]}");
        o
    }

    fn cut(&self, mode: Mode, seed: u64) -> String {
        let synced = syncfs(&self.mount);
        let report = self.state.lock().unwrap_or_else(|p| p.into_inner()).cut(mode, seed);
        // No lock held from here: invalidating a page may make the kernel call us back.
        for ino in &report.inodes {
            let _ = self.notifier.inval_inode(INodeNo(*ino), 0, 0);
        }
        for (parent, name) in &report.entries {
            let _ = self.notifier.inval_entry(INodeNo(*parent), name);
        }
        let mut o = format!(
            "{{\"ok\":true,\"mode\":{},\"seed\":{seed},\"generation\":{},\"syncfs\":{},\"files\":[",
            esc(mode.name()),
            report.generation,
            synced.map_or_else(|e| esc(&e.to_string()), |()| "true".into())
        );
        for (i, (path, s)) in report.files.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push_str(&format!(
                "{{\"path\":{},\"keptChanges\":{},\"droppedChanges\":{},\"sizeBefore\":{},\"sizeAfter\":{}}}",
                esc(path),
                s.kept_changes,
                s.dropped_changes,
                s.size_before,
                s.size_after
            ));
        }
        o.push_str("],\"namespaceUndone\":[");
        o.push_str(&report.undone.iter().map(|u| esc(u)).collect::<Vec<_>>().join(","));
        o.push_str("]}");
        o
    }
}

fn err(msg: &str) -> String {
    format!("{{\"ok\":false,\"error\":{}}}", esc(msg))
}

fn syncfs(mount: &Path) -> io::Result<()> {
    let c = std::ffi::CString::new(mount.as_os_str().as_bytes()).map_err(|_| io::Error::other("NUL in path"))?;
    // SAFETY: a valid path; the fd is closed below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is open.
    let r = unsafe { libc::syncfs(fd) };
    let e = io::Error::last_os_error();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if r != 0 {
        return Err(e);
    }
    Ok(())
}
