//! GNU `getopt_long` as glibc implements it, for the tools whose C originals read their
//! command line with it (`pgrep`/`pkill` from procps-ng, `pstree` from psmisc): options
//! anywhere among the operands (unless `POSIXLY_CORRECT`), clustered short options, arguments
//! attached (`-d,`, `--delimiter=,`) or in the next argument, unambiguous prefixes of long
//! options, `--` ending the options, and glibc's own words for every mistake.
//!
//! This module only splits the arguments; what an option means, and what a tool does after a
//! mistake (its usage text, its exit status), is the tool's. Arguments are bytes: an option's
//! argument or an operand need not be UTF-8, and messages quote them as given.

/// Whether an option takes an argument (`x`, `x:` and `x::` in a getopt option string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HasArg {
    /// None.
    No,
    /// Always: attached, or else the next argument whatever it is.
    Required,
    /// Only attached (`-w120`, `--width=120`).
    Optional,
}

/// A long option: its name, its argument, and the code [`Getopt`] returns for it (a short
/// option's character, or a number above 255 for one without a short form).
#[derive(Debug, Clone, Copy)]
pub struct LongOpt {
    /// The name, without `--`.
    pub name: &'static str,
    /// Its argument.
    pub has_arg: HasArg,
    /// What [`Getopt`] returns for it.
    pub code: u32,
}

impl LongOpt {
    /// `--name` with `has_arg`, returned as `code`: a short option's character (`b'd' as u32`)
    /// for a long form of it, else a number above 255.
    pub const fn new(name: &'static str, has_arg: HasArg, code: u32) -> LongOpt {
        LongOpt {
            name,
            has_arg,
            code,
        }
    }
}

/// A mistake on the command line, as glibc reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetoptError<'a> {
    /// A short option that is not one (`-x`).
    Invalid(u8),
    /// A short option that needs an argument, last on the line.
    MissingArg(u8),
    /// `--name` (everything after the dashes, a value included) matches no long option.
    Unrecognized(&'a [u8]),
    /// `--name` (everything after the dashes) starts the names of several different options,
    /// listed in the tool's order.
    Ambiguous(&'a [u8], Vec<&'static str>),
    /// `--name=value` for this option, which takes no argument.
    NoArgAllowed(&'static str),
    /// This long option needs an argument and is last on the line.
    LongMissingArg(&'static str),
}

impl GetoptError<'_> {
    /// The message glibc prints for the mistake, `prog: ...`, without the newline.
    pub fn message(&self, prog: &str) -> Vec<u8> {
        let mut m = format!("{prog}: ").into_bytes();
        match self {
            GetoptError::Invalid(c) => {
                m.extend_from_slice(b"invalid option -- '");
                m.push(*c);
                m.push(b'\'');
            }
            GetoptError::MissingArg(c) => {
                m.extend_from_slice(b"option requires an argument -- '");
                m.push(*c);
                m.push(b'\'');
            }
            GetoptError::Unrecognized(body) => {
                m.extend_from_slice(b"unrecognized option '--");
                m.extend_from_slice(body);
                m.push(b'\'');
            }
            GetoptError::Ambiguous(body, names) => {
                m.extend_from_slice(b"option '--");
                m.extend_from_slice(body);
                m.extend_from_slice(b"' is ambiguous; possibilities:");
                for n in names {
                    m.extend_from_slice(format!(" '--{n}'").as_bytes());
                }
            }
            GetoptError::NoArgAllowed(name) => m.extend_from_slice(
                format!("option '--{name}' doesn't allow an argument").as_bytes(),
            ),
            GetoptError::LongMissingArg(name) => {
                m.extend_from_slice(format!("option '--{name}' requires an argument").as_bytes())
            }
        }
        m
    }
}

/// One option: its code and its argument, if it has one.
pub type Opt<'a> = (u32, Option<&'a [u8]>);

