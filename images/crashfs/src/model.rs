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
    /// The size last set by a truncate or fallocate since the last fsync or journal commit.
    pub set_size: Option<u64>,
    /// ext4: a size set by a truncate and made durable by a journal commit (another file's fsync) since
    /// this file's own last fsync. The inode's size is journalled metadata, its data is not: a cut keeps
    /// the size and still takes every byte written since the fsync.
    pub committed_size: Option<u64>,
    /// Every byte at or past this offset (below the size) is zero in the backing file: what a write there
    /// replaces needs no read, nor does a read there. Growing a file adds zeros; only a write moves it up.
    /// The broker preallocates its commit log, so all it appends lands past it.
    pub zero_from: u64,
    /// The highest `zero_from` since the last fsync: whatever a cut brings back lies below it.
    pub zero_peak: u64,
}

impl FileLog {
    /// A file as found on the backing directory: all of it durable.
    pub fn durable(size: u64) -> FileLog {
        FileLog { size, durable_size: size, zero_from: size, zero_peak: size, ..FileLog::default() }
    }

    /// The file as a cut left it at `size`: durable, zero past the highest `zero_from` since the fsync.
    pub fn after_cut(&self, size: u64) -> FileLog {
        let z = self.zero_peak.min(size);
        FileLog { zero_from: z, zero_peak: z, ..FileLog::durable(size) }
    }

    /// Bytes up to `end` are about to be written (before the write: a write that fails half-way
    /// leaves no byte past `zero_from` that is not zero).
    pub fn writing(&mut self, end: u64) {
        self.zero_from = self.zero_from.max(end);
        self.zero_peak = self.zero_peak.max(end);
    }

    /// A truncate to `size`: what it cuts off and grows back later reads as zeros.
    pub fn resized(&mut self, size: u64) {
        self.zero_from = self.zero_from.min(size);
    }

