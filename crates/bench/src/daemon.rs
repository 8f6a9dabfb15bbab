//! The daemon rows' machinery: a taskdiagd started on a private socket for the run
//! ([`BenchDaemon`]), and the `clients` mode, concurrent clients on their own connections.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use taskdiag::{Group, Request, Strategy};

/// A taskdiagd started for the daemon rows; killed (by pid) when dropped.
pub struct BenchDaemon {
    child: Child,
    socket: PathBuf,
}

impl BenchDaemon {
    /// Starts `bin` in the foreground on a socket of its own and waits until it answers.
    pub fn start(bin: &Path) -> anyhow::Result<BenchDaemon> {
        let socket =
            std::env::temp_dir().join(format!("taskdiag-bench-{}.sock", std::process::id()));
        let child = Command::new(bin)
            .arg("--foreground")
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let d = BenchDaemon { child, socket };
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "{} did not start",
                bin.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(d)
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for BenchDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Arguments of the `clients` mode.
#[derive(clap::Args)]
pub struct ClientsArgs {
    /// Concurrent clients, each on its own connection.
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// Requests per client.
    #[arg(long, default_value_t = 1)]
    requests: usize,
    /// Groups each request asks for (comma-separated; BASE is always included).
    #[arg(long, default_value = "base,cred")]
    groups: String,
    /// The daemon's socket.
    #[arg(long)]
    socket: PathBuf,
}

/// The show flags for a list of group names.
fn show_flags(list: &str) -> anyhow::Result<u64> {
    list.split(',')
        .filter(|n| !n.is_empty())
        .try_fold(Group::Base.flag(), |flags, name| {
            let g = Group::from_name(name).with_context(|| format!("unknown group '{name}'"))?;
            Ok(flags | g.flag())
        })
}

/// Runs `--clients` concurrent daemon clients, each sending `--requests` ALL requests, and
/// checks every response ended with DONE and no error.
pub fn clients(a: ClientsArgs) -> anyhow::Result<()> {
    let req = Request::new(Strategy::All, 0, show_flags(&a.groups)?);
    let handles: Vec<_> = (0..a.clients.max(1))
        .map(|_| {
            let socket = a.socket.clone();
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let mut c = taskdiag::client::DaemonClient::connect(&socket)?;
                let mut n = 0;
                for _ in 0..a.requests.max(1) {
                    n += c.dump(&req, &mut |_| Ok(()))?;
                }
                Ok(n)
            })
        })
        .collect();
    let mut tasks = 0;
    for h in handles {
        tasks += h
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
    }
    anyhow::ensure!(tasks > 0, "no tasks reported");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lists_always_include_base() {
        let (base, cred) = (Group::Base.flag(), Group::Cred.flag());
        assert_eq!(show_flags("base,cred").unwrap(), base | cred);
        assert_eq!(show_flags("cred").unwrap(), base | cred);
        assert_eq!(show_flags("").unwrap(), base);
        assert!(show_flags("base,nonsense").is_err());
    }
}
