//! The process tree psmisc pstree builds from /proc, built from one snapshot.
//!
//! psmisc adds each process after its threads, in /proc order, inserting every node into its
//! parent's child list sorted by name then uid (or by pid with `-n`), equal keys in insertion
//! order; parents not (yet) seen get a `?` placeholder, and placeholders never seen at all
//! end up under the root. It finds nodes by walking a linked list and compares subtrees
//! recursively, which is quadratic; here nodes are indexed by pid, sibling lists are sorted
//! once (stable sorts keep psmisc's insertion order for ties), and identical subtrees are
//! found by giving every subtree a class number bottom-up, so building is O(n log n).
//!
//! This module owns the tree's shape and the per-node data psmisc keeps (including its
//! reading of the command line under `-a`); printing is left to the renderer.

use std::collections::HashMap;

use taskdiag_proto::task::Task;

/// psmisc's COMM_LEN: names keep at most COMM_LEN + 1 bytes; thread names are
/// `{` + at most COMM_LEN bytes + `}`.
pub const COMM_LEN: usize = 64;
/// glibc's BUFSIZ: how much of a command line psmisc reads under `-l`.
const BUFSIZ: usize = 8192;

/// No node.
pub const NONE: u32 = u32::MAX;

/// One process or thread (or a placeholder for a parent that was never read).
#[derive(Debug, Clone)]
pub struct Node {
    /// Pid (or tid).
    pub pid: i32,
    /// Process group id (a thread's is its process's).
    pub pgid: i32,
    /// Owner: the effective uid of the process (a thread shows its process's); `None` when
    /// CRED was not read (not needed by the options, or unreadable).
    pub uid: Option<u32>,
    /// Name as psmisc stores it: the /proc name, or `{name}` for a thread, or `?`.
    pub comm: Vec<u8>,
    /// With `-a`: number of arguments after argv\[0\], -1 for an empty command line.
    pub argc: i32,
    /// With `-a`: the arguments psmisc shows.
    pub argv: Vec<Vec<u8>>,
    /// A thread (not the thread-group leader).
    pub thread: bool,
    /// Seconds since the process started (for `-C age`).
    pub age: f64,
    /// Highlighted (`-h`/`-H`).
    pub highlight: bool,
    /// With `-Z`: the security context psmisc shows (see [`scontext`]).
    pub label: Vec<u8>,
    /// Namespace inodes in psmisc's order ([`super::opts::NAMESPACES`]), when NS was read; 0
    /// where psmisc's stat of /proc/PID/ns/TYPE would fail (no such link, not readable, a
    /// placeholder).
    pub ns: [u32; 8],
    /// Parent node, or [`NONE`].
    pub parent: u32,
    /// Children, in output order.
    pub children: Vec<u32>,
}

impl Node {
    fn placeholder(pid: i32) -> Node {
        Node {
            pid,
            pgid: 0,
            uid: None,
            comm: b"?".to_vec(),
            argc: 0,
            argv: Vec::new(),
            thread: false,
            age: 0.0,
            highlight: false,
            label: Vec::new(),
            ns: [0; 8],
            parent: NONE,
            children: Vec::new(),
        }
    }
}

/// A task's namespace inodes in psmisc's order (all 0 without NS), as psmisc's stat() of
/// /proc/PID/ns/NAME gives them to this caller ([`crate::procvals::ns_inode`]: on Linux 5.10,
/// the inode of a withheld link's directory).
fn ns_of(t: &Task) -> [u32; 8] {
    let ns = t.ns.as_ref();
    super::opts::NAMESPACES
        .map(|name| crate::procvals::ns_inode(ns, true, t.pid, name).unwrap_or(0))
}

/// How to build.
#[derive(Debug, Clone, Copy)]
pub struct Build {
    /// Keep command lines (`-a`).
    pub args: bool,
    /// Output width, when lines are truncated: psmisc reads that many command-line bytes.
    pub trunc_width: Option<usize>,
    /// Threads under their own names (`-t`).
    pub thread_names: bool,
    /// Sort siblings by pid (`-n`).
    pub by_pid: bool,
    /// The root pid (1, or 0 where /proc/0 exists).
    pub root_pid: i32,
    /// Seconds since boot and clock ticks per second, for ages (`-C age`).
    pub clock: Option<(f64, u64)>,
}

