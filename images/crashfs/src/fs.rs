//! The FUSE side: every request is passed through to the backing directory, and every change that is
//! not durable yet is recorded (model.rs) so `cut` can take it back. Tests: tests/unit/crashfs.
//!
//! Writes go straight to the backing file (reads need no merge, the kernel page cache works as usual,
//! mmap included); the bytes a write replaces are read first and kept in memory until the file's next
//! fsync. That costs one pread per overwrite and nothing per append, the common case for a log, nor
//! per write into a preallocated file's zeros (FileLog::zero_from).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::model::{self, CutSummary, FileLog, MetaKind, MetaOp, Mode, Step};

/// The graveyard: removed and replaced inodes wait here (inside the backing directory, so a rename
/// moves them) until their removal is durable. Hidden from the mount.
pub const GRAVE: &str = ".crashfs-graveyard";
const TTL: Duration = Duration::from_secs(1);

pub struct Options {
    /// ext4's auto_da_alloc: renaming a file over an existing one makes the renamed file's data durable.
    pub rename_over_flushes: bool,
    /// ext4 (data=ordered): an fsync of any file commits the one journal of the filesystem, and with it
    /// every namespace change made before it; POSIX asks for an fsync of the directory.
    pub fsync_commits_journal: bool,
    /// Ask the kernel for its writeback cache (FUSE_WRITEBACK_CACHE): write(2) lands in the page cache and
    /// reaches us at writeback, at the latest at the file's fsync (the kernel writes the dirty pages back,
    /// waits for our replies, then sends FSYNC) or at the cut's syncfs. Off (--write-through): every
    /// write(2) is a request, in the application's order, which keep-prefix needs.
    pub writeback_cache: bool,
}

struct Node {
    parent: u64,
    name: OsString,
    /// Set while the inode sits in the graveyard (removed, the removal not durable yet).
    grave: Option<PathBuf>,
    log: Option<FileLog>,
}

struct Handle {
    file: File,
    generation: u64,
}

pub struct State {
    backing: PathBuf,
    nodes: HashMap<u64, Node>,
    by_name: HashMap<(u64, OsString), u64>,
    handles: HashMap<u64, Handle>,
    meta: Vec<MetaOp>,
    next_ino: u64,
    next_fh: u64,
    next_grave: u64,
    /// Bumped by each cut: a handle opened before it is refused (its process belongs to before the cut).
    generation: u64,
    opts: Options,
    /// The kernel granted the writeback cache (set at FUSE init).
    writeback_cache: bool,
}

pub type Shared = Arc<Mutex<State>>;

fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs((-secs) as u64)
    }
}

fn attr(ino: u64, m: &fs::Metadata) -> FileAttr {
    let ft = m.file_type();
    let kind = if ft.is_dir() {
        FileType::Directory
    } else if ft.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(ino),
        size: m.size(),
        blocks: m.blocks(),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind,
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev() as u32,
        blksize: 4096,
        flags: 0,
    }
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        Some(TimeOrNow::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        Some(TimeOrNow::SpecificTime(st)) => {
            let d = st.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec { tv_sec: d.as_secs() as i64, tv_nsec: i64::from(d.subsec_nanos()) }
        }
    }
}

fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_bytes()).expect("paths from the kernel hold no NUL")
}

/// Reads [lo, hi) of a file (short at EOF: the rest were zeros of a hole or nothing).
fn read_range(f: &File, lo: u64, hi: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; (hi - lo) as usize];
    let mut done = 0;
    while done < buf.len() {
        let n = f.read_at(&mut buf[done..], lo + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done); // short at EOF, as the kernel wants a read there
    Ok(buf)
}

/// What [lo, hi) holds before a change, reading only [lo, nonzero) (the rest is known zeros: a
/// preallocated log's appends read nothing, and ext4 zero-fills nothing for them).
fn read_old(f: &File, lo: u64, hi: u64, nonzero: u64) -> io::Result<Vec<u8>> {
    if nonzero <= lo {
        return Ok(vec![0u8; (hi - lo) as usize]);
    }
    let mut old = read_range(f, lo, nonzero)?;
    if old.len() as u64 == nonzero - lo {
        old.resize((hi - lo) as usize, 0);
    }
    Ok(old)
}