/// GNU `getopt_long` over a command line (without the program name): an iterator over the
/// options, in order; the operands are collected on the way ([`Getopt::operands`]).
#[derive(Debug)]
pub struct Getopt<'a> {
    args: &'a [Vec<u8>],
    short: &'static [u8],
    long: &'static [LongOpt],
    posixly: bool,
    /// The next argument to look at.
    i: usize,
    /// Position inside a cluster of short options in `args[i]` (0: not in one).
    sub: usize,
    /// No more options (after `--`, or the first operand when `posixly`).
    done: bool,
    operands: Vec<&'a [u8]>,
}

impl<'a> Getopt<'a> {
    /// Reads `args` with the short options of getopt option string `short` (`"ad:w::"`; a
    /// leading `+` or `-` is not supported) and the long options `long`. With `posixly`
    /// (`POSIXLY_CORRECT` is set), options end at the first operand.
    pub fn new(
        args: &'a [Vec<u8>],
        short: &'static [u8],
        long: &'static [LongOpt],
        posixly: bool,
    ) -> Self {
        Getopt {
            args,
            short,
            long,
            posixly,
            i: 0,
            sub: 0,
            done: false,
            operands: Vec::new(),
        }
    }

    /// The operands, in order: those met so far, and once the iterator has ended, all of them.
    pub fn operands(&self) -> &[&'a [u8]] {
        &self.operands
    }

    /// The next argument, taken out of the line, if the last option ended its argument (it
    /// was not inside a cluster) and `want` accepts it: for a tool that, like procps top, takes
    /// a word after an option as that option's argument itself (`cp = argv[optind++]`).
    pub fn take_next_if(&mut self, want: impl FnOnce(&[u8]) -> bool) -> Option<&'a [u8]> {
        if self.sub > 0 || self.done {
            return None;
        }
        let a = self.args.get(self.i).filter(|a| want(a))?;
        self.i += 1;
        Some(a)
    }

    /// What the option string says of short option `c`.
    fn short_spec(&self, c: u8) -> Option<HasArg> {
        if c == b':' || c == b';' {
            return None;
        }
        let i = self.short.iter().position(|&x| x == c)?;
        Some(match (self.short.get(i + 1), self.short.get(i + 2)) {
            (Some(b':'), Some(b':')) => HasArg::Optional,
            (Some(b':'), _) => HasArg::Required,
            _ => HasArg::No,
        })
    }

    fn short_opt(&mut self) -> Result<Opt<'a>, GetoptError<'a>> {
        let args = self.args;
        let a = &args[self.i];
        let c = a[self.sub];
        self.sub += 1;
        let rest = &a[self.sub..];
        let has_arg = self.short_spec(c);
        // The cluster goes on only after a short option that takes no argument, or after a
        // mistake, when more follows.
        if rest.is_empty() || matches!(has_arg, Some(HasArg::Required | HasArg::Optional)) {
            self.sub = 0;
            self.i += 1;
        }
        let code = u32::from(c);
        match has_arg {
            None => Err(GetoptError::Invalid(c)),
            Some(HasArg::No) => Ok((code, None)),
            Some(_) if !rest.is_empty() => Ok((code, Some(rest))),
            Some(HasArg::Optional) => Ok((code, None)),
            Some(HasArg::Required) => {
                let v = args.get(self.i).ok_or(GetoptError::MissingArg(c))?;
                self.i += 1;
                Ok((code, Some(v)))
            }
        }
    }

    fn long_opt(&mut self, body: &'a [u8]) -> Result<Opt<'a>, GetoptError<'a>> {
        let (name, value) = match body.iter().position(|&c| c == b'=') {
            Some(p) => (&body[..p], Some(&body[p + 1..])),
            None => (body, None),
        };
        let found = match self.long.iter().find(|o| o.name.as_bytes() == name) {
            Some(o) => o,
            None => {
                let mut cands = self
                    .long
                    .iter()
                    .filter(|o| o.name.as_bytes().starts_with(name));
                let first = cands.next().ok_or(GetoptError::Unrecognized(body))?;
                // glibc lists the first match and every later one that is not the same option
                // under another name (same argument and code); one alone is no ambiguity.
                let mut names = vec![first.name];
                names.extend(
                    cands
                        .filter(|o| o.has_arg != first.has_arg || o.code != first.code)
                        .map(|o| o.name),
                );
                if names.len() > 1 {
                    return Err(GetoptError::Ambiguous(body, names));
                }
                first
            }
        };
        match (found.has_arg, value) {
            (HasArg::No, Some(_)) => Err(GetoptError::NoArgAllowed(found.name)),
            (HasArg::No, None) | (HasArg::Optional, None) => Ok((found.code, None)),
            (_, Some(v)) => Ok((found.code, Some(v))),
            (HasArg::Required, None) => {
                let v = self
                    .args
                    .get(self.i)
                    .ok_or(GetoptError::LongMissingArg(found.name))?;
                self.i += 1;
                Ok((found.code, Some(v)))
            }
        }
    }
}