/// What psmisc's `out_scontext` shows of a task's /proc/PID/attr/current without SELinux or
/// AppArmor libraries: the file's first line (fgets, at most BUFSIZ - 1 bytes) up to a NUL, its
/// last byte dropped (the newline, which it assumes); nothing where the file cannot be read.
pub fn scontext(t: &Task) -> Vec<u8> {
    let Some(s) = t.security.as_ref().filter(|s| s.rec.label_errno == 0) else {
        return Vec::new();
    };
    let l = &s.label[..s.label.len().min(BUFSIZ - 1)];
    let line = match l.iter().position(|&c| c == b'\n') {
        Some(i) => &l[..=i],
        None => l,
    };
    let line = &line[..line.iter().position(|&c| c == 0).unwrap_or(line.len())];
    line[..line.len().saturating_sub(1)].to_vec()
}

/// The tree.
#[derive(Debug, Default)]
pub struct Tree {
    /// All nodes.
    pub nodes: Vec<Node>,
    /// Node of each pid.
    pub index: HashMap<i32, u32>,
}

/// psmisc's `set_args`: splits a command line (already cut to what psmisc reads, plus the
/// NUL it appends) into the arguments after argv\[0\]. Its count skips runs of NULs while the
/// arguments themselves are taken one NUL at a time, and a command line that ends in NUL
/// yields a final empty argument; both quirks show in its output and are kept.
pub fn set_args(raw: &[u8], read_max: usize) -> (i32, Vec<Vec<u8>>) {
    let n = raw.len().min(read_max);
    if n == 0 {
        return (-1, Vec::new());
    }
    let mut buf = Vec::with_capacity(n + 1);
    buf.extend_from_slice(&raw[..n]);
    buf.push(0);
    let size = buf.len();
    let mut argc = 0usize;
    let mut i = 0;
    while i < size - 1 {
        if buf[i] == 0 {
            argc += 1;
            while buf[i] == 0 && i < size - 1 {
                i += 1;
            }
        }
        i += 1;
    }
    let mut argv = Vec::with_capacity(argc);
    if argc > 0 {
        // argv[0] is skipped: arguments start after the first NUL.
        let mut p = buf.iter().position(|&c| c == 0).map_or(size, |z| z + 1);
        for _ in 0..argc {
            let rest = buf.get(p..).unwrap_or_default();
            let len = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
            argv.push(rest[..len].to_vec());
            p += len + 1;
        }
    }
    (i32::try_from(argc).unwrap_or(i32::MAX), argv)
}

/// `{name}` as psmisc names threads, cut like its buffers cut it.
fn thread_comm(name: &[u8]) -> Vec<u8> {
    let inner = &name[..name.len().min(COMM_LEN)];
    let mut v = Vec::with_capacity(inner.len() + 2);
    v.push(b'{');
    v.extend_from_slice(inner);
    v.push(b'}');
    v.truncate(COMM_LEN + 1);
    v
}

fn stored_comm(name: &[u8]) -> Vec<u8> {
    name[..name.len().min(COMM_LEN + 1)].to_vec()
}

/// One add_proc call of psmisc, in its order.
struct Entry {
    node: Node,
    ppid: i32,
}