/// A read reply of zeros, never written.
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

fn apply_steps(f: &File, steps: &[Step]) -> io::Result<()> {
    for s in steps {
        match s {
            Step::SetLen(n) => f.set_len(*n)?,
            Step::Write(off, data) => f.write_all_at(data, *off)?,
        }
    }
    Ok(())
}

/// What `cut` did, for the control reply.
pub struct CutReport {
    pub generation: u64,
    pub files: Vec<(String, CutSummary)>,
    pub undone: Vec<String>,
    pub inodes: Vec<u64>,
    pub entries: Vec<(u64, OsString)>,
}

/// A file in `status`.
pub struct FileStatus {
    pub path: String,
    pub size: u64,
    pub durable_size: u64,
    pub pending_changes: usize,
    pub pending_bytes: u64,
}

impl State {
    pub fn new(backing: PathBuf, opts: Options) -> io::Result<State> {
        fs::create_dir_all(backing.join(GRAVE))?;
        let mut nodes = HashMap::new();
        nodes.insert(1, Node { parent: 1, name: OsString::new(), grave: None, log: None });
        Ok(State {
            backing,
            nodes,
            by_name: HashMap::new(),
            handles: HashMap::new(),
            meta: Vec::new(),
            next_ino: 2,
            next_fh: 1,
            next_grave: 0,
            generation: 1,
            opts,
            writeback_cache: false,
        })
    }

    /// Whether writes reach us in the application's order (no writeback cache): keep-prefix needs it.
    pub fn write_through(&self) -> bool {
        !self.writeback_cache
    }

    fn path(&self, ino: u64) -> Option<PathBuf> {
        let mut parts = Vec::new();
        let mut cur = ino;
        while cur != 1 {
            let n = self.nodes.get(&cur)?;
            if let Some(g) = &n.grave {
                let mut p = g.clone();
                for part in parts.iter().rev() {
                    p.push(part);
                }
                return Some(p);
            }
            parts.push(n.name.clone());
            cur = n.parent;
        }
        let mut p = self.backing.clone();
        for part in parts.iter().rev() {
            p.push(part);
        }
        Some(p)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        if parent == 1 && name == GRAVE {
            return None;
        }
        Some(self.path(parent)?.join(name))
    }

