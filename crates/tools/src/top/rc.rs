//! procps top's configuration file, read as procps-ng 4.0.2 reads it (`configs_reads`,
//! `configs_file`): `~/.toprc`, else `$XDG_CONFIG_HOME/procps/toprc` (or
//! `~/.config/procps/toprc`), else `/etc/topdefaultrc`. Of what it holds, taskdiag top uses
//! the delay, Irix mode, the current window's fields, sort field and the c, S, i, y and R
//! toggles, and the memory scales; nothing is ever written (no `W`).
//!
//! Only files in the current format (`Id:k`, procps-ng 4.0) are used; a file top cannot
//! parse, or an older one, is ignored and the defaults apply.

use std::path::PathBuf;

use super::fields::Fields;

/// `Show_HIROWS`: running tasks highlighted (`y`).
pub const SHOW_HIROWS: i32 = 0x000100;
/// `Show_CMDLIN`: command lines (`c`).
pub const SHOW_CMDLIN: i32 = 0x000080;
/// `Show_CTIMES`: cumulative times (`S`).
pub const SHOW_CTIMES: i32 = 0x000040;
/// `Show_IDLEPS`: idle tasks shown (`i`).
pub const SHOW_IDLEPS: i32 = 0x000020;
/// `Qsrt_NORMAL`: highest first (`R` off).
pub const QSRT_NORMAL: i32 = 0x000004;

/// What taskdiag top takes from an rc file.
#[derive(Debug, Clone, PartialEq)]
pub struct Rc {
    /// `Delay_time`, seconds.
    pub delay: f32,
    /// `Mode_irixps`.
    pub irix: bool,
    /// The current window's fields.
    pub fields: Fields,
    /// Its `winflags`.
    pub winflags: i32,
    /// Its `sortindx` (an index into `Col::ALL`).
    pub sortindx: usize,
    /// Its `maxtasks`.
    pub maxtasks: usize,
    /// `Summ_mscale`.
    pub summ_scale: usize,
    /// `Task_mscale`.
    pub task_scale: usize,
}

/// The rc file procps top would read, if there is one.
fn path() -> Option<PathBuf> {
    let home = std::env::var("HOME")
        .ok()
        .filter(|h| h.starts_with('/'))
        .or_else(|| {
            // SAFETY: getuid has no preconditions; getpwuid returns NULL or a pointer to a
            // static entry, read at once.
            let pw = unsafe { libc::getpwuid(libc::getuid()) };
            if pw.is_null() {
                return None;
            }
            // SAFETY: `pw` is a valid passwd entry; pw_dir is NULL or a C string.
            let dir = unsafe { (*pw).pw_dir };
            if dir.is_null() {
                return None;
            }
            // SAFETY: `dir` is a NUL-terminated string owned by the C library.
            let s = unsafe { std::ffi::CStr::from_ptr(dir) };
            s.to_str()
                .ok()
                .filter(|h| h.starts_with('/'))
                .map(str::to_string)
        });
    if let Some(h) = &home {
        let legacy = PathBuf::from(format!("{h}/.toprc"));
        if legacy.is_file() {
            return Some(legacy);
        }
    }
    let xdg = std::env::var("XDG_CONFIG_HOME")
        .ok()
        .filter(|p| p.starts_with('/'))
        .or_else(|| home.as_ref().map(|h| format!("{h}/.config")));
    if let Some(x) = xdg {
        let p = PathBuf::from(format!("{x}/procps/toprc"));
        if p.is_file() {
            return Some(p);
        }
    }
    let sys = PathBuf::from("/etc/topdefaultrc");
    sys.is_file().then_some(sys)
}

/// Reads the rc file procps top would read; `None` when there is none or it is not one
/// taskdiag top can use.
pub fn read() -> Option<Rc> {
    let text = std::fs::read(path()?).ok()?;
    parse(&String::from_utf8_lossy(&text))
}