impl Tree {
    /// Builds the tree from a snapshot sorted like /proc (processes by pid, each leader
    /// followed by its threads).
    pub fn build(tasks: &[Task], b: &Build) -> Tree {
        let read_max = match b.trunc_width {
            // psmisc reads width+1 bytes into a buffer of that size, then keeps one less.
            Some(w) => w,
            None => BUFSIZ,
        };
        let mut entries: Vec<Entry> = Vec::with_capacity(tasks.len());
        let mut i = 0;
        while i < tasks.len() {
            let leader = &tasks[i];
            let mut j = i + 1;
            while j < tasks.len() && tasks[j].tgid == leader.tgid {
                j += 1;
            }
            let group = &tasks[i..j];
            i = j;
            let Some(base) = leader.base.as_ref().filter(|_| leader.pid == leader.tgid) else {
                continue;
            };
            let pid = leader.pid as i32;
            let uid = leader.cred.as_ref().map(|c| c.rec.euid);
            let pgid = base.rec.pgid as i32;
            let age = b.clock.map_or(0.0, |(uptime, hz)| {
                let ns_per_tick = (1_000_000_000 / hz.max(1)).max(1);
                let jiffies = base.rec.start_time_ns / ns_per_tick;
                (uptime - jiffies as f64 / hz.max(1) as f64).max(0.0)
            });
            for t in &group[1..] {
                let name = match (&t.base, b.thread_names) {
                    (Some(tb), true) => &tb.comm,
                    _ => &base.comm,
                };
                let comm = thread_comm(name);
                let (argc, argv) = if b.args {
                    set_args(&comm, usize::MAX)
                } else {
                    (0, Vec::new())
                };
                entries.push(Entry {
                    node: Node {
                        pid: t.pid as i32,
                        pgid,
                        uid,
                        comm,
                        argc,
                        argv,
                        thread: true,
                        age,
                        highlight: false,
                        label: scontext(t),
                        ns: ns_of(t),
                        parent: NONE,
                        children: Vec::new(),
                    },
                    ppid: pid,
                });
            }
            let (argc, argv) = if b.args {
                set_args(leader.cmdline.as_deref().unwrap_or_default(), read_max)
            } else {
                (0, Vec::new())
            };
            let ppid = base.rec.ppid as i32;
            entries.push(Entry {
                node: Node {
                    pid,
                    pgid,
                    uid,
                    comm: stored_comm(&base.comm),
                    argc,
                    argv,
                    thread: false,
                    age,
                    highlight: false,
                    label: scontext(leader),
                    ns: ns_of(leader),
                    parent: NONE,
                    children: Vec::new(),
                },
                ppid: if ppid == pid { 0 } else { ppid },
            });
        }
        let mut t = Tree {
            nodes: Vec::with_capacity(entries.len() + 8),
            index: HashMap::with_capacity(entries.len() + 8),
        };
        let mut ppids = Vec::with_capacity(entries.len());
        for e in entries {
            // A pid read twice (impossible in one snapshot) keeps its first node.
            if t.index.contains_key(&e.node.pid) {
                continue;
            }
            t.index.insert(e.node.pid, t.nodes.len() as u32);
            t.nodes.push(e.node);
            ppids.push(e.ppid);
        }
        // Parents, in psmisc's insertion order; placeholders for parents never read, in the
        // order psmisc creates them.
        let mut placeholders: Vec<u32> = Vec::new();
        for (k, &ppid) in ppids.iter().enumerate() {
            if t.nodes[k].pid == 0 {
                continue;
            }
            let p = t.node_or_placeholder(ppid, &mut placeholders);
            t.nodes[k].parent = p;
            t.nodes[p as usize].children.push(k as u32);
        }
        // psmisc's fix_orphans: placeholders without a parent go under the root, newest
        // first (it walks its list, which it builds by prepending).
        let root = t.node_or_placeholder(b.root_pid, &mut placeholders);
        for &ph in placeholders.iter().rev() {
            let n = &t.nodes[ph as usize];
            if n.pid == 0 || n.pid == 1 || n.parent != NONE || ph == root {
                continue;
            }
            t.nodes[ph as usize].parent = root;
            t.nodes[root as usize].children.push(ph);
        }
        t.break_cycles();
        t.sort(b.by_pid);
        t
    }

    fn node_or_placeholder(&mut self, pid: i32, placeholders: &mut Vec<u32>) -> u32 {
        if let Some(&n) = self.index.get(&pid) {
            return n;
        }
        let n = self.nodes.len() as u32;
        self.nodes.push(Node::placeholder(pid));
        self.index.insert(pid, n);
        placeholders.push(n);
        n
    }

    /// A snapshot read over time could in theory record a parent loop (pid reuse); psmisc
    /// would recurse forever. Loops are cut so every walk ends.
    fn break_cycles(&mut self) {
        let n = self.nodes.len();
        // 0: unknown, 1: on the current walk, 2: reaches a parentless node.
        let mut state = vec![0u8; n];
        let mut path = Vec::new();
        for start in 0..n {
            let mut cur = start as u32;
            path.clear();
            loop {
                let c = cur as usize;
                match state[c] {
                    2 => break,
                    1 => {
                        // A loop through `cur`: detach it from its parent.
                        let p = self.nodes[c].parent;
                        if p != NONE {
                            self.nodes[p as usize].children.retain(|&x| x != cur);
                        }
                        self.nodes[c].parent = NONE;
                        break;
                    }
                    _ => {}
                }
                state[c] = 1;
                path.push(cur);
                let p = self.nodes[c].parent;
                if p == NONE {
                    break;
                }
                cur = p;
            }
            for &q in &path {
                state[q as usize] = 2;
            }
        }
    }

    /// Sorts every child list as psmisc's insertion keeps it: by name (strcmp), then uid,
    /// or by pid; ties stay in insertion order.
    fn sort(&mut self, by_pid: bool) {
        for k in 0..self.nodes.len() {
            if self.nodes[k].children.len() < 2 {
                continue;
            }
            let mut ch = std::mem::take(&mut self.nodes[k].children);
            let nodes = &self.nodes;
            if by_pid {
                ch.sort_by_key(|&c| nodes[c as usize].pid);
            } else {
                ch.sort_by(|&a, &b| {
                    let (a, b) = (&nodes[a as usize], &nodes[b as usize]);
                    a.comm.cmp(&b.comm).then(a.uid.cmp(&b.uid))
                });
            }
            self.nodes[k].children = ch;
        }
    }

