//! pprof output: a [`Profile`] as a gzip-compressed `profile.proto`, the format `go tool pprof`
//! reads.
//!
//! The messages of github.com/google/pprof/proto/profile.proto that we write are declared here
//! by hand with prost's derive (no protoc, no build script); fields we never set are left out,
//! which the protobuf wire format allows. Every frame becomes a location, the synthetic state
//! and thread frames included, so `pprof -top` and `-traces` show them; the state and the
//! thread are also attached to each sample as the labels `state` and `thread`.

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use crate::model::{Frame, FrameKind, Profile};

/// `perftools.profiles.Profile`: the whole profile.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PprofProfile {
    /// What each value of a sample measures.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples: one per distinct stack.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The binaries the locations fall in.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The frames.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions the locations point at.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; index 0 is always `""`.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// When the profile was taken, in nanoseconds since the epoch (0: unknown).
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long the profile ran, in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What the sampling period is measured in.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period, in `period_type` units.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// The sample type shown by default (string table index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `perftools.profiles.ValueType`: a type and a unit, as string table indices.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    /// E.g. `samples` or `wall`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. `count` or `nanoseconds`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `perftools.profiles.Sample`: one stack and its values.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels of the sample.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `perftools.profiles.Label`: a key with a string or numeric value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// The key (string table index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// The string value (string table index), or 0.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// The numeric value, when `str` is 0.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// The unit of `num` (string table index), or 0.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `perftools.profiles.Mapping`: a binary.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Where it was loaded (0: unknown; our frames carry no addresses).
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// End of the loaded range.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// The binary's path (string table index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Its build id (string table index), or 0.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Whether its locations already carry function names (true: nothing to symbolize).
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Whether they carry file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Whether they carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Whether they carry inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `perftools.profiles.Location`: one frame.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping it falls in, 0 if unknown.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Its instruction address (0: unknown).
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Its function (the last is the caller, when inlined).
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Whether several frames were folded into it.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// `perftools.profiles.Line`: a function and a line in it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The source line (0: unknown).
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// The source column (0: unknown).
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// `perftools.profiles.Function`: a function.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its (demangled) name (string table index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Its name as the binary has it (string table index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Its source file (string table index), or 0.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Its first source line (0: unknown).
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// Writes `profile` to `out` as a gzip-compressed pprof `profile.proto`.
///
/// Sample types are `samples/count` and `wall/nanoseconds` (each sample weighs `1e9 / hz`
/// ns; with `hz == 0` the wall values and the period are 0). Each stack is one sample, its
/// locations leaf first.
pub fn write_pprof(profile: &Profile, out: &mut impl Write) -> io::Result<()> {
    let bytes = build(profile).encode_to_vec();
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?;
    Ok(())
}

/// Builds the pprof message for `profile`; ids and string indices are given in order of first
/// appearance, so the output is deterministic.
fn build(profile: &Profile) -> PprofProfile {
    let mut b = Builder::default();
    b.strings.intern("");
    let samples = ValueType {
        r#type: b.strings.intern("samples"),
        unit: b.strings.intern("count"),
    };
    let wall = ValueType {
        r#type: b.strings.intern("wall"),
        unit: b.strings.intern("nanoseconds"),
    };
    let state_key = b.strings.intern("state");
    let thread_key = b.strings.intern("thread");

    let mut sample = Vec::with_capacity(profile.stacks.len());
    for stack in &profile.stacks {
        let mut location_id: Vec<u64> = stack.frames.iter().map(|f| b.location(f)).collect();
        location_id.reverse();
        let mut label = Vec::new();
        if let Some(f) = stack.frames.iter().find(|f| f.kind == FrameKind::State) {
            let state = f.name.trim_start_matches('[').trim_end_matches(']');
            label.push(Label {
                key: state_key,
                str: b.strings.intern(state),
                ..Label::default()
            });
        }
        if let Some(f) = stack.frames.iter().find(|f| f.kind == FrameKind::Thread) {
            label.push(Label {
                key: thread_key,
                str: b.strings.intern(&f.name),
                ..Label::default()
            });
        }
        sample.push(Sample {
            location_id,
            value: vec![
                saturating_i64(u128::from(stack.count)),
                wall_ns(stack.count, profile.hz),
            ],
            label,
        });
    }

    PprofProfile {
        default_sample_type: wall.r#type,
        period_type: Some(wall.clone()),
        sample_type: vec![samples, wall],
        sample,
        mapping: b.mappings,
        location: b.locations,
        function: b.functions,
        string_table: b.strings.table,
        time_nanos: 0,
        duration_nanos: saturating_i64(u128::from(profile.duration_ns)),
        period: wall_ns(1, profile.hz),
    }
}

/// `count` samples at `hz`, in nanoseconds.
fn wall_ns(count: u64, hz: u64) -> i64 {
    match hz {
        0 => 0,
        hz => saturating_i64(u128::from(count) * 1_000_000_000 / u128::from(hz)),
    }
}

