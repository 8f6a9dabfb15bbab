//! Rendering decoded tasks as text (one block per task) or JSON Lines (one object per task).
//!
//! Names and command lines are bytes: text output escapes non-printable bytes (`\n`, `\xNN`);
//! JSON output decodes them as UTF-8 and replaces invalid sequences with U+FFFD (use
//! `--format raw` for exact bytes).

use std::io::{self, Write};

use taskdiag_proto::task::{Event, Task};
use taskdiag_proto::{state_char, BackendId, Group, StatRec, StatmRec};

/// Renders a stream's events.
pub struct Renderer {
    json: bool,
    done_error: i32,
}

impl Renderer {
    pub fn new(json: bool) -> Self {
        Renderer {
            json,
            done_error: 0,
        }
    }

    /// The DONE message's error (0 if none or not seen).
    pub fn done_error(&self) -> i32 {
        self.done_error
    }

    pub fn event(&mut self, w: &mut dyn Write, ev: &Event) -> io::Result<()> {
        match ev {
            Event::Start(s) if !self.json => {
                let b = BackendId::from_u16(s.backend).map_or("?", |b| b.name());
                writeln!(
                    w,
                    "# taskdiag stream v{} backend {b} show_flags {:#x}",
                    s.version, s.show_flags
                )
            }
            Event::Start(_) => Ok(()),
            Event::Task(t) if self.json => json_task(w, t),
            Event::Task(t) => text_task(w, t),
            Event::Done(d) => {
                self.done_error = d.error;
                if !self.json {
                    writeln!(w, "# done: {} tasks, error {}", d.tasks, d.error)?;
                }
                Ok(())
            }
        }
    }
}

fn escape_text(w: &mut dyn Write, b: &[u8]) -> io::Result<()> {
    for &c in b {
        match c {
            b'\n' => w.write_all(b"\\n")?,
            b'\t' => w.write_all(b"\\t")?,
            b'\\' => w.write_all(b"\\\\")?,
            b' ' => w.write_all(b"\\x20")?,
            0x21..=0x7e => w.write_all(&[c])?,
            _ => write!(w, "\\x{c:02x}")?,
        }
    }
    Ok(())
}

fn text_task(w: &mut dyn Write, t: &Task) -> io::Result<()> {
    write!(w, "pid {} tgid {}", t.pid, t.tgid)?;
    if let Some(b) = &t.base {
        let r = &b.rec;
        write!(
            w,
            " ppid {} tpid {} sid {} pgid {} tty {} tpgid {} state {} flags {:#x}{}{} start {}.{:09} comm ",
            r.ppid,
            r.tpid,
            r.sid,
            r.pgid,
            r.tty_nr,
            r.tpgid,
            state_char(r.state),
            r.task_flags,
            if r.flags & taskdiag_proto::BASE_F_KTHREAD != 0 {
                " kthread"
            } else {
                ""
            },
            if r.flags & taskdiag_proto::BASE_F_LEADER != 0 {
                " leader"
            } else {
                ""
            },
            r.start_time_ns / 1_000_000_000,
            r.start_time_ns % 1_000_000_000,
        )?;
        escape_text(w, &b.comm)?;
    }
    writeln!(w)?;
    if let Some(c) = &t.cred {
        let r = &c.rec;
        write!(
            w,
            "  cred: uid {} {} {} {} gid {} {} {} {} groups ",
            r.uid, r.euid, r.suid, r.fsuid, r.gid, r.egid, r.sgid, r.fsgid
        )?;
        if c.groups.is_empty() {
            write!(w, "-")?;
        }
        for (i, g) in c.groups.iter().enumerate() {
            write!(w, "{}{g}", if i > 0 { "," } else { "" })?;
        }
        writeln!(
            w,
            " cap inh {:016x} prm {:016x} eff {:016x} bnd {:016x} amb {:016x}",
            r.cap_inheritable, r.cap_permitted, r.cap_effective, r.cap_bset, r.cap_ambient
        )?;
    }
    if let Some(s) = &t.stat {
        write!(w, "  stat:")?;
        for (k, v) in stat_fields(s) {
            write!(w, " {k} {v}")?;
        }
        writeln!(w)?;
    }
    if let Some(s) = &t.statm {
        write!(w, "  statm:")?;
        for (k, v) in statm_fields(s) {
            write!(w, " {k} {v}")?;
        }
        writeln!(w)?;
    }
    if let Some(v) = &t.vmas {
        // /proc/PID/maps lines (the name as the kernel prints it), then smaps counters.
        let mut b = Vec::new();
        taskdiag_procfs::maps::format_maps(v, &mut b);
        for (line, m) in b.split(|&c| c == b'\n').zip(v) {
            w.write_all(b"  vma: ")?;
            w.write_all(line)?;
            if let Some(st) = &m.stat {
                for (k, x) in vma_stat_fields(st) {
                    write!(w, " {k} {x}")?;
                }
            }
            writeln!(w)?;
        }
    }
    if let Some(c) = &t.cmdline {
        write!(w, "  cmdline:")?;
        for arg in split_cmdline(c) {
            w.write_all(b" ")?;
            escape_text(w, arg)?;
        }
        writeln!(w)?;
    }
    for e in &t.errors {
        let g = Group::from_u16(e.group).map_or("?", |g| g.name());
        writeln!(
            w,
            "  {g}: unavailable: {}",
            io::Error::from_raw_os_error(e.errno)
        )?;
    }
    Ok(())
}