    /// The node of `pid`.
    pub fn find(&self, pid: i32) -> Option<u32> {
        self.index.get(&pid).copied()
    }

    /// Marks `pid` and its ancestors highlighted.
    pub fn highlight(&mut self, pid: i32) {
        let mut cur = self.find(pid).unwrap_or(NONE);
        while cur != NONE {
            let n = &mut self.nodes[cur as usize];
            n.highlight = true;
            cur = n.parent;
        }
    }

    /// psmisc's `-s`: every ancestor of `node` keeps only the child on the path to it.
    pub fn trim_to_ancestors(&mut self, node: u32) {
        let mut cur = node;
        loop {
            let p = self.nodes[cur as usize].parent;
            if p == NONE {
                break;
            }
            self.nodes[p as usize].children = vec![cur];
            cur = p;
        }
    }

    /// psmisc's `-N`: from the node of pid 1 down, each node whose namespace of type `id`
    /// differs from its parent's (or that has no parent) is detached and listed under that
    /// namespace; namespaces in the order first met, each with its trees in that order.
    pub fn sort_by_namespace(&mut self, id: usize) -> Vec<(u32, Vec<u32>)> {
        let mut groups: Vec<(u32, Vec<u32>)> = Vec::new();
        let Some(start) = self.find(1) else {
            return groups;
        };
        // Depth first, children in order; a node's children are read after it is moved
        // (moving detaches it from its parent, not from its children).
        let mut stack = vec![start];
        while let Some(k) = stack.pop() {
            let (parent, ino) = {
                let n = &self.nodes[k as usize];
                (n.parent, n.ns[id])
            };
            if parent == NONE || self.nodes[parent as usize].ns[id] != ino {
                match groups.iter_mut().find(|g| g.0 == ino) {
                    Some(g) => g.1.push(k),
                    None => groups.push((ino, vec![k])),
                }
                if parent != NONE {
                    self.nodes[parent as usize].children.retain(|&c| c != k);
                    self.nodes[k as usize].parent = NONE;
                }
            }
            stack.extend(self.nodes[k as usize].children.iter().rev());
        }
        groups
    }

