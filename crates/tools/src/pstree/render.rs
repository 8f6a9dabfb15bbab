//! Printing the tree exactly as psmisc pstree 23.6 prints it.
//!
//! psmisc counts columns as it writes: every byte but UTF-8 continuation bytes is one column
//! (line-drawing escape sequences included), bytes past the output width are dropped and the
//! first one past it becomes `+`. Names and arguments are escaped (`\\`, `\ooo` for anything
//! outside space..`~`). Identical sibling subtrees print once as `N*[...]`, the closing
//! brackets trailing the last line of the merged subtree. All of that is reproduced here,
//! including the quirks scripts may depend on; the walk is iterative so deep trees cannot
//! exhaust the stack.
//!
//! This module owns the output format only; the tree comes from [`super::tree`].

use std::collections::HashMap;
use std::io::{self, Write};

use super::opts::{Opts, Sym, NAMESPACES};
use super::term::tputs;
use super::tree::{Tree, NONE};

/// The six line-drawing strings: empty, branch, vertical, last, single, first.
struct Syms {
    empty_2: &'static [u8],
    branch_2: &'static [u8],
    vert_2: &'static [u8],
    last_2: &'static [u8],
    single_3: &'static [u8],
    first_3: &'static [u8],
}

const ASCII: Syms = Syms {
    empty_2: b"  ",
    branch_2: b"|-",
    vert_2: b"| ",
    last_2: b"`-",
    single_3: b"---",
    first_3: b"-+-",
};

const UTF: Syms = Syms {
    empty_2: b"  ",
    branch_2: "\u{251c}\u{2500}".as_bytes(),
    vert_2: "\u{2502} ".as_bytes(),
    last_2: "\u{2514}\u{2500}".as_bytes(),
    single_3: "\u{2500}\u{2500}\u{2500}".as_bytes(),
    first_3: "\u{2500}\u{252c}\u{2500}".as_bytes(),
};

// VT100: shift into the graphics set, the symbol, shift back.
const VT100: Syms = Syms {
    empty_2: b"  ",
    branch_2: b"\x1b(0\x0ftq\x1b(B",
    vert_2: b"\x1b(0\x0fx\x1b(B ",
    last_2: b"\x1b(0\x0fmq\x1b(B",
    single_3: b"\x1b(0\x0fqqq\x1b(B",
    first_3: b"\x1b(0\x0fqwq\x1b(B",
};

/// Output with psmisc's column accounting and truncation.
pub struct Out<W: Write> {
    w: W,
    buf: Vec<u8>,
    cur_x: i64,
    charlen: u8,
    width: i64,
    trunc: bool,
    err: Option<io::Error>,
}

impl<W: Write> Out<W> {
    /// Output to `w`, `width` columns wide, truncating lines when `trunc`.
    pub fn new(w: W, width: usize, trunc: bool) -> Self {
        Out {
            w,
            buf: Vec::with_capacity(1 << 16),
            cur_x: 1,
            charlen: 0,
            width: i64::try_from(width).unwrap_or(i64::MAX),
            trunc,
            err: None,
        }
    }

    fn ch(&mut self, c: u8) {
        if self.charlen == 0 {
            self.charlen = if c & 0x80 == 0 {
                1
            } else if c & 0xe0 == 0xc0 {
                2
            } else if c & 0xf0 == 0xe0 {
                3
            } else if c & 0xf8 == 0xf0 {
                4
            } else {
                1
            };
            self.cur_x += 1;
        }
        self.charlen -= 1;
        if !self.trunc || self.cur_x <= self.width {
            self.buf.push(c);
        } else if self.cur_x == self.width + 1 {
            self.buf.push(b'+');
        }
    }

    fn s(&mut self, s: &[u8]) {
        for &c in s {
            self.ch(c);
        }
    }

    /// psmisc's `out_int`: the digits of a non-negative number (nothing for 0); returns
    /// the digit count it computes (1 for 0). Negative numbers (uids above 2^31) come out
    /// as it writes them: characters below '0'.
    fn int(&mut self, x: i32) -> i64 {
        let mut digits = 0i64;
        let mut div: i64 = 1;
        let x = i64::from(x);
        while x / div != 0 {
            digits += 1;
            div *= 10;
        }
        if digits == 0 {
            digits = 1;
        }
        div /= 10;
        while div != 0 {
            let d = (x / div) % 10;
            self.ch((i64::from(b'0') + d) as u8);
            div /= 10;
        }
        digits
    }