/// Splits NUL-separated argv; a final NUL ends the last argument rather than starting one.
fn split_cmdline(c: &[u8]) -> impl Iterator<Item = &[u8]> {
    let c = c.strip_suffix(b"\0").unwrap_or(c);
    let empty = c.is_empty();
    c.split(|&b| b == 0).filter(move |_| !empty)
}

fn stat_fields(s: &StatRec) -> [(&'static str, i128); 16] {
    [
        ("minflt", s.minflt as i128),
        ("cminflt", s.cminflt as i128),
        ("majflt", s.majflt as i128),
        ("cmajflt", s.cmajflt as i128),
        ("utime_ns", s.utime_ns as i128),
        ("stime_ns", s.stime_ns as i128),
        ("cutime_ns", s.cutime_ns as i128),
        ("cstime_ns", s.cstime_ns as i128),
        ("nvcsw", s.nvcsw as i128),
        ("nivcsw", s.nivcsw as i128),
        ("threads", s.threads as i128),
        ("priority", s.priority as i128),
        ("nice", s.nice as i128),
        ("policy", s.policy as i128),
        ("rt_priority", s.rt_priority as i128),
        ("processor", s.processor as i128),
    ]
}

/// VMA_STAT counters by their smaps names (bytes).
pub(crate) fn vma_stat_fields(s: &taskdiag_proto::VmaStatRec) -> [(&'static str, u64); 13] {
    [
        ("rss", s.rss),
        ("pss", s.pss),
        ("pss_dirty", s.pss_dirty),
        ("shared_clean", s.shared_clean),
        ("shared_dirty", s.shared_dirty),
        ("private_clean", s.private_clean),
        ("private_dirty", s.private_dirty),
        ("referenced", s.referenced),
        ("anonymous", s.anonymous),
        ("anon_huge", s.anon_huge),
        ("swap", s.swap),
        ("swap_pss", s.swap_pss),
        ("locked", s.locked),
    ]
}

fn statm_fields(s: &StatmRec) -> [(&'static str, u64); 14] {
    [
        ("vm_size", s.vm_size),
        ("vm_peak", s.vm_peak),
        ("rss_anon", s.rss_anon),
        ("rss_file", s.rss_file),
        ("rss_shmem", s.rss_shmem),
        ("rss_peak", s.rss_peak),
        ("swap", s.swap),
        ("text", s.text),
        ("lib", s.lib),
        ("data", s.data),
        ("stack", s.stack),
        ("locked", s.locked),
        ("pinned", s.pinned),
        ("page_tables", s.page_tables),
    ]
}

fn json_str(w: &mut dyn Write, b: &[u8]) -> io::Result<()> {
    w.write_all(b"\"")?;
    for ch in String::from_utf8_lossy(b).chars() {
        match ch {
            '"' => w.write_all(b"\\\"")?,
            '\\' => w.write_all(b"\\\\")?,
            '\n' => w.write_all(b"\\n")?,
            '\r' => w.write_all(b"\\r")?,
            '\t' => w.write_all(b"\\t")?,
            c if (c as u32) < 0x20 || c == '\u{7f}' => write!(w, "\\u{:04x}", c as u32)?,
            c => write!(w, "{c}")?,
        }
    }
    w.write_all(b"\"")
}

/// One mapping as a JSON object: start, end, perms, flags, flags_known, pgoff, dev, inode,
/// name, and the smaps counters when present.
pub(crate) fn json_vma(w: &mut dyn Write, m: &taskdiag_proto::task::Vma) -> io::Result<()> {
    let r = &m.rec;
    let perms = taskdiag_proto::vma_flags::perms(r.vm_flags);
    write!(
        w,
        "{{\"start\":{},\"end\":{},\"perms\":\"{}\",\"flags\":{},\"flags_known\":{},\
         \"pgoff\":{},\"dev\":\"{:02x}:{:02x}\",\"inode\":{},\"name\":",
        r.start,
        r.end,
        String::from_utf8_lossy(&perms),
        r.vm_flags,
        r.vm_flags_known,
        r.pgoff,
        r.dev_major,
        r.dev_minor,
        r.inode
    )?;
    json_str(w, &m.name)?;
    if let Some(st) = &m.stat {
        for (k, x) in vma_stat_fields(st) {
            write!(w, ",\"{k}\":{x}")?;
        }
    }
    w.write_all(b"}")
}

fn json_task(w: &mut dyn Write, t: &Task) -> io::Result<()> {
    write!(w, "{{\"pid\":{},\"tgid\":{}", t.pid, t.tgid)?;
    if let Some(b) = &t.base {
        let r = &b.rec;
        write!(
            w,
            ",\"base\":{{\"ppid\":{},\"tpid\":{},\"sid\":{},\"pgid\":{},\"tty_nr\":{},\"tpgid\":{},\"state\":\"{}\",\
             \"task_flags\":{},\"kthread\":{},\"leader\":{},\"start_time_ns\":{},\"comm\":",
            r.ppid,
            r.tpid,
            r.sid,
            r.pgid,
            r.tty_nr,
            r.tpgid,
            state_char(r.state),
            r.task_flags,
            r.flags & taskdiag_proto::BASE_F_KTHREAD != 0,
            r.flags & taskdiag_proto::BASE_F_LEADER != 0,
            r.start_time_ns
        )?;
        json_str(w, &b.comm)?;
        w.write_all(b"}")?;
    }
    if let Some(c) = &t.cred {
        let r = &c.rec;
        write!(
            w,
            ",\"cred\":{{\"uid\":{},\"euid\":{},\"suid\":{},\"fsuid\":{},\"gid\":{},\"egid\":{},\
             \"sgid\":{},\"fsgid\":{},\"groups\":[",
            r.uid, r.euid, r.suid, r.fsuid, r.gid, r.egid, r.sgid, r.fsgid
        )?;
        for (i, g) in c.groups.iter().enumerate() {
            write!(w, "{}{g}", if i > 0 { "," } else { "" })?;
        }
        write!(
            w,
            "],\"cap_inheritable\":\"{:016x}\",\"cap_permitted\":\"{:016x}\",\
             \"cap_effective\":\"{:016x}\",\"cap_bset\":\"{:016x}\",\"cap_ambient\":\"{:016x}\"}}",
            r.cap_inheritable, r.cap_permitted, r.cap_effective, r.cap_bset, r.cap_ambient
        )?;
    }
    if let Some(s) = &t.stat {
        w.write_all(b",\"stat\":{")?;
        for (i, (k, v)) in stat_fields(s).iter().enumerate() {
            write!(w, "{}\"{k}\":{v}", if i > 0 { "," } else { "" })?;
        }
        w.write_all(b"}")?;
    }
    if let Some(s) = &t.statm {
        w.write_all(b",\"statm\":{")?;
        for (i, (k, v)) in statm_fields(s).iter().enumerate() {
            write!(w, "{}\"{k}\":{v}", if i > 0 { "," } else { "" })?;
        }
        w.write_all(b"}")?;
    }
    if let Some(v) = &t.vmas {
        w.write_all(b",\"vma\":[")?;
        for (i, m) in v.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            json_vma(w, m)?;
        }
        w.write_all(b"]")?;
    }
    if let Some(c) = &t.cmdline {
        w.write_all(b",\"cmdline\":[")?;
        for (i, arg) in split_cmdline(c).enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            json_str(w, arg)?;
        }
        w.write_all(b"]")?;
    }
    if !t.errors.is_empty() {
        w.write_all(b",\"errors\":{")?;
        for (i, e) in t.errors.iter().enumerate() {
            let g = Group::from_u16(e.group).map_or("?", |g| g.name());
            write!(w, "{}\"{g}\":", if i > 0 { "," } else { "" })?;
            json_str(
                w,
                io::Error::from_raw_os_error(e.errno).to_string().as_bytes(),
            )?;
        }
        w.write_all(b"}")?;
    }
    w.write_all(b"}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_splitting() {
        let v: Vec<_> = split_cmdline(b"a\0b c\0").collect();
        assert_eq!(v, vec![&b"a"[..], b"b c"]);
        assert_eq!(split_cmdline(b"").count(), 0);
        // setproctitle(): no trailing NUL.
        let v: Vec<_> = split_cmdline(b"nginx: worker").collect();
        assert_eq!(v, vec![&b"nginx: worker"[..]]);
    }

    #[test]
    fn json_escapes_hostile_names() {
        let mut out = Vec::new();
        json_str(&mut out, b"(a) \"b\")\n\x01\xff").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"(a) \\\"b\\\")\\n\\u0001\u{fffd}\""
        );
    }
}