impl<'a> Iterator for Getopt<'a> {
    type Item = Result<Opt<'a>, GetoptError<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.sub > 0 {
                return Some(self.short_opt());
            }
            let a = self.args.get(self.i)?;
            if self.done {
                self.operands.push(a);
                self.i += 1;
                continue;
            }
            if a.as_slice() == b"--" {
                self.i += 1;
                self.done = true;
                continue;
            }
            if let Some(body) = a.strip_prefix(b"--") {
                self.i += 1;
                return Some(self.long_opt(body));
            }
            if a.len() > 1 && a[0] == b'-' {
                self.sub = 1;
                continue;
            }
            // An operand.
            self.operands.push(a);
            self.i += 1;
            self.done = self.posixly;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: &[LongOpt] = &[
        LongOpt::new("list-name", HasArg::No, b'l' as u32),
        LongOpt::new("list-full", HasArg::No, b'a' as u32),
        LongOpt::new("delimiter", HasArg::Required, b'd' as u32),
        LongOpt::new("width", HasArg::Optional, b'w' as u32),
        LongOpt::new("list", HasArg::No, 300),
        LongOpt::new("list-names", HasArg::No, b'l' as u32),
    ];

    fn argv(v: &[&[u8]]) -> Vec<Vec<u8>> {
        v.iter().map(|a| a.to_vec()).collect()
    }

    /// Options as (code as a char, argument), and operands.
    type Parsed = (Vec<(char, Option<Vec<u8>>)>, Vec<Vec<u8>>);

    /// Every option and the operands; or the first mistake's message.
    fn run(v: &[&[u8]], posixly: bool) -> Result<Parsed, String> {
        let args = argv(v);
        let mut g = Getopt::new(&args, b"ald:w::x", LONG, posixly);
        let mut opts = Vec::new();
        for o in g.by_ref() {
            match o {
                Ok((c, a)) => opts.push((char::from_u32(c).unwrap_or('?'), a.map(<[u8]>::to_vec))),
                Err(e) => return Err(String::from_utf8_lossy(&e.message("t")).into_owned()),
            }
        }
        Ok((opts, g.operands().iter().map(|o| o.to_vec()).collect()))
    }

    #[test]
    fn options_anywhere_clustered_and_attached() {
        let (o, ops) = run(
            &[
                b"p1",
                b"-ld,",
                b"p2",
                b"-x",
                b"-d",
                b"-",
                b"-",
                b"--width=3",
                b"-w",
            ],
            false,
        )
        .unwrap();
        assert_eq!(
            o,
            [
                ('l', None),
                ('d', Some(b",".to_vec())),
                ('x', None),
                ('d', Some(b"-".to_vec())),
                ('w', Some(b"3".to_vec())),
                ('w', None),
            ]
        );
        assert_eq!(ops, [b"p1".to_vec(), b"p2".to_vec(), b"-".to_vec()]);
        // An optional argument is only ever attached.
        let (o, ops) = run(&[b"-w", b"5", b"-w7"], false).unwrap();
        assert_eq!(o, [('w', None), ('w', Some(b"7".to_vec()))]);
        assert_eq!(ops, [b"5".to_vec()]);
        // A required one takes the next argument whatever it is.
        let (o, _) = run(&[b"--delimiter", b"--", b"-a"], false).unwrap();
        assert_eq!(o, [('d', Some(b"--".to_vec())), ('a', None)]);
    }

    #[test]
    fn double_dash_and_posixly_correct_end_the_options() {
        let (o, ops) = run(&[b"-a", b"--", b"-l", b"x"], false).unwrap();
        assert_eq!((o.len(), ops), (1, vec![b"-l".to_vec(), b"x".to_vec()]));
        let (o, ops) = run(&[b"-a", b"x", b"-l"], true).unwrap();
        assert_eq!((o.len(), ops), (1, vec![b"x".to_vec(), b"-l".to_vec()]));
        let (o, ops) = run(&[b"-a", b"x", b"-l"], false).unwrap();
        assert_eq!((o.len(), ops), (2, vec![b"x".to_vec()]));
    }

    #[test]
    fn long_prefixes_exact_names_and_aliases() {
        assert_eq!(
            run(&[b"--deli=,"], false).unwrap().0,
            [('d', Some(b",".to_vec()))]
        );
        // An exact name wins over the longer names it starts.
        assert_eq!(run(&[b"--list"], false).unwrap().0, [('\u{12c}', None)]);
        // list-name and list-names are one option under two names: not ambiguous.
        assert_eq!(run(&[b"--list-n"], false).unwrap().0, [('l', None)]);
    }

    #[test]
    fn a_tool_may_take_the_next_word_itself() {
        let args = argv(&[b"-a", b"5", b"-la", b"6", b"-w", b"-x"]);
        let mut g = Getopt::new(&args, b"alw::x", LONG, false);
        let mut seen = Vec::new();
        while let Some(Ok((c, _))) = g.next() {
            let word = g.take_next_if(|w| !w.starts_with(b"-"));
            seen.push((char::from_u32(c).unwrap_or('?'), word.map(<[u8]>::to_vec)));
        }
        assert_eq!(
            seen,
            [
                ('a', Some(b"5".to_vec())),
                // Inside a cluster there is no next word to take.
                ('l', None),
                ('a', Some(b"6".to_vec())),
                ('w', None),
                ('x', None),
            ]
        );
        assert!(g.operands().is_empty());
    }

    #[test]
    fn mistakes_in_glibc_words() {
        let e = |v: &[&[u8]]| run(v, false).unwrap_err();
        assert_eq!(e(&[b"-z"]), "t: invalid option -- 'z'");
        assert_eq!(e(&[b"-a:"]), "t: invalid option -- ':'");
        assert_eq!(e(&[b"-ad"]), "t: option requires an argument -- 'd'");
        assert_eq!(e(&[b"--nope=1"]), "t: unrecognized option '--nope=1'");
        assert_eq!(
            e(&[b"--lis=3"]),
            "t: option '--lis=3' is ambiguous; possibilities: '--list-name' '--list-full' '--list'"
        );
        assert_eq!(
            e(&[b"--list-full=1"]),
            "t: option '--list-full' doesn't allow an argument"
        );
        assert_eq!(
            e(&[b"--de"]),
            "t: option '--delimiter' requires an argument"
        );
        // Bytes are quoted as given.
        let args = argv(&[b"-\xff"]);
        let err = Getopt::new(&args, b"a", LONG, false)
            .next()
            .unwrap()
            .unwrap_err();
        assert_eq!(err.message("t"), b"t: invalid option -- '\xff'");
    }
}
