//! The kernel stack window (`K`): one task's kernel stack as /proc/PID/stack shows it (KSTACK,
//! refused like that file to all but root), under a heading with what SCHED says the task waits
//! in. It is read once, when asked for, and shown until a key is pressed; a task that ran on a
//! CPU at that moment has no stack to show, and asking again reads it again.
//!
//! Drawing the window and reading keys is [`super::tui`]'s job.

use taskdiag::Group;
use taskdiag_procfs::parse::stack_frames;
use taskdiag_proto::{state_char, BASE_F_KTHREAD};

use crate::procvals;
use crate::snapshot::{Source, Task};

/// What the window shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackView {
    /// Which task, its state, and the function and system call it waits in.
    pub title: String,
    /// The frames, innermost first, as /proc/PID/stack's lines without their `[<0>] `; or why
    /// there are none.
    pub lines: Vec<String>,
}

/// Why there is no stack for a caller that may not read it.
pub const DENIED: &str = "permission denied (root only, like /proc/PID/stack)";

/// Reads task `pid` (a process or any thread) through `src` and makes its window.
pub fn read(src: &mut Source, pid: u32, utf8: bool) -> StackView {
    match src.one(pid, Group::Kstack.flag() | Group::Sched.flag()) {
        Ok(t) => view(pid, t.as_ref(), utf8),
        Err(e) => StackView {
            title: format!("Kernel stack of PID {pid}"),
            lines: vec![e.to_string()],
        },
    }
}

/// The window for task `pid` as read (`None`: there is no such task).
pub fn view(pid: u32, t: Option<&Task>, utf8: bool) -> StackView {
    let Some(t) = t else {
        return StackView {
            title: format!("Kernel stack of PID {pid}"),
            lines: vec!["no such task".into()],
        };
    };
    let mut title = format!("Kernel stack of PID {pid}");
    if let Some(b) = &t.base {
        let comm = crate::text::lib_escape(&b.comm, utf8);
        title.push_str(&format!(
            " ({}), state {}",
            String::from_utf8_lossy(&comm),
            state_char(b.rec.state)
        ));
    }
    let kthread = t
        .base
        .as_ref()
        .is_some_and(|b| b.rec.flags & BASE_F_KTHREAD != 0);
    if let (Some(w), Some(s)) = (
        procvals::sched_wchan(t.sched.as_ref(), true),
        procvals::sched_syscall(t.sched.as_ref(), true, kthread),
    ) {
        title.push_str(&format!(", wchan {w}, syscall {s}"));
    }
    let lines = match &t.kstack {
        Some(k) => {
            let frames: Vec<String> = stack_frames(k)
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect();
            if frames.is_empty() {
                vec![
                    "no frames: the task was on a CPU when its stack was read (K reads it again)"
                        .into(),
                ]
            } else {
                frames
            }
        }
        None => {
            let errno = t
                .errors
                .iter()
                .find(|e| e.group == Group::Kstack as u16)
                .map(|e| e.errno);
            vec![match errno {
                Some(libc::EACCES | libc::EPERM) => DENIED.into(),
                Some(libc::ENOENT | libc::ESRCH) => "no such task".into(),
                Some(e) => crate::strerror(e),
                None => "not available".into(),
            }]
        }
    };
    StackView { title, lines }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::task::{Base, GroupError, Sched};
    use taskdiag_proto::{BaseRec, SchedRec};

    fn task(kstack: Option<&[u8]>, errno: Option<i32>) -> Task {
        Task {
            pid: 42,
            tgid: 42,
            base: Some(Base {
                rec: BaseRec {
                    state: 1,
                    ..Default::default()
                },
                comm: b"sleep".to_vec(),
            }),
            sched: Some(Sched {
                rec: SchedRec::default(),
                wchan: b"hrtimer_nanosleep".to_vec(),
                syscall: b"35 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00".to_vec(),
                ..Default::default()
            }),
            kstack: kstack.map(<[u8]>::to_vec),
            errors: errno
                .map(|errno| GroupError {
                    group: Group::Kstack as u16,
                    errno,
                })
                .into_iter()
                .collect(),
            ..Task::default()
        }
    }

    #[test]
    fn frames_one_a_line_without_the_prefix() {
        let t = task(
            Some(b"[<0>] hrtimer_nanosleep+0x74/0xf0\n[<0>] do_syscall_64+0x71/0x280\n"),
            None,
        );
        let v = view(42, Some(&t), true);
        assert!(
            v.title
                .starts_with("Kernel stack of PID 42 (sleep), state S, wchan hrtimer_nanosleep"),
            "{}",
            v.title
        );
        #[cfg(target_arch = "x86_64")]
        assert!(v.title.ends_with(", syscall nanosleep"), "{}", v.title);
        assert_eq!(
            v.lines,
            ["hrtimer_nanosleep+0x74/0xf0", "do_syscall_64+0x71/0x280"]
        );
        let running = view(42, Some(&task(Some(b""), None)), true);
        assert!(running.lines[0].starts_with("no frames"), "{running:?}");
    }

    #[test]
    fn refusals_and_vanished_tasks_say_why() {
        let v = view(42, Some(&task(None, Some(libc::EACCES))), true);
        assert_eq!(v.lines, [DENIED]);
        let v = view(42, Some(&task(None, Some(libc::ESRCH))), true);
        assert_eq!(v.lines, ["no such task"]);
        let v = view(7, None, true);
        assert_eq!(
            (v.title.as_str(), v.lines.as_slice()),
            ("Kernel stack of PID 7", &["no such task".to_string()][..])
        );
    }
}