fn saturating_i64(v: u128) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The string table: each distinct string once, `""` first.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = saturating_i64(self.table.len() as u128);
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// Deduplicates mappings (per module), functions (per name and module) and locations (per
/// frame) while the samples are built.
#[derive(Default)]
struct Builder {
    strings: Strings,
    mappings: Vec<Mapping>,
    mapping_ids: HashMap<String, u64>,
    functions: Vec<Function>,
    function_ids: HashMap<(String, Option<String>), u64>,
    locations: Vec<Location>,
    location_ids: HashMap<Frame, u64>,
}

impl Builder {
    fn location(&mut self, frame: &Frame) -> u64 {
        if let Some(&id) = self.location_ids.get(frame) {
            return id;
        }
        let mapping_id = match &frame.module {
            Some(module) => self.mapping(module),
            None => 0,
        };
        let function_id = self.function(&frame.name, frame.module.as_deref());
        let id = next_id(self.locations.len());
        self.locations.push(Location {
            id,
            mapping_id,
            line: vec![Line {
                function_id,
                ..Line::default()
            }],
            ..Location::default()
        });
        self.location_ids.insert(frame.clone(), id);
        id
    }

    fn function(&mut self, name: &str, module: Option<&str>) -> u64 {
        let key = (name.to_owned(), module.map(str::to_owned));
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let name = self.strings.intern(name);
        let id = next_id(self.functions.len());
        self.functions.push(Function {
            id,
            name,
            system_name: name,
            ..Function::default()
        });
        self.function_ids.insert(key, id);
        id
    }

    fn mapping(&mut self, module: &str) -> u64 {
        if let Some(&id) = self.mapping_ids.get(module) {
            return id;
        }
        let filename = self.strings.intern(module);
        let id = next_id(self.mappings.len());
        self.mappings.push(Mapping {
            id,
            filename,
            // Frames are already symbolized: tell pprof not to look for the binaries.
            has_functions: true,
            ..Mapping::default()
        });
        self.mapping_ids.insert(module.to_owned(), id);
        id
    }
}

