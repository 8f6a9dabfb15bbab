//! `taskdiag maps PID`: one process's memory mappings, as /proc/PID/maps prints them (the
//! default, byte for byte), extended with smaps counters like `pmap -x` (`-x`), or as JSON.
//!
//! The request is a ONE dump of the VMA group (VMA_STAT with `-x`); the text formats are
//! `taskdiag_procfs::maps`'s and this module's, the records the backend's.

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::Context;
use taskdiag::{BackendKind, Dumper, Error, Group, Request, Strategy};
use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::{Event, StreamDecoder, Task};

use crate::{backend_parser, EXIT_NO_TASK};

const AFTER_MAPS: &str = "\
EXIT STATUS:
  0 success, 1 no such process, 2 usage error, 3 other failure (e.g. permission denied:
  reading another user's maps needs the same ptrace-read permission as /proc/PID/maps)

EXAMPLES:
  taskdiag maps $$                        # the same bytes as cat /proc/$$/maps
  taskdiag maps -x 1234                   # sizes, RSS and dirty KiB per mapping, totals
  taskdiag maps -f json 1234 | jq .name";

/// Arguments of `taskdiag maps`.
#[derive(clap::Args)]
#[command(after_help = AFTER_MAPS)]
pub struct MapsArgs {
    /// The process (or thread: its process's mappings).
    pid: u32,
    /// Extended: Kbytes, RSS, Dirty, Mode and Mapping per mapping and totals, like `pmap -x`
    /// (reads the smaps counters, which costs what /proc/PID/smaps costs).
    #[arg(short = 'x', long)]
    extended: bool,
    /// Output format: maps (/proc/PID/maps, byte for byte) or json (one object per mapping).
    #[arg(long, short = 'f', value_enum, default_value_t = MapsFormat::Maps)]
    format: MapsFormat,
    /// Which backend answers.
    #[arg(long, short = 'b', default_value_t = BackendKind::Auto, value_parser = backend_parser())]
    backend: BackendKind,
    /// taskdiagd's socket, for the daemon backend.
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MapsFormat {
    Maps,
    Json,
}

/// Runs `taskdiag maps`.
pub fn maps(a: MapsArgs) -> anyhow::Result<ExitCode> {
    let mut show = Group::Base.flag() | Group::Vma.flag();
    if a.extended {
        show |= Group::VmaStat.flag() | Group::Cmdline.flag();
    }
    let mut d =
        Dumper::open_with(a.backend, show, a.socket.as_deref()).context("opening the backend")?;
    let mut buf = Vec::new();
    let r = d.dump(&Request::new(Strategy::One, a.pid, show), &mut |b| {
        buf.extend_from_slice(b);
        Ok(())
    });
    match r {
        Ok(_) => {}
        Err(Error::NoSuchTask { pid }) => {
            eprintln!("taskdiag: no such process: {pid}");
            return Ok(ExitCode::from(EXIT_NO_TASK));
        }
        Err(e) => return Err(e).context("dump failed"),
    }
    let mut dec = StreamDecoder::new();
    let mut task = None;
    for m in Messages::new(&buf) {
        if let Some(Event::Task(t)) = dec.push(&m?)? {
            task = Some(t);
        }
    }
    let t = task.context("the backend answered without the task")?;
    for e in &t.errors {
        let file = match Group::from_u16(e.group) {
            Some(Group::Vma) => "maps",
            Some(Group::VmaStat) => "smaps",
            _ => continue,
        };
        anyhow::bail!(
            "/proc/{}/{file}: {}",
            a.pid,
            io::Error::from_raw_os_error(e.errno)
        );
    }
    let vmas = t.vmas.clone().unwrap_or_default();
    let mut out = Vec::with_capacity(vmas.len() * 100);
    match (a.format, a.extended) {
        (MapsFormat::Json, _) => json(&t, &mut out)?,
        (MapsFormat::Maps, false) => taskdiag_procfs::maps::format_maps(&vmas, &mut out),
        (MapsFormat::Maps, true) => pmap_x(&t, &mut out)?,
    }
    io::stdout()
        .lock()
        .write_all(&out)
        .context("writing standard output")?;
    Ok(ExitCode::SUCCESS)
}

fn json(t: &Task, out: &mut Vec<u8>) -> io::Result<()> {
    // One JSON object per mapping, as in `dump --format json`'s "vma" array.
    for v in t.vmas.iter().flatten() {
        crate::render::json_line(out, &crate::render::JsonVma(v))?;
    }
    Ok(())
}

/// `pmap -x`-like: address, size, RSS and dirty KiB, mode, mapping name; then totals.
fn pmap_x(t: &Task, out: &mut Vec<u8>) -> io::Result<()> {
    let cmd = t.cmdline.as_deref().unwrap_or_default();
    let cmd: Vec<u8> = cmd
        .strip_suffix(b"\0")
        .unwrap_or(cmd)
        .iter()
        .map(|&c| if c == 0 { b' ' } else { c })
        .collect();
    writeln!(out, "{}:   {}", t.tgid, String::from_utf8_lossy(&cmd))?;
    writeln!(
        out,
        "Address           Kbytes     RSS   Dirty Mode  Mapping"
    )?;
    let (mut size, mut rss, mut dirty) = (0u64, 0u64, 0u64);
    for v in t.vmas.iter().flatten() {
        let r = &v.rec;
        let kb = (r.end - r.start) / 1024;
        size += kb;
        // A mapping without counters (never the case when VMA_STAT was read) shows `-`.
        let (rss_kb, dirty_kb) = match &v.stat {
            Some(st) => {
                let d = (st.shared_dirty + st.private_dirty) / 1024;
                rss += st.rss / 1024;
                dirty += d;
                ((st.rss / 1024).to_string(), d.to_string())
            }
            None => ("-".to_string(), "-".to_string()),
        };
        let p = taskdiag_proto::vma_flags::perms(r.vm_flags);
        let mode = [
            p[0],
            p[1],
            p[2],
            if p[3] == b's' { b's' } else { b'-' },
            b'-',
        ];
        let name = if v.name.is_empty() {
            "[ anon ]".to_string()
        } else {
            let n = String::from_utf8_lossy(&v.name).into_owned();
            match n.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
                Some(inner) => format!("[ {inner} ]"),
                None => n.rsplit('/').next().unwrap_or(&n).to_string(),
            }
        };
        writeln!(
            out,
            "{:016x} {:7} {:7} {:7} {}  {}",
            r.start,
            kb,
            rss_kb,
            dirty_kb,
            String::from_utf8_lossy(&mode),
            name
        )?;
    }
    writeln!(out, "---------------- ------- ------- ------- ")?;
    writeln!(out, "total kB         {size:7} {rss:7} {dirty:7}")?;
    Ok(())
}