/// `key=N` inside `s`: the integer after `key=`.
fn int_after(s: &str, key: &str) -> Option<i32> {
    let at = s.find(key)? + key.len();
    let rest = &s[at..];
    let end = rest
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(rest.len(), |(i, _)| i);
    rest[..end].parse().ok()
}

/// Parses an rc file's text (the format procps-ng 4.0's `W` writes).
pub fn parse(text: &str) -> Option<Rc> {
    let mut lines = text.lines();
    lines.next()?; // the eyecatcher
    let head = lines.next()?;
    let id = head.strip_prefix("Id:")?.chars().next()?;
    if id != 'k' {
        return None;
    }
    let irix = int_after(head, "Mode_irixps=")?;
    let (whole, fract) = head
        .split_once("Delay_time=")?
        .1
        .split_once(',')?
        .0
        .split_once('.')?;
    let delay = whole.parse::<i32>().ok()? as f32 + fract.parse::<i32>().ok()? as f32 / 1000.0;
    let curwin = int_after(head, "Curwin=")?;
    if !(0..4).contains(&curwin) || !(0..=1).contains(&irix) || delay < 0.0 {
        return None;
    }
    // The windows: "NAME\tfieldscur=" and numbers up to the "\twinflags=" line, then the
    // colours line.
    let rest: Vec<&str> = lines.collect();
    let mut i = 0;
    let mut win = None;
    for n in 0..4 {
        let first = rest.get(i)?;
        let (_, nums) = first.split_once("fieldscur=")?;
        let mut vals: Vec<i32> = Vec::new();
        let mut push = |s: &str| -> Option<()> {
            for w in s.split_whitespace() {
                vals.push(w.parse().ok()?);
            }
            Some(())
        };
        push(nums)?;
        i += 1;
        while !rest.get(i)?.trim_start().starts_with("winflags=") {
            push(rest[i])?;
            i += 1;
        }
        let flags = rest[i];
        i += 2;
        if n == curwin {
            win = Some((vals, flags));
        }
    }
    let (vals, flags) = win?;
    let fields = Fields::from_fieldscur(&vals)?;
    let winflags = int_after(flags, "winflags=")?;
    let sortindx = usize::try_from(int_after(flags, "sortindx=")?).ok()?;
    let maxtasks = usize::try_from(int_after(flags, "maxtasks=")?).ok()?;
    if sortindx >= super::fields::Col::ALL.len() {
        return None;
    }
    let tail = rest.get(i).copied().unwrap_or("");
    let summ_scale = int_after(tail, "Summ_mscale=")
        .and_then(|v| usize::try_from(v).ok())
        .filter(|&v| v <= 5)
        .unwrap_or(0);
    let task_scale = int_after(tail, "Task_mscale=")
        .and_then(|v| usize::try_from(v).ok())
        .filter(|&v| v <= 4)
        .unwrap_or(0);
    Some(Rc {
        delay,
        irix: irix == 1,
        fields,
        winflags,
        sortindx,
        maxtasks,
        summ_scale,
        task_scale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::fields::Col;

    /// What procps-ng 4.0.2 top writes with `W` and no changes.
    pub const DEFAULT_RC: &str = "top's Config File (Linux processes with windows)
Id:k, Mode_altscr=0, Mode_irixps=1, Delay_time=3.0, Curwin=0
Def\tfieldscur=  75   81  103  105  119  123  129  137  111  117  115  139   76   78   82   84   86   88   90   92 
\t\t    94   96   98  100  106  108  112  120  124  126  130  132  134  140  142  144  146  148  150  152 
\t\t   154  156  158  160  162  164  166  168  170  172  174  176  178  180  182  184  186  188  190  192 
\t\t   194  196  198  200  202  204  206  208  210  212  214  216  218  220  222  224  226  228  230  232 
\t\t   234  236  238  240  242  244  246  248  250  252  254  256  258  260  262  264  266  268  270  272 
\twinflags=193844, sortindx=18, maxtasks=0, graph_cpus=0, graph_mems=0, double_up=0, combine_cpus=0, core_types=0
\tsummclr=1, msgsclr=1, headclr=3, taskclr=1
Job\tfieldscur=  75   77  115  111  117   80  103  105  137  119  123  128  120   79  139   82   84   86   88   90 
\t\t    92   94   96   98  100  106  108  112  124  126  130  132  134  140  142  144  146  148  150  152 
\t\t   154  156  158  160  162  164  166  168  170  172  174  176  178  180  182  184  186  188  190  192 
\t\t   194  196  198  200  202  204  206  208  210  212  214  216  218  220  222  224  226  228  230  232 
\t\t   234  236  238  240  242  244  246  248  250  252  254  256  258  260  262  264  266  268  270  272 
\twinflags=193844, sortindx=0, maxtasks=0, graph_cpus=0, graph_mems=0, double_up=0, combine_cpus=0, core_types=0
\tsummclr=6, msgsclr=6, headclr=7, taskclr=6
Mem\tfieldscur=  75  117  119  120  123  125  127  129  131  154  132  156  135  136  102  104  111  139   76   78 
\t\t    80   82   84   86   88   90   92   94   96   98  100  106  108  112  114  140  142  144  146  148 
\t\t   150  152  158  160  162  164  166  168  170  172  174  176  178  180  182  184  186  188  190  192 
\t\t   194  196  198  200  202  204  206  208  210  212  214  216  218  220  222  224  226  228  230  232 
\t\t   234  236  238  240  242  244  246  248  250  252  254  256  258  260  262  264  266  268  270  272 
\twinflags=193844, sortindx=21, maxtasks=0, graph_cpus=0, graph_mems=0, double_up=0, combine_cpus=0, core_types=0
\tsummclr=5, msgsclr=5, headclr=4, taskclr=5
Usr\tfieldscur=  75   77   79   81   85   97  115  111  117  137  139   82   86   88   90   92   94   98  100  102 
\t\t   104  106  108  112  118  120  122  124  126  128  130  132  134  140  142  144  146  148  150  152 
\t\t   154  156  158  160  162  164  166  168  170  172  174  176  178  180  182  184  186  188  190  192 
\t\t   194  196  198  200  202  204  206  208  210  212  214  216  218  220  222  224  226  228  230  232 
\t\t   234  236  238  240  242  244  246  248  250  252  254  256  258  260  262  264  266  268  270  272 
\twinflags=193844, sortindx=3, maxtasks=0, graph_cpus=0, graph_mems=0, double_up=0, combine_cpus=0, core_types=0
\tsummclr=3, msgsclr=3, headclr=2, taskclr=3
Fixed_widest=0, Summ_mscale=1, Task_mscale=0, Zero_suppress=0, Tics_scaled=0
";

    #[test]
    fn reads_what_procps_writes() {
        let rc = parse(DEFAULT_RC).expect("rc");
        assert_eq!(rc.fields, Fields::default());
        assert_eq!(Col::ALL[rc.sortindx], Col::Cpu);
        assert_eq!(rc.delay, 3.0);
        assert!(rc.irix);
        assert_eq!((rc.summ_scale, rc.task_scale, rc.maxtasks), (1, 0, 0));
        assert_ne!(rc.winflags & QSRT_NORMAL, 0);
        assert_ne!(rc.winflags & SHOW_IDLEPS, 0);
        assert_eq!(rc.winflags & SHOW_CMDLIN, 0);
        // The current window is the one used.
        let job = parse(&DEFAULT_RC.replace("Curwin=0", "Curwin=1")).expect("rc");
        assert_eq!(job.sortindx, 0);
        assert_eq!(job.fields.shown()[1], Col::Ppid);
        // Older formats and damaged files are not used.
        assert_eq!(parse(&DEFAULT_RC.replace("Id:k", "Id:j")), None);
        assert_eq!(parse(&DEFAULT_RC.replace("  81 ", "  75 ")), None);
        assert_eq!(parse("top's Config File\n"), None);
        assert_eq!(parse(""), None);
    }
}