    /// The inode for (parent, name), made on first sight; files found on the backing are durable.
    fn intern(&mut self, parent: u64, name: &OsStr, m: &fs::Metadata) -> u64 {
        if let Some(ino) = self.by_name.get(&(parent, name.to_os_string())) {
            return *ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let log = if m.is_file() { Some(FileLog::durable(m.size())) } else { None };
        self.nodes.insert(ino, Node { parent, name: name.to_os_string(), grave: None, log });
        self.by_name.insert((parent, name.to_os_string()), ino);
        ino
    }

    fn detach(&mut self, ino: u64, grave: Option<PathBuf>) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            self.by_name.remove(&(n.parent, n.name.clone()));
            n.grave = grave;
        }
    }

    fn attach(&mut self, ino: u64, parent: u64, name: &OsStr) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = parent;
            n.name = name.to_os_string();
            n.grave = None;
        }
        self.by_name.insert((parent, name.to_os_string()), ino);
    }

    fn new_grave(&mut self) -> (String, PathBuf) {
        self.next_grave += 1;
        let name = format!("g{}", self.next_grave);
        let p = self.backing.join(GRAVE).join(&name);
        (name, p)
    }

    fn handle(&self, fh: FileHandle) -> Result<&Handle, Errno> {
        let h = self.handles.get(&fh.0).ok_or(Errno::EBADF)?;
        if h.generation != self.generation {
            return Err(Errno::EIO); // opened before the last cut: that process is gone with the power
        }
        Ok(h)
    }

    fn lookup_entry(&mut self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let p = self.child(parent, name).ok_or(Errno::ENOENT)?;
        let m = fs::symlink_metadata(&p).map_err(errno)?;
        let ino = self.intern(parent, name, &m);
        Ok(attr(ino, &m))
    }

    fn getattr_of(&self, ino: u64) -> Result<FileAttr, Errno> {
        let p = self.path(ino).ok_or(Errno::ENOENT)?;
        let m = fs::symlink_metadata(&p).map_err(errno)?;
        Ok(attr(ino, &m))
    }

    /// Writes through and records what the write replaced.
    fn write_at(&mut self, fh: FileHandle, ino: u64, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let gen = self.generation;
        let h = self.handles.get(&fh.0).ok_or(Errno::EBADF)?;
        if h.generation != gen {
            return Err(Errno::EIO);
        }
        let log = self.nodes.get_mut(&ino).and_then(|n| n.log.as_mut()).ok_or(Errno::EIO)?;
        let end = offset + data.len() as u64;
        let (lo, hi) = log.saved_range(offset, end);
        let old = if hi > lo { read_old(&h.file, lo, hi, log.nonzero_end(lo, hi)).map_err(errno)? } else { Vec::new() };
        log.writing(end);
        h.file.write_all_at(data, offset).map_err(errno)?;
        let size = log.size.max(end);
        log.record(offset, end, old, size);
        Ok(data.len() as u32)
    }

    /// A size change (truncate, or fallocate growing the file), recorded with what it removed.
    fn set_size(&mut self, ino: u64, file: &File, size: u64) -> Result<(), Errno> {
        let log = self.nodes.get_mut(&ino).and_then(|n| n.log.as_mut()).ok_or(Errno::EIO)?;
        if size == log.size {
            return file.set_len(size).map_err(errno);
        }
        let old = if size < log.size {
            read_old(file, size, log.size, log.nonzero_end(size, log.size)).map_err(errno)?
        } else {
            Vec::new()
        };
        file.set_len(size).map_err(errno)?;
        log.resized(size);
        let (lo, hi) = (size.min(log.size), size.max(log.size));
        log.record_size(lo, hi, old, size);
        Ok(())
    }

    fn fsync_file(&mut self, ino: u64, file: &File) -> Result<(), Errno> {
        // The backing file's own fsync is not needed for the model (the cut is what loses data) and
        // would cost a real disk flush per call; the backing directory is scratch space.
        let _ = file;
        if let Some(log) = self.nodes.get_mut(&ino).and_then(|n| n.log.as_mut()) {
            log.sync();
        }
        if self.opts.fsync_commits_journal {
            // the journal holds every inode's size too (a truncate's, never a write's data)
            for log in self.nodes.values_mut().filter_map(|n| n.log.as_mut()) {
                log.commit_metadata();
            }
            let ops: Vec<MetaOp> = self.meta.drain(..).collect();
            for op in &ops {
                self.forget_grave(op);
            }
        }
        Ok(())
    }

    fn fsync_dir(&mut self, dir: u64) {
        for op in model::fsync_dir(&mut self.meta, dir) {
            self.forget_grave(&op);
        }
    }

    /// A removal became durable: the inode in the graveyard goes for good.
    fn forget_grave(&mut self, op: &MetaOp) {
        let grave = match &op.kind {
            MetaKind::Remove { grave } => Some(grave.clone()),
            MetaKind::Rename { replaced: Some((_, g)), .. } => Some(g.clone()),
            _ => None,
        };
        if let Some(g) = grave {
            let p = self.backing.join(GRAVE).join(g);
            let _ = fs::remove_dir_all(&p).or_else(|_| fs::remove_file(&p));
        }
    }

    fn make_node(
        &mut self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        make: impl FnOnce(&Path) -> io::Result<()>,
        dir: bool,
    ) -> Result<FileAttr, Errno> {
        let p = self.child(parent, name).ok_or(Errno::EPERM)?;
        make(&p).map_err(errno)?;
        let _ = std::os::unix::fs::lchown(&p, Some(req.uid()), Some(req.gid()));
        let m = fs::symlink_metadata(&p).map_err(errno)?;
        self.by_name.remove(&(parent, name.to_os_string()));
        let ino = self.intern(parent, name, &m);
        if let Some(log) = self.nodes.get_mut(&ino).and_then(|n| n.log.as_mut()) {
            *log = FileLog::durable(0); // a new file: its bytes and its name both wait for an fsync
            log.durable_size = 0;
        }
        self.meta.push(MetaOp { parent, name: name.to_os_string(), ino, kind: MetaKind::Create { dir } });
        Ok(attr(ino, &m))
    }

    fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let p = self.child(parent, name).ok_or(Errno::ENOENT)?;
        let m = fs::symlink_metadata(&p).map_err(errno)?;
        if dir {
            if !m.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            if fs::read_dir(&p).map_err(errno)?.next().is_some() {
                return Err(Errno::ENOTEMPTY);
            }
        } else if m.is_dir() {
            return Err(Errno::EISDIR);
        }
        let ino = self.intern(parent, name, &m);
        let (g, gp) = self.new_grave();
        fs::rename(&p, &gp).map_err(errno)?;
        self.detach(ino, Some(gp));
        self.meta.push(MetaOp { parent, name: name.to_os_string(), ino, kind: MetaKind::Remove { grave: g } });
        Ok(())
    }

    fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        let from = self.child(parent, name).ok_or(Errno::ENOENT)?;
        let to = self.child(newparent, newname).ok_or(Errno::EPERM)?;
        let m = fs::symlink_metadata(&from).map_err(errno)?;
        let ino = self.intern(parent, name, &m);
        let mut replaced = None;
        if let Ok(tm) = fs::symlink_metadata(&to) {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if tm.is_dir() != m.is_dir() {
                return Err(if tm.is_dir() { Errno::EISDIR } else { Errno::ENOTDIR });
            }
            if tm.is_dir() && fs::read_dir(&to).map_err(errno)?.next().is_some() {
                return Err(Errno::ENOTEMPTY);
            }
            let tino = self.intern(newparent, newname, &tm);
            if tino == ino {
                return Ok(());
            }
            let (g, gp) = self.new_grave();
            fs::rename(&to, &gp).map_err(errno)?;
            self.detach(tino, Some(gp));
            replaced = Some((tino, g));
        }
        if let Err(e) = fs::rename(&from, &to) {
            if let Some((tino, g)) = &replaced {
                let _ = fs::rename(self.backing.join(GRAVE).join(g), &to);
                self.attach(*tino, newparent, newname);
            }
            return Err(errno(e));
        }
        self.detach(ino, None);
        self.attach(ino, newparent, newname);
        if replaced.is_some() && self.opts.rename_over_flushes {
            if let Some(log) = self.nodes.get_mut(&ino).and_then(|n| n.log.as_mut()) {
                log.sync();
            }
        }
        self.meta.push(MetaOp {
            parent,
            name: name.to_os_string(),
            ino,
            kind: MetaKind::Rename { to_parent: newparent, to_name: newname.to_os_string(), replaced },
        });
        Ok(())
    }

    fn open_backing(&mut self, ino: u64, flags: i32) -> Result<u64, Errno> {
        let p = self.path(ino).ok_or(Errno::ENOENT)?;
        let acc = flags & libc::O_ACCMODE;
        // O_APPEND stays with the kernel, which sends each write at the end it knows: a backing file
        // opened with it would ignore the offsets we are given.
        let file = OpenOptions::new()
            .read(true)
            .write(acc != libc::O_RDONLY)
            .custom_flags(flags & (libc::O_NOFOLLOW | libc::O_NOATIME))
            .open(&p)
            .or_else(|_| OpenOptions::new().read(acc != libc::O_WRONLY).write(acc != libc::O_RDONLY).open(&p))
            .map_err(errno)?;
        if flags & libc::O_TRUNC != 0 && acc != libc::O_RDONLY {
            self.set_size(ino, &file, 0)?;
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, Handle { file, generation: self.generation });
        Ok(fh)
    }

    pub fn sync_all(&mut self) {
        for n in self.nodes.values_mut() {
            if let Some(log) = n.log.as_mut() {
                log.sync();
            }
        }
        let ops: Vec<MetaOp> = self.meta.drain(..).collect();
        for op in &ops {
            self.forget_grave(op);
        }
    }

    pub fn status(&self) -> (u64, Vec<FileStatus>, usize) {
        let mut files = Vec::new();
        for (ino, n) in &self.nodes {
            if let (Some(log), Some(p)) = (&n.log, self.path(*ino)) {
                let rel = p.strip_prefix(&self.backing).unwrap_or(&p).to_string_lossy().into_owned();
                files.push(FileStatus {
                    path: rel,
                    size: log.size,
                    durable_size: log.durable_size,
                    pending_changes: log.undo.len(),
                    pending_bytes: log.pending_bytes,
                });
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        (self.generation, files, self.meta.len())
    }

    /// The power cut: every change not durable is taken back, files first (at their current paths),
    /// then the namespace, newest change first. Handles opened before it stop working.
    pub fn cut(&mut self, mode: Mode, seed: u64) -> CutReport {
        self.generation += 1;
        let mut report = CutReport {
            generation: self.generation,
            files: Vec::new(),
            undone: Vec::new(),
            inodes: self.nodes.keys().copied().collect(),
            entries: Vec::new(),
        };
        let created: std::collections::HashSet<u64> = self
            .meta
            .iter()
            .filter(|o| matches!(o.kind, MetaKind::Create { .. }))
            .map(|o| o.ino)
            .collect();
        let dirty: Vec<u64> =
            self.nodes.iter().filter(|(_, n)| n.log.as_ref().is_some_and(|l| l.dirty())).map(|(i, _)| *i).collect();
        for ino in dirty {
            let Some(p) = self.path(ino) else { continue };
            let log = self.nodes[&ino].log.clone().expect("dirty files have a log");
            if created.contains(&ino) {
                continue; // its creation is undone below
            }
            let rel = p.strip_prefix(&self.backing).unwrap_or(&p).as_os_str().as_bytes().to_vec();
            let mut rng = model::file_rng(seed, &rel);
            let file = match OpenOptions::new().read(true).write(true).open(&p) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("crashfs: cut cannot open {}: {e}", p.display());
                    continue;
                }
            };
            let (steps, sum) =
                model::plan_cut(&log, mode, &mut rng, &mut |o, n| read_range(&file, o, o + n as u64).unwrap_or_default());
            if let Err(e) = apply_steps(&file, &steps) {
                eprintln!("crashfs: cut of {} failed: {e}", p.display());
            }
            self.nodes.get_mut(&ino).expect("dirty").log = Some(log.after_cut(sum.size_after));
            report.files.push((String::from_utf8_lossy(&rel).into_owned(), sum));
        }
        let ops: Vec<MetaOp> = self.meta.drain(..).collect();
        for op in ops.iter().rev() {
            report.undone.push(self.undo_meta(op));
            report.entries.push((op.parent, op.name.clone()));
            if let MetaKind::Rename { to_parent, to_name, .. } = &op.kind {
                report.entries.push((*to_parent, to_name.clone()));
            }
        }
        self.renumber_files(&mut report.entries);
        report
    }

    /// Every regular file gets a new inode number, and its name is invalidated: the kernel then makes
    /// a fresh inode at the next lookup, with the size we give it. With the writeback cache the kernel
    /// trusts its own size of a cached inode over ours and an invalidation does not change that, and an
    /// inode a process still holds open cannot be evicted; a process alive across the cut keeps the old
    /// inode and its pages (its handles are refused), which nobody opening the file afterwards sees.
    fn renumber_files(&mut self, entries: &mut Vec<(u64, OsString)>) {
        let files: Vec<u64> = self.nodes.iter().filter(|(_, n)| n.log.is_some()).map(|(i, _)| *i).collect();
        for old in files {
            let node = self.nodes.remove(&old).expect("listed above");
            let new = self.next_ino;
            self.next_ino += 1;
            if node.grave.is_none() {
                if let Some(slot) = self.by_name.get_mut(&(node.parent, node.name.clone())) {
                    if *slot == old {
                        *slot = new;
                    }
                }
                entries.push((node.parent, node.name.clone()));
            }
            self.nodes.insert(new, node);
        }
    }

    fn undo_meta(&mut self, op: &MetaOp) -> String {
        let here = self.path(op.parent).map(|p| p.join(&op.name));
        let Some(here) = here else { return format!("skip {:?}", op.name) };
        let shown = here.strip_prefix(&self.backing).unwrap_or(&here).to_string_lossy().into_owned();
        let res = match &op.kind {
            MetaKind::Create { dir } => {
                let r = if *dir { fs::remove_dir_all(&here) } else { fs::remove_file(&here) };
                self.detach(op.ino, None);
                if let Some(n) = self.nodes.get_mut(&op.ino) {
                    n.log = None;
                }
                self.nodes.remove(&op.ino);
                r.map(|_| format!("uncreate {shown}"))
            }
            MetaKind::Remove { grave } => {
                let r = fs::rename(self.backing.join(GRAVE).join(grave), &here);
                self.attach(op.ino, op.parent, &op.name);
                r.map(|_| format!("unremove {shown}"))
            }
            MetaKind::Rename { to_parent, to_name, replaced } => {
                let there = self.path(*to_parent).map(|p| p.join(to_name)).unwrap_or_default();
                let r = fs::rename(&there, &here);
                self.detach(op.ino, None);
                self.attach(op.ino, op.parent, &op.name);
                if let Some((tino, g)) = replaced {
                    let _ = fs::rename(self.backing.join(GRAVE).join(g), &there);
                    self.attach(*tino, *to_parent, to_name);
                }
                r.map(|_| format!("unrename {shown}"))
            }
        };
        res.unwrap_or_else(|e| format!("failed {shown}: {e}"))
    }
}