    /// The part of [lo, hi) that must be read from the backing file, [lo, returned): the rest is zeros.
    pub fn nonzero_end(&self, lo: u64, hi: u64) -> u64 {
        self.zero_from.clamp(lo, hi)
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

    /// A truncate or fallocate: a change like any other, whose new size a journal commit makes durable.
    pub fn record_size(&mut self, offset: u64, end: u64, old: Vec<u8>, size_after: u64) {
        self.record(offset, end, old, size_after);
        self.set_size = Some(size_after);
    }

    /// ext4's journal commit (an fsync of another file): the size set last by a truncate is durable.
    pub fn commit_metadata(&mut self) {
        if let Some(s) = self.set_size.take() {
            self.committed_size = Some(s);
        }
    }

    /// fsync/fdatasync: everything so far is durable.
    pub fn sync(&mut self) {
        self.zero_peak = self.zero_from;
        self.undo.clear();
        self.pending_bytes = 0;
        self.durable_size = self.size;
        self.set_size = None;
        self.committed_size = None;
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
            if let Some(c) = log.committed_size.filter(|c| *c != sum.size_after) {
                steps.push(Step::SetLen(c)); // the journal's size; what lies past the durable bytes is zeros
                sum.size_after = c;
            }
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
            let size = log.committed_size.unwrap_or(log.durable_size).max(end);
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
            Step::Write(_, data) if data.is_empty() => {} // as pwrite: writing nothing does not extend a file
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

    /// A truncate as fs.rs's set_size records it (record_size): a journal commit may keep its size.
    fn truncate_journalled(log: &mut FileLog, content: &mut Vec<u8>, n: u64) {
        let old = if n < log.size { content[n as usize..].to_vec() } else { vec![] };
        let (lo, hi) = (n.min(log.size), n.max(log.size));
        log.record_size(lo, hi, old, n);
        content.resize(n as usize, 0);
    }

    #[test]
    fn a_journal_commit_keeps_a_truncated_size_and_none_of_the_bytes() {
        // a preallocated file (a 4.9 consume queue): created empty, grown by ftruncate, written, never
        // fsynced itself; another file's fsync commits the journal (ext4)
        let mut c = Vec::new();
        let mut log = FileLog::durable(0);
        write(&mut log, &mut c, 0, b"early");
        truncate_journalled(&mut log, &mut c, 16);
        write(&mut log, &mut c, 5, b"late");
        log.commit_metadata();
        write(&mut log, &mut c, 16, b"past"); // grows the file by a write: not the journal's
        let (got, sum) = cut(&log, &c, Mode::LoseUnsynced, 0);
        assert_eq!((got, sum.size_after), (vec![0u8; 16], 16));
        for seed in 0..8 {
            let (got, sum) = cut(&log, &c, Mode::KeepPrefix, seed); // a prefix of the writes, the size kept
            assert_eq!((got.len(), sum.size_after), (16, 16), "seed {seed}");
        }
        let (got, sum) = cut(&log, &c, Mode::Torn, 3);
        assert!(got.len() >= 16 && sum.size_after == got.len() as u64);
        // without the commit the size goes with the rest; after the file's own fsync nothing is lost
        let mut plain = FileLog::durable(0);
        let mut c2 = Vec::new();
        truncate_journalled(&mut plain, &mut c2, 16);
        assert_eq!(cut(&plain, &c2, Mode::LoseUnsynced, 0).0, Vec::<u8>::new());
        plain.commit_metadata();
        plain.sync();
        assert_eq!(plain.committed_size, None);
        assert_eq!(cut(&plain, &c2, Mode::LoseUnsynced, 0).0, vec![0u8; 16]);
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

    // ---- what a user relies on: the modes by name, a seed replaying the same cut, the counters

    #[test]
    fn the_modes_are_parsed_and_named_as_the_control_socket_and_the_fault_log_spell_them() {
        for (name, mode) in
            [("lose-unsynced", Mode::LoseUnsynced), ("keep-prefix", Mode::KeepPrefix), ("torn", Mode::Torn)]
        {
            assert_eq!(Mode::parse(name), Some(mode));
            assert_eq!(mode.name(), name);
        }
        assert_eq!(Mode::parse("Torn"), None);
        assert_eq!(Mode::parse(""), None);
    }

    #[test]
    fn the_rng_is_splitmix64_so_a_seed_replays_on_every_platform() {
        // the reference splitmix64 sequence from seed 0
        let mut r = Rng::new(0);
        assert_eq!([r.next(), r.next(), r.next()], [0xe220_a839_7b1d_cdaf, 0x6e78_9e6a_a1b9_65f4, 0x06c4_5d18_8009_454f]);
        // upto(n) is every value of [0, n], n included, and nothing else
        let mut r = Rng::new(1);
        let drawn: BTreeSet<u64> = (0..200).map(|_| r.upto(3)).collect();
        assert_eq!(drawn, BTreeSet::from([0, 1, 2, 3]));
        assert!((0..20).all(|_| r.upto(0) == 0));
    }

    #[test]
    fn a_files_rng_is_the_cut_seed_xor_the_fnv1a_hash_of_its_path() {
        // FNV-1a 64 of "" is its offset basis, of "a" the published test vector
        for (seed, path, hash) in [
            (0u64, &b""[..], 0xcbf2_9ce4_8422_2325u64),
            (0, &b"a"[..], 0xaf63_dc4c_8601_ec8c),
            (0xff00_ff00_ff00_ff00, &b"a"[..], 0xaf63_dc4c_8601_ec8c),
        ] {
            assert_eq!(file_rng(seed, path).next(), Rng::new(seed ^ hash).next(), "seed {seed:#x} path {path:?}");
        }
    }

    #[test]
    fn a_files_log_counts_its_unsynced_bytes_until_an_fsync() {
        let found = FileLog::durable(5);
        assert_eq!((found.size, found.durable_size, found.pending_bytes, found.dirty()), (5, 5, 0, false));
        let mut c = b"12345".to_vec();
        let mut log = found.clone();
        write(&mut log, &mut c, 3, b"abcd"); // 4 bytes, 2 of them below the size: saved
        assert_eq!((log.undo[0].old.as_slice(), log.undo[0].size_before), (&b"45"[..], 5));
        truncate(&mut log, &mut c, 2); // [2, 7) removed
        assert_eq!((log.size, log.durable_size, log.pending_bytes, log.dirty()), (2, 5, 9, true));
        log.sync();
        assert_eq!((log.size, log.durable_size, log.pending_bytes, log.dirty()), (2, 2, 0, false));
        assert_eq!(cut(&log, &c, Mode::LoseUnsynced, 3).0, b"12");
    }

    #[test]
    fn zero_from_rises_with_writes_falls_with_truncates_and_a_cut_keeps_the_peak() {
        let mut log = FileLog::durable(100);
        assert_eq!((log.zero_from, log.zero_peak), (100, 100)); // found on disk: nothing known
        log.resized(10);
        log.resized(4096); // grown back: zeros past 10
        assert_eq!(log.zero_from, 10);
        assert_eq!(log.nonzero_end(0, 4096), 10);
        assert_eq!(log.nonzero_end(20, 30), 20); // all zeros: nothing to read
        assert_eq!(log.nonzero_end(4, 8), 8);
        log.writing(50);
        log.writing(30); // below: no change
        assert_eq!((log.zero_from, log.zero_peak), (50, 100));
        log.sync();
        assert_eq!((log.zero_from, log.zero_peak), (50, 50));
        log.writing(70);
        log.resized(60);
        assert_eq!((log.zero_from, log.zero_peak), (60, 70));
        // a cut may bring back what a truncate took (up to 70); past the size it is never asked
        let after = log.after_cut(4096);
        assert_eq!((after.zero_from, after.zero_peak, after.size, after.durable_size), (70, 70, 4096, 4096));
        assert!(!after.dirty());
        assert_eq!(log.after_cut(40).zero_from, 40);
        let new = FileLog::durable(0);
        assert_eq!((new.zero_from, new.zero_peak), (0, 0));
    }

    #[test]
    fn only_the_bytes_below_the_size_are_saved_before_a_change() {
        let log = FileLog::durable(10);
        assert_eq!(log.saved_range(4, 8), (4, 8));
        assert_eq!(log.saved_range(8, 20), (8, 10));
        assert_eq!(log.saved_range(12, 14), (12, 12));
        assert_eq!(log.saved_range(0, 0), (0, 0));
    }

    /// A file durable at `durable` bytes of 1s, then three unsynced changes: a write across its end,
    /// an overwrite inside, a truncate. The content after each change.
    fn three_changes(durable: usize) -> (FileLog, Vec<Vec<u8>>) {
        let mut c = vec![1u8; durable];
        let mut log = FileLog::durable(durable as u64);
        let mut states = vec![c.clone()];
        write(&mut log, &mut c, durable as u64 - 3, &[2; 10]);
        states.push(c.clone());
        write(&mut log, &mut c, 1, &[3; 2]);
        states.push(c.clone());
        truncate(&mut log, &mut c, durable as u64 - 5);
        states.push(c.clone());
        (log, states)
    }

    #[test]
    fn lose_unsynced_ignores_the_seed_and_drops_every_change() {
        let (log, states) = three_changes(20);
        for seed in 0..50 {
            let (got, sum) = cut(&log, states.last().unwrap(), Mode::LoseUnsynced, seed);
            assert_eq!(got, states[0], "seed {seed}");
            assert_eq!((sum.kept_changes, sum.dropped_changes, sum.size_before, sum.size_after), (0, 3, 15, 20));
        }
    }

    #[test]
    fn keep_prefix_draws_every_prefix_from_none_to_all() {
        let (log, states) = three_changes(20);
        let mut kept = BTreeSet::new();
        for seed in 0..100 {
            let (got, sum) = cut(&log, states.last().unwrap(), Mode::KeepPrefix, seed);
            assert_eq!(got, states[sum.kept_changes], "seed {seed}");
            assert_eq!(sum.kept_changes + sum.dropped_changes, 3);
            assert_eq!((sum.size_before, sum.size_after), (15, got.len() as u64));
            kept.insert(sum.kept_changes);
        }
        assert_eq!(kept, BTreeSet::from([0, 1, 2, 3]));
    }

    /// What a torn cut must leave, from the rule itself: the pages changed since the fsync, in page
    /// order, each kept on an odd draw of the file's rng; the size grows to the furthest kept page's end.
    fn torn_oracle(durable: &[u8], now: &[u8], pages: &[u64], seed: u64) -> (Vec<u8>, usize) {
        let mut rng = Rng::new(seed);
        let mut out = durable.to_vec();
        let mut kept = 0;
        for p in pages {
            if rng.next() % 2 == 1 {
                let (lo, hi) = ((p * PAGE) as usize, (((p + 1) * PAGE) as usize).min(now.len()));
                if out.len() < hi {
                    out.resize(hi, 0);
                }
                out[lo..hi].copy_from_slice(&now[lo..hi]);
                kept += 1;
            }
        }
        (out, kept)
    }

    #[test]
    fn torn_keeps_each_changed_page_by_a_coin_of_the_files_rng_in_page_order() {
        let page = PAGE as usize;
        // one durable page; then a write from inside page 2 to 100 bytes short of page 6's end
        let durable = vec![1u8; page];
        let mut c = durable.clone();
        let mut log = FileLog::durable(page as u64);
        write(&mut log, &mut c, 2 * PAGE + 5, &vec![7u8; 4 * page - 105]);
        let mut outcomes = BTreeSet::new();
        for seed in 0..40 {
            let (got, sum) = cut(&log, &c, Mode::Torn, seed);
            let (want, kept) = torn_oracle(&durable, &c, &[2, 3, 4, 5], seed);
            assert_eq!(got, want, "seed {seed}");
            assert_eq!((sum.kept_changes, sum.dropped_changes), (kept, 1), "seed {seed}");
            assert_eq!((sum.size_before, sum.size_after), (c.len() as u64, got.len() as u64));
            outcomes.insert(kept);
        }
        assert_eq!(outcomes, BTreeSet::from([0, 1, 2, 3, 4]), "from no page to every page");
    }

    #[test]
    fn torn_counts_a_page_aligned_change_as_its_own_pages_only() {
        let page = PAGE as usize;
        let mut c = Vec::new();
        let mut log = FileLog::durable(0);
        write(&mut log, &mut c, 0, &vec![5u8; page]); // exactly page 0: page 1 is not touched
        for seed in 0..20 {
            let (got, sum) = cut(&log, &c, Mode::Torn, seed);
            let (want, kept) = torn_oracle(&[], &c, &[0], seed);
            assert_eq!((got, sum.kept_changes), (want, kept), "seed {seed}");
        }
    }

    #[test]
    fn torn_never_shrinks_a_file_and_restores_what_a_truncate_removed() {
        let page = PAGE as usize;
        let mut c = vec![1u8; 3 * page];
        let mut log = FileLog::durable(3 * PAGE);
        truncate(&mut log, &mut c, PAGE); // no page of the file as it is now was changed
        for seed in 0..20 {
            let (got, sum) = cut(&log, &c, Mode::Torn, seed);
            assert_eq!(got, vec![1u8; 3 * page], "seed {seed}");
            assert_eq!((sum.kept_changes, sum.dropped_changes, sum.size_after), (0, 1, 3 * PAGE));
        }
    }

    #[test]
    fn torn_sets_the_size_it_reports_even_when_a_page_reads_back_short() {
        // the filesystem's read of a page can fail (it then reads as empty): the file must still end
        // where the cut's summary says, which is what the filesystem records as durable
        let mut c = Vec::new();
        let mut log = FileLog::durable(0);
        write(&mut log, &mut c, 0, &vec![5u8; 3 * PAGE as usize]);
        for seed in 0..20 {
            let (steps, sum) = plan_cut(&log, Mode::Torn, &mut Rng::new(seed), &mut |_, _| Vec::new());
            let mut got = c.clone();
            apply(&mut got, &steps);
            assert_eq!(got.len() as u64, sum.size_after, "seed {seed}");
        }
    }

    #[test]
    fn a_directory_fsync_takes_earlier_changes_of_the_same_name_in_another_directory() {
        // tmp (ino 9) made and unlinked, a new tmp (ino 10) made and renamed into directory 2, then an
        // unrelated file: fsync of directory 2 takes the rename and everything that used the name tmp
        let mut log = vec![
            op(1, "tmp", 9, MetaKind::Create { dir: false }),
            op(1, "tmp", 9, MetaKind::Remove { grave: "g1".into() }),
            op(1, "tmp", 10, MetaKind::Create { dir: false }),
            op(1, "tmp", 10, MetaKind::Rename { to_parent: 2, to_name: "final".into(), replaced: None }),
            op(1, "other", 11, MetaKind::Create { dir: false }),
        ];
        let durable = fsync_dir(&mut log, 2);
        assert_eq!(durable.iter().map(|o| o.ino).collect::<Vec<_>>(), vec![9, 9, 10, 10]);
        assert_eq!(log.iter().map(|o| o.ino).collect::<Vec<_>>(), vec![11]);
    }
}
