//! What survives a power cut: per-file undo logs and the namespace log, and the cut plans built from
//! them. No I/O here: the filesystem (fs.rs) records, and carries out the plans this module returns.
//! Tests: the `tests` module below, and tests/unit/crashfs (the known-answer suite through a mount).

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsString;

/// The page a torn cut keeps or drops as a whole (the kernel writes back whole pages).
pub const PAGE: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every change since the last fsync is gone (the worst case; the default).
    LoseUnsynced,
    /// A seeded random prefix of each file's changes since its last fsync survives, in order (the changes
    /// as the filesystem received them: the kernel may split one write(2) where an uncached page starts).
    KeepPrefix,
    /// Each 4 KiB page changed since the last fsync keeps its new or its durable content, a seeded coin
    /// per page, in any order; the size grows to the furthest surviving page, never shrinks.
    Torn,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "lose-unsynced" => Some(Mode::LoseUnsynced),
            "keep-prefix" => Some(Mode::KeepPrefix),
            "torn" => Some(Mode::Torn),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Mode::LoseUnsynced => "lose-unsynced",
            Mode::KeepPrefix => "keep-prefix",
            Mode::Torn => "torn",
        }
    }
}

/// One change to a file's bytes or size, with what it replaced: bytes [offset, end) were changed,
/// `old` holds the bytes that were there before, [offset, offset + old.len()), which is the part of the
/// range below `size_before`.
#[derive(Clone, Debug)]
pub struct Undo {
    pub offset: u64,
    pub end: u64,
    pub old: Vec<u8>,
    pub size_before: u64,
    pub size_after: u64,
}

/// A file's changes since its last fsync. `durable_size` is its size at that fsync.
#[derive(Clone, Debug, Default)]
pub struct FileLog {
    pub size: u64,
    pub durable_size: u64,
    pub undo: Vec<Undo>,
    pub pending_bytes: u64,
}

impl FileLog {
    /// A file as found on the backing directory: all of it durable.
    pub fn durable(size: u64) -> FileLog {
        FileLog { size, durable_size: size, ..FileLog::default() }
    }

    /// The part of [offset, end) whose old bytes must be saved before the change: what lies below the size.
    pub fn saved_range(&self, offset: u64, end: u64) -> (u64, u64) {
        let hi = end.min(self.size);
        if offset >= hi {
            (offset, offset)
        } else {
            (offset, hi)
        }
    }

    pub fn record(&mut self, offset: u64, end: u64, old: Vec<u8>, size_after: u64) {
        self.pending_bytes += end.saturating_sub(offset);
        self.undo.push(Undo { offset, end, old, size_before: self.size, size_after });
        self.size = size_after;
    }

    /// fsync/fdatasync: everything so far is durable.
    pub fn sync(&mut self) {
        self.undo.clear();
        self.pending_bytes = 0;
        self.durable_size = self.size;
    }

    pub fn dirty(&self) -> bool {
        !self.undo.is_empty()
    }
}

/// A step of a cut: set the file's length, or write bytes at an offset. Applied in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    SetLen(u64),
    Write(u64, Vec<u8>),
}

/// What a cut did to one file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CutSummary {
    pub kept_changes: usize,
    pub dropped_changes: usize,
    pub size_before: u64,
    pub size_after: u64,
}

/// splitmix64: small, seedable, and the same on every platform, so a seed replays a cut exactly.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n] (inclusive).
    pub fn upto(&mut self, n: u64) -> u64 {
        self.next() % (n + 1)
    }
}

/// One rng per file, from the cut's seed and the file's path, so a file's fate does not depend on the
/// order files are visited in.
pub fn file_rng(seed: u64, path: &[u8]) -> Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Rng::new(seed ^ h)
}

fn undo_steps(undo: &[Undo], steps: &mut Vec<Step>) {
    for u in undo.iter().rev() {
        if u.size_after != u.size_before {
            steps.push(Step::SetLen(u.size_before));
        }
        if !u.old.is_empty() {
            steps.push(Step::Write(u.offset, u.old.clone()));
        }
    }
}