pub struct CrashFs(pub Shared);

impl CrashFs {
    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Filesystem for CrashFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let mut st = self.st();
        if st.opts.writeback_cache {
            // Without it (an old kernel) we are write-through, which is correct, only slower.
            st.writeback_cache = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE).is_ok();
        }
        eprintln!("crashfs: kernel writeback cache {}", if st.writeback_cache { "on" } else { "off" });
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.st().lookup_entry(parent.0, name) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.st().getattr_of(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.st();
        let res = (|| -> Result<FileAttr, Errno> {
            let p = st.path(ino.0).ok_or(Errno::ENOENT)?;
            if let Some(m) = mode {
                fs::set_permissions(&p, fs::Permissions::from_mode(m & 0o7777)).map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&p, uid, gid).map_err(errno)?;
            }
            if let Some(n) = size {
                let file = match fh {
                    Some(fh) => st.handle(fh)?.file.try_clone().map_err(errno)?,
                    None => OpenOptions::new().write(true).read(true).open(&p).map_err(errno)?,
                };
                st.set_size(ino.0, &file, n)?;
            }
            if atime.is_some() || mtime.is_some() {
                let ts = [timespec(atime), timespec(mtime)];
                let c = cpath(&p);
                // SAFETY: c is a valid NUL-terminated path and ts two timespecs, as utimensat wants.
                let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
                if r != 0 {
                    return Err(errno(io::Error::last_os_error()));
                }
            }
            st.getattr_of(ino.0)
        })();
        match res {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let st = self.st();
        match st.path(ino.0).ok_or(Errno::ENOENT).and_then(|p| fs::read_link(p).map_err(errno)) {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM); // only regular files: a store holds nothing else
        }
        let perm = mode & !umask & 0o7777;
        let make = |p: &Path| OpenOptions::new().write(true).create_new(true).mode(perm).open(p).map(|_| ());
        match self.st().make_node(req, parent.0, name, make, false) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let perm = mode & !umask & 0o7777;
        let make = |p: &Path| {
            fs::create_dir(p)?;
            fs::set_permissions(p, fs::Permissions::from_mode(perm))
        };
        match self.st().make_node(req, parent.0, name, make, true) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.st().remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.st().remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let make = |p: &Path| std::os::unix::fs::symlink(target, p);
        match self.st().make_node(req, parent.0, link_name, make, false) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.st().rename(parent.0, name, newparent.0, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.st().open_backing(ino.0, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let perm = mode & !umask & 0o7777;
        let mut st = self.st();
        let make = |p: &Path| OpenOptions::new().write(true).create_new(true).mode(perm).open(p).map(|_| ());
        let res = st
            .make_node(req, parent.0, name, make, false)
            .and_then(|a| st.open_backing(a.ino.0, flags & !libc::O_TRUNC).map(|fh| (a, fh)));
        match res {
            Ok((a, fh)) => reply.created(&TTL, &a, Generation(0), FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let st = self.st();
        let h = match st.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        // The kernel fills each page a write only partly covers: on a preallocated log, zeros.
        if let Some(log) = st.nodes.get(&ino.0).and_then(|n| n.log.as_ref()) {
            let end = (offset + u64::from(size)).min(log.size);
            if offset >= log.zero_from && end.saturating_sub(offset) <= ZEROS.len() as u64 {
                return reply.data(&ZEROS[..end.saturating_sub(offset) as usize]);
            }
        }
        match read_range(&h.file, offset, offset + u64::from(size)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.st().write_at(fh, ino.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok() // close() is not fsync
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.st().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let mut st = self.st();
        let res = st.handle(fh).and_then(|h| h.file.try_clone().map_err(errno)).and_then(|f| st.fsync_file(ino.0, &f));
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let mut st = self.st();
        let Some(p) = st.path(ino.0) else { return reply.error(Errno::ENOENT) };
        let rd = match fs::read_dir(&p) {
            Ok(rd) => rd,
            Err(e) => return reply.error(errno(e)),
        };
        let parent = st.nodes.get(&ino.0).map(|n| n.parent).unwrap_or(1);
        let mut entries = vec![(ino.0, FileType::Directory, OsString::from(".")), (parent, FileType::Directory, "..".into())];
        for e in rd.flatten() {
            let name = e.file_name();
            if ino.0 == 1 && name == GRAVE {
                continue;
            }
            let Ok(m) = e.metadata() else { continue };
            let child = st.intern(ino.0, &name, &m);
            entries.push((child, attr(child, &m).kind, name));
        }
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.st().fsync_dir(ino.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let st = self.st();
        let c = cpath(&st.backing);
        // SAFETY: statvfs fills the zeroed struct we own from a valid NUL-terminated path.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
            return reply.error(errno(io::Error::last_os_error()));
        }
        reply.statfs(s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree, s.f_bsize as u32, 255, s.f_frsize as u32);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok() // default_permissions: the kernel checks the mode bits
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut st = self.st();
        let res = (|| -> Result<(), Errno> {
            let file = st.handle(fh)?.file.try_clone().map_err(errno)?;
            let size = st.nodes.get(&ino.0).and_then(|n| n.log.as_ref()).map(|l| l.size).ok_or(Errno::EIO)?;
            let end = offset + length;
            let changes_bytes = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
            if changes_bytes {
                // Save what the hole or the zeros replace, as for a write.
                let log = st.nodes.get_mut(&ino.0).and_then(|n| n.log.as_mut()).ok_or(Errno::EIO)?;
                let (lo, hi) = log.saved_range(offset, end);
                let old = if hi > lo { read_old(&file, lo, hi, log.nonzero_end(lo, hi)).map_err(errno)? } else { Vec::new() };
                do_fallocate(&file, mode, offset, length)?;
                let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
                let after = if keep { size } else { size.max(end) };
                log.record(offset, end, old, after);
                return Ok(());
            }
            do_fallocate(&file, mode, offset, length)?;
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > size {
                let log = st.nodes.get_mut(&ino.0).and_then(|n| n.log.as_mut()).ok_or(Errno::EIO)?;
                log.record(size, end, Vec::new(), end);
            }
            Ok(())
        })();
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

fn do_fallocate(file: &File, mode: i32, offset: u64, length: u64) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open fd and plain integers.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as i64, length as i64) };
    if r != 0 {
        return Err(errno(io::Error::last_os_error()));
    }
    Ok(())
}