    /// psmisc's `out_args`: one name or argument, escaped; returns the columns it counts.
    fn escaped(&mut self, s: &[u8]) -> i64 {
        let mut n = 0;
        for &c in s {
            if c == b'\\' {
                self.s(b"\\\\");
                n += 2;
            } else if (b' '..=b'~').contains(&c) {
                self.ch(c);
                n += 1;
            } else {
                let oct = [
                    b'\\',
                    b'0' + (c >> 6),
                    b'0' + ((c >> 3) & 7),
                    b'0' + (c & 7),
                ];
                self.s(&oct);
                n += 4;
            }
        }
        n
    }

    fn newline(&mut self) {
        self.buf.push(b'\n');
        self.cur_x = 1;
        if self.buf.len() >= 1 << 16 {
            self.flush_buf();
        }
    }

    /// Bytes written around the column accounting (terminal attributes, colors).
    fn raw(&mut self, s: &[u8]) {
        self.buf.extend_from_slice(s);
    }

    fn flush_buf(&mut self) {
        if self.err.is_none() {
            if let Err(e) = self.w.write_all(&self.buf) {
                self.err = Some(e);
            }
        }
        self.buf.clear();
    }

    /// Writes what is buffered; the first write error, if any.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_buf();
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        self.w.flush()?;
        Ok(self.w)
    }
}

/// Children to print after a node, with what psmisc passes down.
struct Pending {
    /// (child, number of identical siblings merged into it).
    leaders: Vec<(u32, u32)>,
    pos: usize,
    level: usize,
    parent_uid: Option<u32>,
    closing: u32,
}

/// Prints trees.
pub struct Printer<'a, W: Write> {
    /// The output.
    pub out: Out<W>,
    tree: &'a Tree,
    o: &'a Opts,
    sym: &'static Syms,
    class: Vec<u32>,
    width: Vec<i64>,
    more: Vec<bool>,
    users: HashMap<u32, Option<Vec<u8>>>,
    bold: Vec<u8>,
    sgr0: Vec<u8>,
}

impl<'a, W: Write> Printer<'a, W> {
    /// A printer of `tree` with options `o`.
    pub fn new(out: Out<W>, tree: &'a Tree, o: &'a Opts) -> Self {
        let class = if o.compact {
            tree.classes(o.user_change, o.ns_change)
        } else {
            Vec::new()
        };
        let caps = o.caps.clone().unwrap_or_default();
        Printer {
            out,
            tree,
            o,
            sym: match o.sym {
                Sym::Ascii => &ASCII,
                Sym::Utf => &UTF,
                Sym::Vt100 => &VT100,
            },
            class,
            width: Vec::new(),
            more: Vec::new(),
            users: HashMap::new(),
            bold: caps.bold.as_deref().map(tputs).unwrap_or_default(),
            sgr0: caps.sgr0.as_deref().map(tputs).unwrap_or_default(),
        }
    }

    fn set_level(&mut self, level: usize, width: i64, more: bool) {
        if self.width.len() <= level {
            self.width.resize(level + 1, 0);
            self.more.resize(level + 1, false);
        }
        self.width[level] = width;
        self.more[level] = more;
    }

    fn user_name(&mut self, uid: u32) -> Option<Vec<u8>> {
        self.users
            .entry(uid)
            .or_insert_with(|| crate::names::user_name(uid).map(String::into_bytes))
            .clone()
    }

    /// The children of `node` that print, with how many identical siblings each absorbs.
    fn leaders(&self, node: u32) -> Vec<(u32, u32)> {
        let kids = &self.tree.nodes[node as usize].children;
        if !self.o.compact || kids.len() < 2 {
            return kids.iter().map(|&c| (c, 0)).collect();
        }
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(kids.len());
        let mut seen: HashMap<u32, usize> = HashMap::new();
        for &c in kids {
            let class = self.class[c as usize];
            if let Some(&at) = seen.get(&class) {
                out[at].1 += 1;
                continue;
            }
            // With -a only threads absorb their later twins.
            if !self.lines() || self.tree.nodes[c as usize].thread {
                seen.insert(class, out.len());
            }
            out.push((c, 0));
        }
        out
    }

    /// Whether every process gets a line of its own (psmisc's `show_scontext || print_args`):
    /// with `-a` or `-Z`, where only threads merge.
    fn lines(&self) -> bool {
        self.o.args || self.o.scontext
    }