    /// Class numbers: two nodes have the same class exactly when psmisc's `tree_equal`
    /// holds (same name, same uid when `with_uid`, same namespaces when `with_ns`, children
    /// pairwise equal in order).
    pub fn classes(&self, with_uid: bool, with_ns: bool) -> Vec<u32> {
        let n = self.nodes.len();
        // Children before parents: reverse of a breadth-first order from the parentless.
        let mut order: Vec<u32> = (0..n as u32)
            .filter(|&k| self.nodes[k as usize].parent == NONE)
            .collect();
        let mut at = 0;
        while at < order.len() {
            let k = order[at] as usize;
            order.extend_from_slice(&self.nodes[k].children);
            at += 1;
        }
        let mut names: HashMap<&[u8], u32> = HashMap::new();
        // (name, owner if it counts, namespaces if they count, children's classes) -> class.
        type Key = (u32, Option<u32>, [u32; 8], Box<[u32]>);
        let mut ids: HashMap<Key, u32> = HashMap::new();
        let mut class = vec![NONE; n];
        for &k in order.iter().rev() {
            let node = &self.nodes[k as usize];
            let next_name = names.len() as u32;
            let name = *names.entry(node.comm.as_slice()).or_insert(next_name);
            let kids: Box<[u32]> = node.children.iter().map(|&c| class[c as usize]).collect();
            let ns = if with_ns { node.ns } else { [0; 8] };
            let key = (name, if with_uid { node.uid } else { None }, ns, kids);
            let next = ids.len() as u32;
            class[k as usize] = *ids.entry(key).or_insert(next);
        }
        class
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::task::{Base, Cred};

    fn task(pid: u32, tgid: u32, ppid: u32, comm: &str, euid: u32) -> Task {
        let mut t = Task {
            pid,
            tgid,
            ..Task::default()
        };
        let mut b = Base {
            comm: comm.as_bytes().to_vec(),
            ..Base::default()
        };
        b.rec.ppid = ppid;
        b.rec.pgid = tgid;
        t.base = Some(b);
        let mut c = Cred::default();
        c.rec.euid = euid;
        t.cred = Some(c);
        t
    }

    const B: Build = Build {
        args: false,
        trunc_width: Some(132),
        thread_names: false,
        by_pid: false,
        root_pid: 1,
        clock: None,
    };

    fn names(t: &Tree, pid: i32) -> Vec<(i32, String)> {
        let n = t.find(pid).expect("node");
        t.nodes[n as usize]
            .children
            .iter()
            .map(|&c| {
                let c = &t.nodes[c as usize];
                (c.pid, String::from_utf8_lossy(&c.comm).into_owned())
            })
            .collect()
    }

    #[test]
    fn siblings_sort_by_name_then_uid_then_insertion() {
        let tasks = vec![
            task(1, 1, 0, "init", 0),
            task(5, 5, 1, "b", 0),
            task(6, 6, 1, "a", 7),
            task(7, 7, 1, "a", 3),
            task(8, 8, 1, "a", 3),
            task(9, 9, 1, "c", 0),
            task(10, 9, 1, "c", 0),
        ];
        let t = Tree::build(&tasks, &B);
        let got = names(&t, 1);
        assert_eq!(
            got,
            [
                (7, "a".into()),
                (8, "a".into()),
                (6, "a".into()),
                (5, "b".into()),
                (9, "c".into())
            ]
        );
        assert_eq!(names(&t, 9), [(10, "{c}".into())]);
        let t = Tree::build(&tasks, &Build { by_pid: true, ..B });
        let pids: Vec<i32> = names(&t, 1).iter().map(|p| p.0).collect();
        assert_eq!(pids, [5, 6, 7, 8, 9]);
    }

    #[test]
    fn missing_parents_become_placeholders_under_the_root() {
        // 20 and 30 have parents that were never read; the newest placeholder comes first.
        let tasks = vec![
            task(1, 1, 0, "init", 0),
            task(20, 20, 200, "x", 0),
            task(30, 30, 300, "y", 0),
        ];
        let t = Tree::build(&tasks, &B);
        assert_eq!(names(&t, 1), [(300, "?".into()), (200, "?".into())]);
        // Without a root process, a placeholder root holds them.
        let t = Tree::build(&tasks[1..], &B);
        assert_eq!(t.nodes[t.find(1).expect("root") as usize].comm, b"?");
        assert_eq!(names(&t, 1).len(), 2);
    }

    #[test]
    fn classes_follow_tree_equal() {
        let tasks = vec![
            task(1, 1, 0, "init", 0),
            task(2, 2, 1, "s", 0),
            task(3, 3, 2, "leaf", 0),
            task(4, 4, 1, "s", 5),
            task(5, 5, 4, "leaf", 0),
            task(6, 6, 1, "s", 0),
        ];
        let t = Tree::build(&tasks, &B);
        let c = t.classes(false, false);
        let cl = |pid| c[t.find(pid).expect("node") as usize];
        assert_eq!(cl(2), cl(4));
        assert_ne!(cl(2), cl(6));
        let c = t.classes(true, false);
        assert_ne!(
            c[t.find(2).expect("n") as usize],
            c[t.find(4).expect("n") as usize]
        );
    }

    #[test]
    fn set_args_keeps_psmisc_quirks() {
        assert_eq!(set_args(b"", 100), (-1, vec![]));
        let (argc, argv) = set_args(b"sleep\x0010\x00", 100);
        assert_eq!((argc, argv), (2, vec![b"10".to_vec(), vec![]]));
        // Cut in the middle of the last argument: no final empty one.
        let (argc, argv) = set_args(b"cmd\x00abc\x00defgh", 10);
        assert_eq!((argc, argv), (2, vec![b"abc".to_vec(), b"de".to_vec()]));
        // Runs of NULs count once but arguments are taken one NUL at a time.
        let (argc, argv) = set_args(b"a\x00\x00b\x00", 100);
        assert_eq!((argc, argv), (2, vec![vec![], b"b".to_vec()]));
        assert_eq!(set_args(b"{t}", usize::MAX), (0, vec![]));
    }

    #[test]
    fn loops_are_cut() {
        let tasks = vec![
            task(1, 1, 0, "init", 0),
            task(5, 5, 6, "a", 0),
            task(6, 6, 5, "b", 0),
        ];
        let t = Tree::build(&tasks, &B);
        let parentless = t.nodes.iter().filter(|n| n.parent == NONE).count();
        assert!(parentless >= 2);
        let _ = t.classes(false, false);
    }
}