/// The id of the `len`th element (ids start at 1; 0 means "none" in pprof).
fn next_id(len: usize) -> u64 {
    len as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Stack;
    use flate2::read::GzDecoder;
    use std::io::Read;
    use std::process::Command;

    fn frame(kind: FrameKind, name: &str, module: Option<&str>) -> Frame {
        Frame {
            kind,
            name: name.to_owned(),
            module: module.map(str::to_owned),
        }
    }

    /// Two threads of `app`: `worker` sleeping in the kernel (3 samples), `main` running in
    /// user space (1 sample, sharing `main`/`libc_start` with nothing else).
    fn sample_profile() -> Profile {
        let app = Some("/usr/bin/app");
        let kernel = Some("[kernel.kallsyms]");
        Profile {
            stacks: vec![
                Stack {
                    frames: vec![
                        frame(FrameKind::State, "[sleeping]", None),
                        frame(FrameKind::Thread, "worker", None),
                        frame(FrameKind::User, "start_thread", Some("/usr/lib/libc.so.6")),
                        frame(FrameKind::User, "worker_loop", app),
                        frame(FrameKind::Kernel, "do_nanosleep", kernel),
                    ],
                    count: 3,
                },
                Stack {
                    frames: vec![
                        frame(FrameKind::State, "[running]", None),
                        frame(FrameKind::Thread, "main", None),
                        frame(FrameKind::User, "main", app),
                        frame(FrameKind::User, "compute", app),
                    ],
                    count: 1,
                },
            ],
            states: Vec::new(),
            hz: 100,
            duration_ns: 2_000_000_000,
        }
    }

    fn decode(bytes: &[u8]) -> PprofProfile {
        let mut raw = Vec::new();
        GzDecoder::new(bytes).read_to_end(&mut raw).expect("gunzip");
        PprofProfile::decode(raw.as_slice()).expect("decode")
    }

    fn render(profile: &Profile) -> Vec<u8> {
        let mut out = Vec::new();
        write_pprof(profile, &mut out).expect("write");
        out
    }

    fn function_name(p: &PprofProfile, location_id: u64) -> &str {
        let loc = &p.location[(location_id - 1) as usize];
        assert_eq!(loc.id, location_id);
        let f = &p.function[(loc.line[0].function_id - 1) as usize];
        &p.string_table[f.name as usize]
    }

    fn label<'a>(p: &'a PprofProfile, s: &Sample, key: &str) -> Option<&'a str> {
        s.label
            .iter()
            .find(|l| p.string_table[l.key as usize] == key)
            .map(|l| p.string_table[l.str as usize].as_str())
    }

    #[test]
    fn round_trip() {
        let p = decode(&render(&sample_profile()));
        assert_eq!(p.string_table[0], "");
        let mut seen = std::collections::HashSet::new();
        assert!(
            p.string_table.iter().all(|s| seen.insert(s)),
            "strings deduplicated"
        );

        let st = |v: &ValueType| {
            (
                p.string_table[v.r#type as usize].as_str(),
                p.string_table[v.unit as usize].as_str(),
            )
        };
        let types: Vec<_> = p.sample_type.iter().map(st).collect();
        assert_eq!(types, [("samples", "count"), ("wall", "nanoseconds")]);
        assert_eq!(
            p.period_type.as_ref().map(st),
            Some(("wall", "nanoseconds"))
        );
        assert_eq!(p.period, 10_000_000);
        assert_eq!(p.duration_nanos, 2_000_000_000);

        assert_eq!(p.sample.len(), 2);
        let s = &p.sample[0];
        assert_eq!(s.value, [3, 30_000_000]);
        let names: Vec<_> = s
            .location_id
            .iter()
            .map(|&id| function_name(&p, id))
            .collect();
        assert_eq!(
            names,
            [
                "do_nanosleep",
                "worker_loop",
                "start_thread",
                "worker",
                "[sleeping]"
            ]
        );
        assert_eq!(label(&p, s, "state"), Some("sleeping"));
        assert_eq!(label(&p, s, "thread"), Some("worker"));
        assert_eq!(p.sample[1].value, [1, 10_000_000]);
        assert_eq!(label(&p, &p.sample[1], "state"), Some("running"));

        // Thread `main` and function `main` are distinct frames, and so distinct locations
        // and functions; their name is one string.
        assert_eq!(p.location.len(), 9);
        assert_eq!(p.function.len(), 9);
        // One mapping per module, set on the locations of frames with a module only.
        let files: Vec<_> = p
            .mapping
            .iter()
            .map(|m| p.string_table[m.filename as usize].as_str())
            .collect();
        assert_eq!(
            files,
            ["/usr/lib/libc.so.6", "/usr/bin/app", "[kernel.kallsyms]"]
        );
        let loc_of = |name: &str| {
            p.location
                .iter()
                .find(|l| function_name(&p, l.id) == name)
                .expect("location")
        };
        assert_eq!(loc_of("[sleeping]").mapping_id, 0);
        assert_eq!(loc_of("worker").mapping_id, 0);
        assert_eq!(loc_of("compute").mapping_id, 2);
        assert_eq!(loc_of("do_nanosleep").mapping_id, 3);
    }

    #[test]
    fn deterministic_and_empty() {
        let profile = sample_profile();
        assert_eq!(render(&profile), render(&profile));

        let p = decode(&render(&Profile::default()));
        assert_eq!(p.string_table[0], "");
        assert!(p.sample.is_empty());
        assert_eq!(p.period, 0);
    }

    /// Runs `go tool pprof <args> <file>` and returns its standard output.
    fn pprof(args: &[&str], file: &std::path::Path) -> String {
        let out = Command::new("go")
            .args(["tool", "pprof"])
            .args(args)
            .arg(file)
            .output()
            .expect("run go tool pprof");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "go tool pprof {args:?} failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// The whitespace-separated columns of the `-top` line for function `name`.
    fn line_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .find(|l| l.split_whitespace().last() == Some(name))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
    }

    #[test]
    fn go_tool_pprof_reads_it() {
        // `make test` installs Go (scripts/setup --test: golang-go) where it is missing.
        assert!(
            Command::new("go").arg("version").output().is_ok(),
            "`go` is not on PATH: scripts/setup --test installs golang-go"
        );
        let path = std::env::temp_dir().join(format!(
            "taskdiag-profile-pprof-test-{}.pb.gz",
            std::process::id()
        ));
        std::fs::write(&path, render(&sample_profile())).expect("write temp file");

        let raw = pprof(&["-raw"], &path);
        let top = pprof(&["-top"], &path);
        let top_samples = pprof(&["-top", "-sample_index=samples"], &path);
        let _ = std::fs::remove_file(&path);

        // -raw: the sample types, then each sample's values and its locations leaf first.
        assert!(raw.contains("samples/count wall/nanoseconds"), "{raw}");
        // Location ids are given root first (1 = `[sleeping]`), so leaf first reads 5 4 3 2 1.
        assert!(raw.contains("3   30000000: 5 4 3 2 1 "), "{raw}");
        assert!(raw.contains("1   10000000: 9 8 7 6 "), "{raw}");
        for name in [
            "do_nanosleep",
            "worker_loop",
            "start_thread",
            "[sleeping]",
            "compute",
        ] {
            assert!(raw.contains(name), "{name} missing from\n{raw}");
        }
        assert!(raw.contains("state:[sleeping] thread:[worker]"), "{raw}");

        // -top (wall by default): leaf functions with their flat time, in ms at 100 Hz.
        assert_eq!(line_of(&top, "do_nanosleep")[0], "30ms");
        assert_eq!(line_of(&top, "compute")[0], "10ms");
        // Cumulative time of the synthetic frames.
        assert_eq!(line_of(&top, "[sleeping]")[3], "30ms");
        assert_eq!(line_of(&top, "main")[3], "10ms");
        // And in samples.
        assert_eq!(line_of(&top_samples, "do_nanosleep")[0], "3");
        assert_eq!(line_of(&top_samples, "[running]")[3], "1");
    }
}