    fn color(&mut self, age: f64) {
        if !self.o.color_age {
            return;
        }
        let age = age as i32;
        let c: &[u8] = if age < 60 {
            b"\x1b[32m"
        } else if age < 3600 {
            b"\x1b[33m"
        } else {
            b"\x1b[31m"
        };
        self.out.raw(c);
    }

    /// psmisc's `dump_tree` up to its children: prints the node's line (or the start of
    /// it) and returns the children still to print.
    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        idx: u32,
        level: usize,
        rep: u32,
        leaf: bool,
        last: bool,
        prev_uid: Option<u32>,
        closing: u32,
    ) -> Option<Pending> {
        let tree = self.tree;
        let o = self.o;
        let n = &tree.nodes[idx as usize];
        if !leaf {
            for lvl in 0..level {
                for _ in 0..(self.width[lvl] + 1).max(0) {
                    self.out.ch(b' ');
                }
                let s = if lvl + 1 == level {
                    if last {
                        self.sym.last_2
                    } else {
                        self.sym.branch_2
                    }
                } else if self.more[lvl + 1] {
                    self.sym.vert_2
                } else {
                    self.sym.empty_2
                };
                self.out.s(s);
            }
        }
        let add = if rep < 2 {
            0
        } else {
            let d = self.out.int(rep as i32);
            self.out.s(b"*[");
            d + 2
        };
        self.color(n.age);
        if n.highlight && !self.bold.is_empty() {
            let b = std::mem::take(&mut self.bold);
            self.out.raw(&b);
            self.bold = b;
        }
        let swapped = o.args && n.argc < 0;
        if swapped {
            self.out.ch(b'(');
        }
        let comm_len = self.out.escaped(&n.comm);
        let offset = self.out.cur_x;
        let mut info = o.args;
        let mut sep = |out: &mut Out<W>| {
            out.ch(if info { b',' } else { b'(' });
            info = true;
        };
        if o.pids {
            sep(&mut self.out);
            self.out.int(n.pid);
        }
        if o.pgids {
            sep(&mut self.out);
            self.out.int(n.pgid);
        }
        // An owner that was not read is not shown (never as root's).
        if let Some(uid) = n.uid.filter(|_| o.user_change && prev_uid != n.uid) {
            sep(&mut self.out);
            match self.user_name(uid) {
                Some(name) => self.out.s(&name),
                None => {
                    self.out.int(uid as i32);
                }
            }
        }
        // Namespaces that differ from the parent's, where both could be read.
        if o.ns_change && n.parent != NONE {
            let p = &tree.nodes[n.parent as usize];
            for (i, name) in NAMESPACES.iter().enumerate() {
                if n.ns[i] != 0 && p.ns[i] != 0 && n.ns[i] != p.ns[i] {
                    sep(&mut self.out);
                    self.out.s(name.as_bytes());
                }
            }
        }
        if o.scontext {
            sep(&mut self.out);
            self.out.ch(b'`');
            self.out.s(&n.label);
            self.out.ch(b'\'');
        }
        if swapped || (!o.args && info) {
            self.out.ch(b')');
        }
        if n.highlight && !self.sgr0.is_empty() {
            let s = std::mem::take(&mut self.sgr0);
            self.out.raw(&s);
            self.sgr0 = s;
        }
        if o.args {
            let argc = n.argv.len();
            for (i, a) in n.argv.iter().enumerate() {
                let is_last = i + 1 == argc;
                // psmisc puts the space before every argument but the last one.
                if !is_last {
                    self.out.ch(b' ');
                }
                let len: i64 = a
                    .iter()
                    .map(|&c| if (b' '..=b'~').contains(&c) { 1 } else { 4 })
                    .sum();
                let room = self.out.width - if is_last { 0 } else { 4 };
                if self.out.cur_x + len <= room || !o.trunc {
                    self.out.escaped(a);
                } else {
                    self.out.s(b"...");
                    break;
                }
            }
        }
        if o.color_age {
            self.out.raw(b"\x1b[0m");
        }
        let has_children = !n.children.is_empty();
        if self.lines() || !has_children {
            for _ in 0..closing {
                self.out.ch(b']');
            }
            self.out.newline();
        }
        if self.lines() {
            // psmisc's `swapped + (comm_len > 1 ? 0 : -1)`, swapped being -a.
            let w = i64::from(o.args) + if comm_len > 1 { 0 } else { -1 };
            self.set_level(level, w, !last);
        } else {
            let w = comm_len + self.out.cur_x - offset + add;
            self.set_level(level, w, !last);
            if !has_children {
                return None;
            }
            if self.out.cur_x >= self.out.width && o.trunc {
                self.out.s(self.sym.first_3);
                self.out.s(b"+");
                self.out.newline();
                return None;
            }
        }
        if !has_children {
            return None;
        }
        Some(Pending {
            leaders: self.leaders(idx),
            pos: 0,
            level: level + 1,
            parent_uid: n.uid,
            closing,
        })
    }

    /// Prints the tree under `root` (psmisc's `dump_tree(root, 0, 1, 1, 1, prev_uid, 0)`).
    pub fn dump(&mut self, root: u32, prev_uid: Option<u32>) {
        let mut stack: Vec<Pending> = Vec::new();
        if let Some(p) = self.node(root, 0, 1, true, true, prev_uid, 0) {
            stack.push(p);
        }
        while let Some(top) = stack.last_mut() {
            if top.pos >= top.leaders.len() {
                stack.pop();
                continue;
            }
            let i = top.pos;
            top.pos += 1;
            let (child, count) = top.leaders[i];
            let last = i + 1 == top.leaders.len();
            let single = top.leaders.len() == 1;
            let (level, uid, closing) = (top.level, top.parent_uid, top.closing);
            let merged = u32::from(count > 0);
            let next = if self.lines() {
                let thread = self.o.compact && self.tree.nodes[child as usize].thread;
                let closing = if thread { closing + merged } else { 0 };
                self.node(child, level, count + 1, false, last, uid, closing)
            } else {
                if i == 0 {
                    let s = if single {
                        self.sym.single_3
                    } else {
                        self.sym.first_3
                    };
                    self.out.s(s);
                }
                self.node(child, level, count + 1, i == 0, last, uid, closing + merged)
            };
            if let Some(p) = next {
                stack.push(p);
            }
        }
    }

    /// psmisc's `dump_by_namespace`: each namespace's inode in brackets, then its trees. The
    /// header goes through the column count like any output, newline included (psmisc writes
    /// it with `out_string`), so the first line of the tree after it starts that far right
    /// as far as truncation is concerned.
    pub fn dump_by_namespace(&mut self, groups: &[(u32, Vec<u32>)]) {
        for (ino, roots) in groups {
            self.out.s(format!("[{ino}]\n").as_bytes());
            for &r in roots {
                self.dump(r, Some(0));
            }
        }
    }

    /// psmisc's `dump_by_user`: every topmost process of `uid` under `root`, trees
    /// separated by empty lines. Returns whether any was printed.
    pub fn dump_by_user(&mut self, root: u32, uid: u32) -> bool {
        let tree = self.tree;
        let mut dumped = false;
        let mut stack = vec![root];
        while let Some(k) = stack.pop() {
            if k == NONE {
                continue;
            }
            let n = &tree.nodes[k as usize];
            if n.uid == Some(uid) {
                if dumped {
                    self.out.raw(b"\n");
                }
                self.dump(k, Some(uid));
                dumped = true;
                continue;
            }
            stack.extend(n.children.iter().rev());
        }
        dumped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out() -> Out<Vec<u8>> {
        Out::new(Vec::new(), 10, true)
    }

    #[test]
    fn truncation_marks_the_first_dropped_column() {
        let mut o = out();
        o.s(b"0123456789abc");
        o.newline();
        assert_eq!(o.finish().expect("vec"), b"012345678+\n");
    }

    #[test]
    fn multibyte_symbols_count_once_and_each_byte_past_the_edge_is_a_plus() {
        let mut o = out();
        o.s(b"123456789");
        o.s("\u{2500}\u{2500}".as_bytes());
        o.newline();
        assert_eq!(o.finish().expect("vec"), b"123456789+++\n");
    }

    #[test]
    fn numbers_and_escapes() {
        let mut o = Out::new(Vec::new(), 100, true);
        assert_eq!(o.int(0), 1);
        assert_eq!(o.int(407), 3);
        assert_eq!(o.escaped(b"a b\\\n\xc3"), 2 + 1 + 2 + 4 + 4);
        o.ch(b'|');
        o.int(-2);
        o.newline();
        assert_eq!(o.finish().expect("vec"), b"407a b\\\\\\012\\303|.\n");
    }
}
