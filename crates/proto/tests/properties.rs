//! Property tests: arbitrary bytes never panic the decoder; arbitrary tasks round-trip.
use proptest::prelude::*;
use taskdiag_proto::msg::{write_done, write_start, Messages};
use taskdiag_proto::task::{
    Base, Cgroup, Cred, Event, Files, Ns, Paths, Sched, StreamDecoder, Task, Vma,
};
use taskdiag_proto::{
    BaseRec, CgroupRec, CredRec, Done, FilesRec, IoRec, LimitRec, NsIdsRec, NsRec, SchedRec,
    SignalRec, Start, StatRec, StatmRec, VmaRec, VmaStatRec, FILES_F_FDS_HIDDEN, NS_F_HIDDEN,
    VERSION,
};

fn task() -> impl Strategy<Value = Task> {
    (
        any::<u32>(),
        any::<u32>(),
        proptest::option::of((
            any::<u32>(),
            any::<u8>(),
            proptest::collection::vec(any::<u8>(), 0..64),
        )),
        proptest::option::of(proptest::collection::vec(any::<u32>(), 0..40)),
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..70_000)),
        // Up to ~800 mappings: enough to cut the VMA attribute across CONTINUED messages.
        proptest::option::of(proptest::collection::vec(
            (
                any::<u64>(),
                any::<u64>(),
                proptest::option::of(any::<u64>()),
                proptest::collection::vec(any::<u8>(), 0..300),
            ),
            0..800,
        )),
        proptest::option::of((any::<u64>(), any::<u64>())),
        proptest::option::of((
            any::<u32>(),
            proptest::collection::vec((any::<u32>(), any::<u32>()), 0..=33),
        )),
        proptest::option::of((
            any::<u32>(),
            proptest::collection::vec((any::<u64>(), any::<u64>()), 0..=16),
        )),
        // CGROUP, IO, PATHS (a path, or an errno for the working directory) and ENVIRON,
        // long enough to be cut across messages.
        proptest::option::of((
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..200),
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..5000),
            1u8..=255,
            proptest::collection::vec(any::<u8>(), 0..40_000),
        )),
    )
        .prop_map(
            |(pid, tgid, base, groups, ut, vm, cmdline, maps, sig, ns, files, more)| Task {
                pid,
                tgid,
                base: base.map(|(ppid, state, comm)| Base {
                    rec: BaseRec {
                        ppid,
                        state,
                        comm_len: comm.len() as u16,
                        ..Default::default()
                    },
                    comm,
                }),
                cred: groups.map(|groups| Cred {
                    rec: CredRec {
                        uid: pid,
                        ngroups: groups.len() as u32,
                        ..Default::default()
                    },
                    groups,
                }),
                stat: ut.map(|utime_ns| StatRec {
                    utime_ns,
                    ..Default::default()
                }),
                statm: vm.map(|vm_size| StatmRec {
                    vm_size,
                    ..Default::default()
                }),
                cmdline,
                signal: sig.map(|(pending, caught)| SignalRec {
                    pending,
                    caught,
                    ..Default::default()
                }),
                ns: ns.map(|(net, levels)| Ns {
                    rec: NsRec {
                        net,
                        flags: net & NS_F_HIDDEN,
                        levels: levels.len() as u32,
                        ..Default::default()
                    },
                    ids: levels
                        .into_iter()
                        .map(|(pid, sid)| NsIdsRec {
                            pid,
                            tgid: pid,
                            pgid: 0,
                            sid,
                        })
                        .collect(),
                }),
                files: files.map(|(fds, limits)| Files {
                    rec: FilesRec {
                        fds,
                        flags: fds & FILES_F_FDS_HIDDEN,
                        nlimits: limits.len() as u32,
                        reserved: 0,
                    },
                    limits: limits
                        .into_iter()
                        .map(|(soft, hard)| LimitRec { soft, hard })
                        .collect(),
                }),
                cgroup: more.as_ref().map(|(id, text, ..)| Cgroup {
                    rec: CgroupRec {
                        id: *id,
                        ..CgroupRec::default()
                    },
                    text: text.clone(),
                }),
                io: more.as_ref().map(|&(_, _, rchar, ..)| IoRec {
                    rchar,
                    ..IoRec::default()
                }),
                paths: more.as_ref().map(|(_, _, _, exe, errno, _)| Paths {
                    exe: Ok(exe.clone()),
                    cwd: Err(*errno),
                    root: Ok(b"/".to_vec()),
                }),
                sched: more.as_ref().map(|&(id, ref text, ..)| Sched {
                    rec: SchedRec {
                        oom_score: id as u32,
                        wchan_len: text.len().min(u16::MAX as usize) as u16,
                        ..SchedRec::default()
                    },
                    wchan: text.clone(),
                    ..Sched::default()
                }),
                security: None,
                delay: more.as_ref().map(|&(id, ..)| taskdiag_proto::DelayRec {
                    run_ns: id,
                    flags: (id & 1) as u32,
                    ..Default::default()
                }),
                environ: more.as_ref().map(|(.., env)| env.clone()),
                // KSTACK: bytes in one attribute, like the environment (a slice of it).
                kstack: more
                    .as_ref()
                    .map(|(.., env)| env[..env.len().min(3000)].to_vec()),
                // WCHAN: a short text in one attribute (the cgroup text, cut).
                wchan: more.map(|(_, text, ..)| text[..text.len().min(64)].to_vec()),
                errors: vec![],
                access: None,
                vma_access: None,
                // A process's own record (ALL_WITH_THREADS) on some: the flag of every one of
                // its messages.
                process: tgid % 3 == 0,
                vmas: maps.map(|m| {
                    m.into_iter()
                        .map(|(start, flags, rss, name)| Vma {
                            rec: VmaRec {
                                start,
                                end: start.wrapping_add(4096),
                                vm_flags: flags,
                                ..VmaRec::default()
                            },
                            stat: rss.map(|rss| VmaStatRec {
                                rss,
                                ..VmaStatRec::default()
                            }),
                            name,
                        })
                        .collect()
                }),
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn streams_of_tasks_round_trip(tasks in proptest::collection::vec(task(), 0..6)) {
        let mut buf = Vec::new();
        write_start(&mut buf, &Start { version: VERSION, ..Default::default() });
        for t in &tasks { t.encode(&mut buf); }
        write_done(&mut buf, &Done { tasks: tasks.len() as u64, ..Default::default() });
        let got: Vec<Task> = StreamDecoder::decode_all(&buf).unwrap().into_iter()
            .filter_map(|e| if let Event::Task(t) = e { Some(t) } else { None }).collect();
        prop_assert_eq!(got, tasks);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = StreamDecoder::decode_all(&bytes);
        for m in Messages::new(&bytes).flatten() {
            for _ in m.attrs() {}
        }
    }

    #[test]
    fn corrupted_streams_never_panic(t in task(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut buf = Vec::new();
        write_start(&mut buf, &Start { version: VERSION, ..Default::default() });
        t.encode(&mut buf);
        write_done(&mut buf, &Done::default());
        for (pos, val) in flips { let n = buf.len(); buf[pos % n] = val; }
        // Whatever still decodes re-encodes to the same tasks (the fuzz target's property).
        if let Ok(events) = StreamDecoder::decode_all(&buf) {
            let tasks: Vec<Task> = events.into_iter()
                .filter_map(|e| if let Event::Task(t) = e { Some(t) } else { None }).collect();
            let mut again = Vec::new();
            write_start(&mut again, &Start { version: VERSION, ..Default::default() });
            for t in &tasks { t.encode(&mut again); }
            write_done(&mut again, &Done::default());
            let back: Vec<Task> = StreamDecoder::decode_all(&again).unwrap().into_iter()
                .filter_map(|e| if let Event::Task(t) = e { Some(t) } else { None }).collect();
            prop_assert_eq!(back, tasks);
        }
        let cut = buf.len() / 2;
        let _ = StreamDecoder::decode_all(&buf[..cut]);
    }
}
