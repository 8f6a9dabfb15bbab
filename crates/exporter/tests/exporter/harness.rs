//! Starting exporters (ours, and Debian's process-exporter) and the fixture, scraping them
//! over loopback HTTP, and reading the exposition.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{wait_for, Spawned, PATIENCE};

/// A config that tracks the fixtures named `name` (each test its own name: tests run
/// side by side), grouped by that name.
pub fn fixture_config(dir: &TempDir, name: &str) -> PathBuf {
    let p = dir.join("exporter.yml");
    std::fs::write(
        &p,
        format!("process_names:\n  - name: \"{{{{.Comm}}}}\"\n    comm: [{name}]\n"),
    )
    .expect("writing the config");
    p
}

/// A running exporter and the lines it wrote on standard error.
pub struct Running {
    pub proc: Spawned,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Collects a child's stderr lines; the first that `find` accepts is sent on the channel.
fn watch_stderr(
    stderr: impl Read + Send + 'static,
    find: fn(&str) -> Option<String>,
) -> (Arc<Mutex<Vec<String>>>, Receiver<String>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = channel();
    let l = Arc::clone(&log);
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent {
                if let Some(v) = find(&line) {
                    let _ = tx.send(v);
                    sent = true;
                }
            }
            l.lock().expect("the log").push(line);
        }
    });
    (log, rx)
}

fn ours_listening(line: &str) -> Option<String> {
    let rest = line.strip_prefix("taskdiag-exporter: listening on ")?;
    Some(rest.split(' ').next()?.to_string())
}

/// Starts our exporter with `args` (plus a loopback port of its choosing) as `cmd` runs it,
/// and waits until it listens.
pub fn start_ours(mut cmd: Command, args: &[&str]) -> Running {
    cmd.args(args)
        .args(["-web.listen-address", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut proc = Spawned::spawn(&mut cmd);
    let stderr = proc.child().stderr.take().expect("piped stderr");
    let (log, rx) = watch_stderr(stderr, ours_listening);
    let addr = match rx.recv_timeout(PATIENCE) {
        Ok(a) => a.parse().expect("a socket address"),
        Err(_) => panic!(
            "the exporter did not listen: {:?}; stderr: {:?}",
            proc.child().try_wait(),
            log.lock().expect("the log")
        ),
    };
    Running { proc, addr, log }
}

/// Our exporter binary.
pub fn ours() -> Command {
    Command::new(env!("CARGO_BIN_EXE_taskdiag-exporter"))
}

/// The fixture, running through a symlink with the test's name.
pub struct Fixture {
    _proc: Spawned,
    pub pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _dir: TempDir,
}

impl Fixture {
    /// Starts it (`wrap`: a command prefix such as setpriv that execs its arguments; `None`
    /// runs it directly) and waits for "ready".
    pub fn start(name: &str, wrap: Option<Command>) -> Fixture {
        assert!(name.len() <= 15, "{name}: a task name has at most 15 bytes");
        let dir = TempDir::new("exporter-fixture");
        let link = dir.join(name);
        std::os::unix::fs::symlink("/usr/bin/python3", &link).expect("symlink");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exporter/fixture.py");
        let mut cmd = match wrap {
            Some(mut w) => {
                w.arg(&link);
                w
            }
            None => Command::new(&link),
        };
        cmd.arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut proc = Spawned::spawn(&mut cmd);
        let stdin = proc.child().stdin.take().expect("stdin");
        let stdout = BufReader::new(proc.child().stdout.take().expect("stdout"));
        let mut f = Fixture {
            pid: proc.pid(),
            _proc: proc,
            stdin,
            stdout,
            _dir: dir,
        };
        let line = f.line();
        assert_eq!(line, format!("ready {}", f.pid), "the fixture's first line");
        f
    }

    fn line(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_line(&mut s).expect("reading the fixture");
        assert!(!s.is_empty(), "the fixture ended");
        s.trim_end().to_string()
    }

    /// Sends a command and returns the fixture's answer.
    pub fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{c}").expect("writing to the fixture");
        self.line()
    }

    /// Its CPU time (user + system) in clock ticks, as /proc/PID/stat says.
    pub fn cpu_ticks(&self) -> u64 {
        cpu_ticks(self.pid)
    }

    /// Entries of /proc/PID/fd.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .expect("fd")
            .count()
    }

    /// VmRSS in bytes.
    pub fn rss(&self) -> u64 {
        status_kb(self.pid, "VmRSS") * 1024
    }
}

/// Process `pid`'s CPU time (user + system) in clock ticks, as /proc/PID/stat says.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    let n = |i: usize| f[i].parse::<u64>().expect("a tick count");
    n(11) + n(12)
}

/// Seconds since the epoch, now.
pub fn epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64()
}

/// A /proc/PID/status line's kB value.
pub fn status_kb(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// GET `path` from `addr` (HTTP/1.1, Connection: close).
pub fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(PATIENCE)).expect("SO_RCVTIMEO");
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .expect("sending the request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("reading the answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Answer {
        status,
        content_type,
        body: if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// The series of an exposition by `name{labels}` as written (both exporters sort labels).
pub fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A scrape of `addr`'s /metrics as series.
pub fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let a = get(addr, "/metrics", None);
    assert_eq!(a.status, 200, "{}", a.body);
    series(&a.body)
}

/// Group `group`'s series of a scrape.
pub fn group_series(s: &BTreeMap<String, f64>, group: &str) -> BTreeMap<String, f64> {
    let tag = format!("groupname=\"{group}\"");
    s.iter()
        .filter(|(k, _)| k.starts_with("namedprocess_namegroup_") && k.contains(&tag))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// A series of group `group`, by metric and its other labels (`""` for none), e.g.
/// `("cpu_seconds_total", "mode=\"user\"")`; 0 when absent.
pub fn value(s: &BTreeMap<String, f64>, group: &str, metric: &str, labels: &str) -> f64 {
    let g = format!("groupname=\"{group}\"");
    // Labels are sorted by name: groupname comes after ctxswitchtype, before the others.
    let mut all = vec![g.as_str()];
    if !labels.is_empty() {
        all.extend(labels.split(','));
    }
    all.sort_by_key(|l| l.split('=').next().unwrap_or("").to_string());
    let key = format!("namedprocess_namegroup_{metric}{{{}}}", all.join(","));
    s.get(&key).copied().unwrap_or(0.0)
}

/// Group `group`'s CPU seconds (user + system).
pub fn cpu(s: &BTreeMap<String, f64>, group: &str) -> f64 {
    value(s, group, "cpu_seconds_total", "mode=\"user\"")
        + value(s, group, "cpu_seconds_total", "mode=\"system\"")
}

/// Scrapes until `cond` holds for a scrape; returns that scrape.
pub fn scrape_until(
    addr: SocketAddr,
    what: &str,
    mut cond: impl FnMut(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let mut last = BTreeMap::new();
    wait_for(what, || {
        last = scrape(addr);
        let ok = cond(&last);
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    last
}