/// The steps that take a file from its current content to what survives the cut. `read(offset, len)`
/// returns the file's current bytes (torn keeps some of them); it is called before any step is applied.
pub fn plan_cut(
    log: &FileLog,
    mode: Mode,
    rng: &mut Rng,
    read: &mut dyn FnMut(u64, usize) -> Vec<u8>,
) -> (Vec<Step>, CutSummary) {
    let n = log.undo.len();
    let mut steps = Vec::new();
    let mut sum = CutSummary { size_before: log.size, ..CutSummary::default() };
    match mode {
        Mode::LoseUnsynced | Mode::KeepPrefix => {
            let keep = if mode == Mode::KeepPrefix { rng.upto(n as u64) as usize } else { 0 };
            undo_steps(&log.undo[keep..], &mut steps);
            sum.kept_changes = keep;
            sum.dropped_changes = n - keep;
            sum.size_after = if keep == 0 { log.durable_size } else { log.undo[keep - 1].size_after };
        }
        Mode::Torn => {
            let mut pages = BTreeSet::new();
            for u in &log.undo {
                let hi = u.end.min(log.size);
                let mut p = u.offset / PAGE;
                while p * PAGE < hi {
                    pages.insert(p);
                    p += 1;
                }
            }
            let mut survivors = Vec::new();
            for p in pages {
                if rng.next() & 1 == 1 {
                    let off = p * PAGE;
                    let len = PAGE.min(log.size - off) as usize;
                    survivors.push((off, read(off, len)));
                }
            }
            undo_steps(&log.undo, &mut steps);
            let end = survivors.iter().map(|(o, d)| o + d.len() as u64).max().unwrap_or(0);
            let size = log.durable_size.max(end);
            if size != log.durable_size {
                steps.push(Step::SetLen(size));
            }
            sum.kept_changes = survivors.len();
            sum.dropped_changes = n;
            sum.size_after = size;
            steps.extend(survivors.into_iter().map(|(o, d)| Step::Write(o, d)));
        }
    }
    (steps, sum)
}

#[cfg(test)]
/// Applies steps to an in-memory file (the model the tests and the property test compare against).
pub fn apply(content: &mut Vec<u8>, steps: &[Step]) {
    for s in steps {
        match s {
            Step::SetLen(n) => content.resize(*n as usize, 0),
            Step::Write(off, data) => {
                let (o, e) = (*off as usize, *off as usize + data.len());
                if content.len() < e {
                    content.resize(e, 0);
                }
                content[o..e].copy_from_slice(data);
            }
        }
    }
}

// ------------------------------------------------------------------ the namespace

