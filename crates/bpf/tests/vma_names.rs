//! The map walk's two ways of naming a mapping's file give the same pieces: `dump_vma`
//! (bpf_d_path()) and `dump_vma_walk` (probe reads, for kernels whose verifier refuses
//! `dump_vma`; TASKDIAG_BPF_DISABLE=d_path here), for a process mapping a plain file, a deleted
//! one, one whose name has a newline and one in a deep directory; and for a memfd, whose name the
//! file system makes up, `dump_vma_walk` flags the listing for /proc rather than writing a
//! name (needs root).
//!
//! One test in its own binary: it switches the load with TASKDIAG_BPF_DISABLE, which would race
//! with other tests in the same process.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use taskdiag_bpf::{TaskFlavour, TaskIter};
use taskdiag_proto::msg::Messages;
use taskdiag_proto::{AccessRec, ACCESS_F_NAME_MISSING, MSG_VMA_PIECE, SHOW_MAPS};
use taskdiag_test_support::dir::TempDir;

struct Fixture(Child);

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A python process that maps the files `code` opens (its lines after the set-up), prints
/// "ready" and sleeps.
fn fixture(dir: &TempDir, code: &str) -> Fixture {
    let script = format!(
        "import mmap, os, sys, time\nd = sys.argv[1]\nkeep = []\n\
         def m(fd):\n    os.ftruncate(fd, 4096)\n    keep.append(mmap.mmap(fd, 4096))\n\
         {code}\nprint('ready', flush=True)\ntime.sleep(1000)\n"
    );
    let mut c = Command::new("python3")
        .args(["-c", &script])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("the fixture's ready line");
    assert_eq!(line, "ready\n");
    Fixture(c)
}

/// The map walk's pieces of process `pid` from a fresh load, and whether that load named files
/// by probe reads; `None` where the kernel has no map walk of that kind (no iter/task_vma
/// before 5.12; the walk by probe reads needs bpf_loop(), which the bounded task flavour's
/// kernels lack).
fn pieces(pid: u32) -> Option<(Vec<u8>, bool)> {
    let mut it = TaskIter::load_for(SHOW_MAPS).expect("load (run as root)");
    if !it.has_vma() {
        let f = it.features();
        let walk = std::env::var_os("TASKDIAG_BPF_DISABLE").is_some();
        assert!(
            !walk || f.task == TaskFlavour::Bounded,
            "no walk by probe reads where bpf_loop() is: {f:?} {:?}",
            taskdiag_bpf::refusals()
        );
        eprintln!(
            "no map walk{} on this kernel",
            if walk { " by probe reads" } else { "" }
        );
        return None;
    }
    let mut buf = Vec::new();
    it.dump_vmas(Some(pid), &mut |b| {
        buf.extend_from_slice(b);
        Ok(())
    })
    .expect("map walk");
    Some((buf, it.features().vma_walk))
}

/// The flags of the pieces' access records, OR'ed.
fn access_flags(pieces: &[u8]) -> u32 {
    Messages::new(pieces)
        .map(|m| m.expect("a whole message"))
        .filter(|m| m.header.msg_type == MSG_VMA_PIECE)
        .map(|m| {
            AccessRec::read_from(m.payload)
                .expect("access record")
                .flags
        })
        .fold(0, |a, f| a | f)
}

#[test]
fn both_ways_of_naming_files_give_the_same_pieces() {
    let dir = TempDir::new("vma-names");
    let deep = (0..40).fold(dir.path().to_path_buf(), |p, i| p.join(format!("d{i}")));
    std::fs::create_dir_all(&deep).expect("deep directories");
    let files = fixture(
        &dir,
        &format!(
            "for name in ['plain', 'gone', 'new\\nline']:\n    \
                 fd = os.open(os.path.join(d, name), os.O_RDWR | os.O_CREAT)\n    m(fd)\n\
             os.unlink(os.path.join(d, 'gone'))\n\
             m(os.open({:?}, os.O_RDWR | os.O_CREAT))",
            deep.join("file").to_str().expect("UTF-8 path")
        ),
    );
    let memfd = fixture(&dir, "m(os.memfd_create('vma-names'))");

    let Some((by_d_path, walk)) = pieces(files.0.id()) else {
        return;
    };
    if walk {
        // (6.18.44-fc-v1045: "R1 type=untrusted_ptr_".) The walk's names are compared with
        // /proc by the CLI's maps_named_by_probe_reads_are_byte_identical_to_proc.
        eprintln!(
            "this kernel refuses dump_vma ({:?}): no bpf_d_path() pieces to compare with",
            taskdiag_bpf::refusals()
        );
        return;
    }
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", files.0.id())).expect("maps");
    for name in ["/plain", "/gone (deleted)", "/new\\012line", "/d39/file"] {
        assert!(maps.contains(name), "{name} not mapped: {maps}");
    }
    let (memfd_by_d_path, _) = pieces(memfd.0.id()).expect("the same load again");

    // SAFETY: this binary's only test, on its own thread: nothing reads the environment
    // concurrently.
    unsafe { std::env::set_var("TASKDIAG_BPF_DISABLE", "d_path") };
    let walked = pieces(files.0.id()).zip(pieces(memfd.0.id()));
    // SAFETY: as above.
    unsafe { std::env::remove_var("TASKDIAG_BPF_DISABLE") };
    let Some(((by_walk, walk), (memfd_by_walk, _))) = walked else {
        return;
    };
    assert!(walk, "TASKDIAG_BPF_DISABLE=d_path loads dump_vma_walk");

    assert!(!by_d_path.is_empty());
    assert_eq!(access_flags(&by_walk) & ACCESS_F_NAME_MISSING, 0);
    assert!(
        by_walk == by_d_path,
        "the pieces differ:\n{:?}\n{:?}",
        String::from_utf8_lossy(&by_d_path),
        String::from_utf8_lossy(&by_walk)
    );
    // A name the file system makes up ("/memfd:vma-names (deleted)"): bpf_d_path() writes it,
    // the walk leaves the listing to /proc.
    assert_eq!(access_flags(&memfd_by_d_path) & ACCESS_F_NAME_MISSING, 0);
    assert_ne!(access_flags(&memfd_by_walk) & ACCESS_F_NAME_MISSING, 0);
}