/// A change to a directory: it becomes durable only through an fsync of its parent directory (both
/// parents for a rename), or of a directory whose durable change depends on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaKind {
    /// A file, directory or symlink made at (parent, name).
    Create { dir: bool },
    /// (parent, name) removed; the inode waits in the graveyard under `grave` until durable.
    Remove { grave: String },
    /// Moved from (parent, name) to (to_parent, to_name); a file it replaced waits in the graveyard.
    Rename { to_parent: u64, to_name: OsString, replaced: Option<(u64, String)> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaOp {
    pub parent: u64,
    pub name: OsString,
    pub ino: u64,
    pub kind: MetaKind,
}

impl MetaOp {
    fn names(&self) -> Vec<(u64, OsString)> {
        let mut v = vec![(self.parent, self.name.clone())];
        if let MetaKind::Rename { to_parent, to_name, .. } = &self.kind {
            v.push((*to_parent, to_name.clone()));
        }
        v
    }
    fn parents(&self) -> Vec<u64> {
        let mut v = vec![self.parent];
        if let MetaKind::Rename { to_parent, .. } = &self.kind {
            v.push(*to_parent);
        }
        v
    }
    fn inos(&self) -> Vec<u64> {
        let mut v = vec![self.ino];
        if let MetaKind::Rename { replaced: Some((r, _)), .. } = &self.kind {
            v.push(*r);
        }
        v
    }
}

/// fsync of directory `dir`: removes from `log` (which holds only changes not yet durable) every change
/// made in `dir`, and every earlier change one of those depends on (the same name, the same inode, or the
/// creation of a parent directory), so undoing the rest at a cut never meets a name a durable change
/// owns. Returns the changes that became durable, in log order.
pub fn fsync_dir(log: &mut Vec<MetaOp>, dir: u64) -> Vec<MetaOp> {
    make_durable(log, |op| op.parents().contains(&dir))
}

fn make_durable(log: &mut Vec<MetaOp>, seed: impl Fn(&MetaOp) -> bool) -> Vec<MetaOp> {
    let mut names: HashSet<(u64, OsString)> = HashSet::new();
    let mut inos: HashSet<u64> = HashSet::new();
    let mut durable = vec![false; log.len()];
    for (i, op) in log.iter().enumerate().rev() {
        let needed = seed(op)
            || op.names().iter().any(|n| names.contains(n))
            || op.inos().iter().any(|n| inos.contains(n));
        if needed {
            durable[i] = true;
            names.extend(op.names());
            inos.extend(op.inos());
            inos.extend(op.parents());
        }
    }
    let mut out = Vec::new();
    let mut keep = Vec::new();
    for (op, d) in log.drain(..).zip(durable) {
        if d {
            out.push(op);
        } else {
            keep.push(op);
        }
    }
    *log = keep;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(log: &mut FileLog, content: &mut Vec<u8>, off: u64, data: &[u8]) {
        let (lo, hi) = log.saved_range(off, off + data.len() as u64);
        let old = if hi > lo { content[lo as usize..hi as usize].to_vec() } else { Vec::new() };
        let size = log.size.max(off + data.len() as u64);
        log.record(off, off + data.len() as u64, old, size);
        apply(content, &[Step::Write(off, data.to_vec())]);
    }

    fn truncate(log: &mut FileLog, content: &mut Vec<u8>, n: u64) {
        let old = if n < log.size { content[n as usize..].to_vec() } else { vec![] };
        let (lo, hi) = (n.min(log.size), n.max(log.size));
        log.record(lo, hi, old, n);
        content.resize(n as usize, 0);
    }

    fn cut(log: &FileLog, content: &[u8], mode: Mode, seed: u64) -> (Vec<u8>, CutSummary) {
        let mut c = content.to_vec();
        let snapshot = content.to_vec();
        let (steps, sum) = plan_cut(log, mode, &mut Rng::new(seed), &mut |o, n| {
            snapshot[o as usize..o as usize + n].to_vec()
        });
        apply(&mut c, &steps);
        (c, sum)
    }

    #[test]
    fn lose_unsynced_returns_the_durable_image() {
        let mut c = b"durable".to_vec();
        let mut log = FileLog::durable(7);
        write(&mut log, &mut c, 0, b"XX");
        write(&mut log, &mut c, 5, b"YYYYY");
        truncate(&mut log, &mut c, 3);
        write(&mut log, &mut c, 8, b"Z");
        let (got, sum) = cut(&log, &c, Mode::LoseUnsynced, 1);
        assert_eq!(got, b"durable");
        assert_eq!(sum.dropped_changes, 4);
        assert_eq!(sum.size_after, 7);
    }

    #[test]
    fn fsync_makes_everything_so_far_survive() {
        let mut c = Vec::new();
        let mut log = FileLog::durable(0);
        write(&mut log, &mut c, 0, b"abc");
        log.sync();
        write(&mut log, &mut c, 3, b"def");
        let (got, _) = cut(&log, &c, Mode::LoseUnsynced, 1);
        assert_eq!(got, b"abc");
    }

    #[test]
    fn keep_prefix_is_always_an_ordered_prefix() {
        for seed in 0..50 {
            let mut c = Vec::new();
            let mut log = FileLog::durable(0);
            let mut states = vec![c.clone()];
            for i in 0..6u8 {
                write(&mut log, &mut c, u64::from(i) * 3 % 7, &[b'a' + i; 4]);
                states.push(c.clone());
            }
            let (got, sum) = cut(&log, &c, Mode::KeepPrefix, seed);
            assert_eq!(got, states[sum.kept_changes], "seed {seed}");
            assert_eq!(got.len() as u64, sum.size_after);
        }
    }

    #[test]
    fn torn_pages_are_each_old_or_new() {
        let page = PAGE as usize;
        for seed in 0..20 {
            let mut c = vec![1u8; page * 2];
            let mut log = FileLog::durable(c.len() as u64);
            write(&mut log, &mut c, 0, &vec![2u8; page * 5]);
            let (got, sum) = cut(&log, &c, Mode::Torn, seed);
            assert!(got.len() >= page * 2 && got.len() % page == 0);
            assert_eq!(got.len() as u64, sum.size_after);
            for (i, chunk) in got.chunks(page).enumerate() {
                let v = chunk[0];
                assert!(chunk.iter().all(|b| *b == v));
                let ok = if i < 2 { v == 1 || v == 2 } else { v == 0 || v == 2 };
                assert!(ok, "seed {seed} page {i} holds {v}");
            }
        }
    }

    #[test]
    fn a_seed_replays_the_same_cut() {
        let mut c = Vec::new();
        let mut log = FileLog::durable(0);
        for i in 0..10u8 {
            write(&mut log, &mut c, u64::from(i) * 5000, &[i; 100]);
        }
        for mode in [Mode::KeepPrefix, Mode::Torn] {
            assert_eq!(cut(&log, &c, mode, 42), cut(&log, &c, mode, 42));
        }
    }

    fn op(parent: u64, name: &str, ino: u64, kind: MetaKind) -> MetaOp {
        MetaOp { parent, name: name.into(), ino, kind }
    }

    #[test]
    fn fsync_of_a_directory_takes_only_its_changes_and_their_dependencies() {
        let mut log = vec![
            op(1, "a", 10, MetaKind::Create { dir: false }),
            op(1, "d", 11, MetaKind::Create { dir: true }),
            op(11, "x", 12, MetaKind::Create { dir: false }),
            op(1, "b", 13, MetaKind::Create { dir: false }),
        ];
        let durable = fsync_dir(&mut log, 11);
        let names: Vec<_> = durable.iter().map(|o| o.name.clone()).collect();
        assert_eq!(names, vec![OsString::from("d"), OsString::from("x")]);
        assert_eq!(log.len(), 2);
        let rest: Vec<_> = log.iter().map(|o| o.name.clone()).collect();
        assert_eq!(rest, vec![OsString::from("a"), OsString::from("b")]);
    }

    #[test]
    fn a_durable_rename_pulls_in_the_create_it_moved() {
        let mut log = vec![
            op(1, "tmp", 10, MetaKind::Create { dir: false }),
            op(
                1,
                "tmp",
                10,
                MetaKind::Rename { to_parent: 2, to_name: "final".into(), replaced: None },
            ),
        ];
        let durable = fsync_dir(&mut log, 2);
        assert_eq!(durable.len(), 2);
        assert!(log.is_empty());
    }
}
