//! Interactive flame graph: a [`Profile`] as one self-contained SVG file.
//!
//! Stacks are merged into a tree by identical (kind, name, module) prefix under a synthetic
//! `all` root, drawn root at the bottom, each frame as wide as its share of the samples.
//! Frames narrower than 0.1% of the graph are not drawn (their samples still count in their
//! parent's width). A small inline script zooms on a clicked frame, resets the zoom, and
//! searches frame names (`Ctrl-F`), highlighting the matches and showing the share of samples
//! they cover. Colours come from a hash of the name, in a palette chosen by the frame's kind, so
//! the same input always gives the same file.
//!
//! This is our own renderer, written for this crate; it shares only the classic flame graph
//! look with flamegraph.pl and inferno.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};

use crate::model::{FrameKind, Profile};

/// Width of the whole image, in pixels.
const WIDTH: f64 = 1200.0;
/// Left and right margin of the graph.
const PAD: f64 = 10.0;
/// Width of the graph: what 100% of the samples spans.
const GRAPH_WIDTH: f64 = WIDTH - 2.0 * PAD;
/// Height of one frame, gap included.
const FRAME_HEIGHT: f64 = 16.0;
/// Space above the graph for the title, the summary and the buttons.
const TOP: f64 = 60.0;
/// Space below the graph for the hovered frame's details and the search result.
const BOTTOM: f64 = 30.0;
/// Font size of frame labels; the font is monospace, so a label's width is known.
const FONT_SIZE: f64 = 11.0;
/// Width of one character of a frame label (monospace fonts are about 0.6 em wide).
const CHAR_WIDTH: f64 = FONT_SIZE * 0.62;
/// Frames spanning fewer than 1 / `MIN_SHARE` of the samples are not drawn (0.1%).
const MIN_SHARE: u128 = 1000;

/// Writes `profile` to `out` as an interactive flame graph titled `title`.
///
/// Each frame has a tooltip `name (N samples, X.XX%, Y.YY s)` (seconds are left out when
/// `profile.hz` is 0). A profile without samples gives a small SVG saying so.
pub fn write_svg(profile: &Profile, title: &str, out: &mut impl Write) -> io::Result<()> {
    let tree = Node::build(profile);
    let mut frames = Vec::new();
    if tree.total > 0 {
        tree.layout(None, 0, 0, tree.total, &mut frames);
    }
    let max_depth = frames.iter().map(|f| f.depth).max().unwrap_or(0);
    let height = TOP + (max_depth + 1) as f64 * FRAME_HEIGHT + BOTTOM;

    let mut out = BufWriter::new(out);
    write_header(&mut out, profile, tree.total, title, height)?;
    if tree.total == 0 {
        writeln!(
            out,
            r#"<text x="{x}" y="{y:.1}" text-anchor="middle">no samples</text>"#,
            x = WIDTH / 2.0,
            y = TOP + FRAME_HEIGHT,
        )?;
    } else {
        let graph_bottom = TOP + (max_depth + 1) as f64 * FRAME_HEIGHT;
        let mut line = String::new();
        for frame in &frames {
            line.clear();
            frame.write(&mut line, profile.hz, tree.total, graph_bottom);
            out.write_all(line.as_bytes())?;
        }
        writeln!(out, "<script><![CDATA[{SCRIPT}]]></script>")?;
    }
    writeln!(out, "</svg>")?;
    out.flush()
}

/// The document head: style, background, title, summary line, buttons and status lines.
fn write_header(
    out: &mut impl Write,
    profile: &Profile,
    total: u64,
    title: &str,
    height: f64,
) -> io::Result<()> {
    writeln!(
        out,
        r#"<?xml version="1.0" encoding="UTF-8" standalone="no"?>"#
    )?;
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" data-total="{total}" data-pad="{PAD}" data-width="{GRAPH_WIDTH}" data-charw="{CHAR_WIDTH:.3}">"#
    )?;
    writeln!(
        out,
        "<style>\
         text {{ font-family: monospace; font-size: 12px; fill: #000; }}\
         .f {{ cursor: pointer; }}\
         .f text {{ font-size: {FONT_SIZE}px; pointer-events: none; }}\
         .f:hover rect {{ stroke: #000; stroke-width: 0.5; }}\
         .btn {{ cursor: pointer; fill: #2255aa; }}\
         .hidden {{ display: none; }}\
         .up {{ opacity: 0.5; }}\
         </style>"
    )?;
    writeln!(
        out,
        "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#f8f8f4\"/>"
    )?;
    writeln!(
        out,
        r#"<text x="{x}" y="24" text-anchor="middle" style="font-size:17px">{t}</text>"#,
        x = WIDTH / 2.0,
        t = escape(title),
    )?;
    writeln!(
        out,
        r#"<text x="{x}" y="44" text-anchor="middle">{s}</text>"#,
        x = WIDTH / 2.0,
        s = escape(&summary(profile, total)),
    )?;
    writeln!(
        out,
        r#"<text id="reset" class="btn hidden" x="{PAD}" y="24">Reset Zoom</text>"#
    )?;
    writeln!(
        out,
        r#"<text id="search" class="btn" x="{x}" y="24" text-anchor="end">Search</text>"#,
        x = WIDTH - PAD,
    )?;
    writeln!(
        out,
        r#"<text id="details" x="{PAD}" y="{y}"> </text>"#,
        y = height - 10.0
    )?;
    writeln!(
        out,
        r#"<text id="matched" x="{x}" y="{y}" text-anchor="end"> </text>"#,
        x = WIDTH - PAD,
        y = height - 10.0
    )
}

/// `N samples, S s of thread time, T threads on average over D s`, the parts the profile
/// allows.
fn summary(profile: &Profile, total: u64) -> String {
    let mut s = format!("{total} samples");
    if profile.hz > 0 {
        let _ = write!(
            s,
            ", {:.2} s of thread time",
            total as f64 / profile.hz as f64
        );
        if profile.duration_ns > 0 {
            let seconds = profile.duration_ns as f64 / 1e9;
            let threads = total as f64 / (profile.hz as f64 * seconds);
            let _ = write!(s, ", {threads:.2} threads on average over {seconds:.2} s");
        }
    }
    s
}

/// A frame of the merged tree; children keyed (and so ordered) by name, then kind, then
/// module.
#[derive(Default)]
struct Node {
    total: u64,
    children: BTreeMap<(String, FrameKind, Option<String>), Node>,
}

/// One frame to draw.
struct Drawn<'a> {
    /// `None` for the synthetic `all` root.
    kind: Option<FrameKind>,
    name: &'a str,
    /// 0 for the root.
    depth: usize,
    /// Samples left of it, over the whole graph.
    start: u64,
    count: u64,
}

impl Node {
    fn build(profile: &Profile) -> Node {
        let mut root = Node::default();
        for stack in &profile.stacks {
            root.total = root.total.saturating_add(stack.count);
            let mut node = &mut root;
            for f in &stack.frames {
                node = node
                    .children
                    .entry((f.name.clone(), f.kind, f.module.clone()))
                    .or_default();
                node.total = node.total.saturating_add(stack.count);
            }
        }
        root
    }

    /// Appends this node and its descendants wide enough to draw, in pre-order.
    fn layout<'a>(
        &'a self,
        frame: Option<(&'a str, FrameKind)>,
        depth: usize,
        start: u64,
        grand_total: u64,
        out: &mut Vec<Drawn<'a>>,
    ) {
        if u128::from(self.total) * MIN_SHARE < u128::from(grand_total) {
            return;
        }
        out.push(Drawn {
            kind: frame.map(|(_, kind)| kind),
            name: frame.map_or("all", |(name, _)| name),
            depth,
            start,
            count: self.total,
        });
        let mut child_start = start;
        for ((name, kind, _), child) in &self.children {
            child.layout(
                Some((name, *kind)),
                depth + 1,
                child_start,
                grand_total,
                out,
            );
            child_start = child_start.saturating_add(child.total);
        }
    }
}

impl Drawn<'_> {
    /// Writes the frame's group: tooltip, rectangle and label.
    fn write(&self, out: &mut String, hz: u64, total: u64, graph_bottom: f64) {
        let x = PAD + self.start as f64 / total as f64 * GRAPH_WIDTH;
        let w = self.count as f64 / total as f64 * GRAPH_WIDTH;
        let y = graph_bottom - (self.depth + 1) as f64 * FRAME_HEIGHT;
        let (r, g, b) = colour(self.kind, self.name);
        let percent = self.count as f64 * 100.0 / total as f64;
        let _ = write!(
            out,
            r#"<g class="f" data-s="{s}" data-n="{n}" data-d="{d}"><title>{name} ({n} samples, {percent:.2}%"#,
            s = self.start,
            n = self.count,
            d = self.depth,
            name = escape(self.name),
        );
        if hz > 0 {
            let _ = write!(out, ", {:.2} s", self.count as f64 / hz as f64);
        }
        let _ = writeln!(
            out,
            r#")</title><rect x="{x:.2}" y="{y}" width="{w:.2}" height="{h}" rx="2" fill="rgb({r},{g},{b})"/><text x="{tx:.2}" y="{ty}">{label}</text></g>"#,
            h = FRAME_HEIGHT - 1.0,
            tx = x + 3.0,
            ty = y + 11.5,
            label = escape(&fit(self.name, w)),
        );
    }
}

/// The label that fits in a frame `width` pixels wide: the whole name, or its start and `..`,
/// or nothing. The script does the same when zooming.
fn fit(name: &str, width: f64) -> String {
    let room = ((width - 6.0) / CHAR_WIDTH).floor();
    let len = name.chars().count();
    if len as f64 <= room {
        name.to_owned()
    } else if room < 3.0 {
        String::new()
    } else {
        let keep = room as usize - 2;
        let mut s: String = name.chars().take(keep).collect();
        s.push_str("..");
        s
    }
}

/// `s` with XML's special characters escaped and characters XML 1.0 cannot hold replaced by
/// U+FFFD.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A frame's fill: a palette per kind (and per state for state frames), a shade within it
/// from a hash of the name.
fn colour(kind: Option<FrameKind>, name: &str) -> (u8, u8, u8) {
    let h = fnv1a(name);
    // Three independent shades in [0, 1] from three parts of the hash.
    let v = |shift: u32| ((h >> shift) & 0xffff) as f64 / 65535.0;
    let shade =
        |lo: u8, hi: u8, v: f64| (f64::from(lo) + (f64::from(hi) - f64::from(lo)) * v) as u8;
    let grey = |lo, hi| {
        let c = shade(lo, hi, v(0));
        (c, c, c)
    };
    // The (red, green, blue) ranges of each palette.
    let ((r0, r1), (g0, g1), (b0, b1)) = match kind {
        None => return grey(195, 215),
        Some(FrameKind::State) => match name.trim_start_matches('[').trim_end_matches(']') {
            "running" => ((225, 250), (70, 130), (40, 70)),
            "runnable" => ((225, 245), (200, 230), (50, 90)),
            "sleeping" => ((80, 120), (130, 170), (215, 250)),
            "disk" => ((150, 180), (90, 120), (200, 235)),
            _ => return grey(150, 180),
        },
        Some(FrameKind::Thread) => ((70, 140), (175, 220), (70, 120)),
        Some(FrameKind::User) => ((205, 255), (40, 210), (0, 50)),
        Some(FrameKind::Kernel) => ((225, 250), (130, 170), (30, 70)),
    };
    (
        shade(r0, r1, v(32)),
        shade(g0, g1, v(0)),
        shade(b0, b1, v(16)),
    )
}

/// 64-bit FNV-1a: a fixed hash, so colours do not change between runs or Rust versions.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The viewer: click a frame to zoom on it, "Reset Zoom" or Escape to zoom out, "Search" or
/// Ctrl-F to highlight frames whose name matches a regular expression (plain text if it is
/// not one). Frame geometry is in the `data-s` (start), `data-n` (samples) and `data-d`
/// (depth) attributes; a frame's name is its tooltip up to the last " (".
const SCRIPT: &str = r#"
"use strict";
(function () {
  var svg = document.documentElement;
  var total = Number(svg.getAttribute("data-total"));
  var PAD = Number(svg.getAttribute("data-pad"));
  var W = Number(svg.getAttribute("data-width"));
  var CHAR_W = Number(svg.getAttribute("data-charw"));
  var frames = Array.prototype.slice.call(document.getElementsByClassName("f"));
  var resetBtn = document.getElementById("reset");
  var searchBtn = document.getElementById("search");
  var details = document.getElementById("details");
  var matched = document.getElementById("matched");
  var MATCH_FILL = "rgb(230,0,230)";
  var query = "";

  function num(g, attr) { return Number(g.getAttribute(attr)); }
  function part(g, tag) { return g.getElementsByTagName(tag)[0]; }
  function nameOf(g) {
    var t = part(g, "title").textContent;
    return t.slice(0, t.lastIndexOf(" ("));
  }
  function fit(name, w) {
    var chars = Array.from(name), room = Math.floor((w - 6) / CHAR_W);
    if (chars.length <= room) return name;
    return room < 3 ? "" : chars.slice(0, room - 2).join("") + "..";
  }
  function place(g, x, w) {
    part(g, "rect").setAttribute("x", x.toFixed(2));
    part(g, "rect").setAttribute("width", w.toFixed(2));
    part(g, "text").setAttribute("x", (x + 3).toFixed(2));
    part(g, "text").textContent = fit(nameOf(g), w);
  }

  // Spreads the frames of samples [s, s + n) from depth d up over the full width, stretches
  // and dims their callers, hides everything else.
  function zoom(s, n, d) {
    frames.forEach(function (g) {
      var fs = num(g, "data-s"), fn = num(g, "data-n"), fd = num(g, "data-d");
      var inside = fd >= d && fs >= s && fs + fn <= s + n;
      var caller = fd < d && fs <= s && fs + fn >= s + n;
      g.classList.toggle("hidden", !inside && !caller);
      g.classList.toggle("up", caller);
      if (inside) place(g, PAD + (fs - s) / n * W, fn / n * W);
      if (caller) place(g, PAD, W);
    });
    resetBtn.classList.toggle("hidden", d === 0);
  }
  function reset() { zoom(0, total, 0); }

  function search(q) {
    query = q;
    var re = null;
    try { re = new RegExp(q); } catch (e) { re = null; }
    var hits = [];
    frames.forEach(function (g) {
      var rect = part(g, "rect"), name = nameOf(g);
      var hit = q !== "" && (re ? re.test(name) : name.indexOf(q) >= 0);
      if (!rect.hasAttribute("data-fill")) rect.setAttribute("data-fill", rect.getAttribute("fill"));
      rect.setAttribute("fill", hit ? MATCH_FILL : rect.getAttribute("data-fill"));
      if (hit) hits.push([num(g, "data-s"), num(g, "data-n")]);
    });
    // Frames nest or are disjoint: count a sample once by skipping hits inside an earlier one.
    hits.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
    var covered = 0, end = 0;
    hits.forEach(function (h) {
      if (h[0] >= end) { covered += h[1]; end = h[0] + h[1]; }
    });
    matched.textContent = q === "" ? " " : "Matched: " + (100 * covered / total).toFixed(2) + "%";
    searchBtn.textContent = q === "" ? "Search" : "Reset Search";
  }
  function ask() {
    var q = window.prompt("Search frames (regular expression):", query);
    if (q !== null) search(q);
  }

  frames.forEach(function (g) {
    g.addEventListener("click", function () { zoom(num(g, "data-s"), num(g, "data-n"), num(g, "data-d")); });
    g.addEventListener("mouseover", function () { details.textContent = part(g, "title").textContent; });
    g.addEventListener("mouseout", function () { details.textContent = " "; });
  });
  resetBtn.addEventListener("click", reset);
  searchBtn.addEventListener("click", function () { if (query === "") ask(); else search(""); });
  document.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && (e.key === "f" || e.key === "F")) {
      e.preventDefault();
      ask();
    } else if (e.key === "Escape") {
      search("");
      reset();
    }
  });
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, Stack};

    fn frame(kind: FrameKind, name: &str) -> Frame {
        Frame {
            kind,
            name: name.to_owned(),
            module: None,
        }
    }

    fn stack(names: &[(FrameKind, &str)], count: u64) -> Stack {
        Stack {
            frames: names.iter().map(|&(k, n)| frame(k, n)).collect(),
            count,
        }
    }

    /// `[running]` → `t` → `big` (3 samples) and `small` (1), at 100 Hz over 1 s.
    fn split_profile() -> Profile {
        use FrameKind::*;
        Profile {
            stacks: vec![
                stack(&[(State, "[running]"), (Thread, "t"), (User, "big")], 3),
                stack(&[(State, "[running]"), (Thread, "t"), (User, "small")], 1),
            ],
            states: Vec::new(),
            hz: 100,
            duration_ns: 1_000_000_000,
        }
    }

    fn render(profile: &Profile, title: &str) -> String {
        let mut out = Vec::new();
        write_svg(profile, title, &mut out).expect("write_svg");
        String::from_utf8(out).expect("UTF-8")
    }

    /// The `<g>` of the frame whose tooltip starts with `name (`.
    fn group<'a>(svg: &'a str, name: &str) -> &'a str {
        let at = svg
            .find(&format!("<title>{name} ("))
            .unwrap_or_else(|| panic!("no frame {name}"));
        let start = svg[..at].rfind("<g ").expect("group start");
        let end = at + svg[at..].find("</g>").expect("group end");
        &svg[start..end]
    }

    /// The value of attribute `attr` of the first element `tag` in `text`.
    fn attr<'a>(text: &'a str, tag: &str, attr: &str) -> &'a str {
        let el = &text[text.find(&format!("<{tag} ")).expect("element")..];
        let from = el.find(&format!(" {attr}=\"")).expect("attribute") + attr.len() + 3;
        &el[from..from + el[from..].find('"').expect("closing quote")]
    }

    fn width(svg: &str, name: &str) -> f64 {
        attr(group(svg, name), "rect", "width")
            .parse()
            .expect("width")
    }

    /// A small well-formedness check: one root element, balanced and properly nested tags,
    /// quoted attributes, no stray `<` and only known entity references.
    fn check_xml(doc: &str) -> Result<(), String> {
        fn check_text(t: &str) -> Result<(), String> {
            if t.contains('<') {
                return Err(format!("stray < in {t:?}"));
            }
            let mut rest = t;
            while let Some(i) = rest.find('&') {
                let after = &rest[i + 1..];
                let end = after.find(';').ok_or(format!("unterminated & in {t:?}"))?;
                let entity = &after[..end];
                let numeric = entity
                    .strip_prefix("#x")
                    .map(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
                    .or_else(|| {
                        entity
                            .strip_prefix('#')
                            .map(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
                    })
                    .unwrap_or(false);
                if !numeric && !["amp", "lt", "gt", "quot", "apos"].contains(&entity) {
                    return Err(format!("bad entity &{entity}; in {t:?}"));
                }
                rest = &after[end + 1..];
            }
            Ok(())
        }
        fn is_name(s: &str) -> bool {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        }

        let mut rest = doc
            .strip_prefix("<?xml ")
            .and_then(|r| r.split_once("?>"))
            .ok_or("no XML declaration")?
            .1;
        let mut open: Vec<&str> = Vec::new();
        let mut roots = 0;
        while !rest.is_empty() {
            let Some(lt) = rest.find('<') else {
                check_text(rest)?;
                if open.is_empty() && !rest.trim().is_empty() {
                    return Err("text after the root".into());
                }
                break;
            };
            let text = &rest[..lt];
            check_text(text)?;
            if open.is_empty() && !text.trim().is_empty() {
                return Err(format!("text outside the root: {text:?}"));
            }
            rest = &rest[lt..];
            if let Some(r) = rest.strip_prefix("<!--") {
                rest = r.split_once("-->").ok_or("unterminated comment")?.1;
            } else if let Some(r) = rest.strip_prefix("<![CDATA[") {
                if open.is_empty() {
                    return Err("CDATA outside the root".into());
                }
                rest = r.split_once("]]>").ok_or("unterminated CDATA")?.1;
            } else if let Some(r) = rest.strip_prefix("</") {
                let (name, r) = r.split_once('>').ok_or("unterminated end tag")?;
                match open.pop() {
                    Some(o) if o == name.trim_end() => {}
                    o => return Err(format!("</{name}> closes {o:?}")),
                }
                rest = r;
            } else {
                let r = &rest[1..];
                let name_end = r
                    .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
                    .ok_or("unterminated tag")?;
                let name = &r[..name_end];
                if !is_name(name) {
                    return Err(format!("bad tag name {name:?}"));
                }
                if open.is_empty() {
                    roots += 1;
                }
                let mut r = r[name_end..].trim_start();
                let mut seen = Vec::new();
                loop {
                    if let Some(after) = r.strip_prefix("/>") {
                        r = after;
                        break;
                    }
                    if let Some(after) = r.strip_prefix('>') {
                        open.push(name);
                        r = after;
                        break;
                    }
                    let (key, after) = r
                        .split_once('=')
                        .ok_or(format!("bad attribute in <{name}"))?;
                    let key = key.trim();
                    if !is_name(key) || seen.contains(&key) {
                        return Err(format!("bad or repeated attribute {key:?} in <{name}"));
                    }
                    seen.push(key);
                    let quote = after.chars().next().ok_or("unterminated tag")?;
                    if quote != '"' && quote != '\'' {
                        return Err(format!("unquoted attribute {key} in <{name}"));
                    }
                    let (value, after) = after[1..]
                        .split_once(quote)
                        .ok_or("unterminated attribute")?;
                    check_text(value)?;
                    if !after.starts_with(|c: char| c.is_whitespace() || c == '>' || c == '/') {
                        return Err(format!("no space after attribute {key} in <{name}"));
                    }
                    r = after.trim_start();
                }
                rest = r;
            }
        }
        if let Some(o) = open.last() {
            return Err(format!("<{o}> never closed"));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(())
    }

    #[test]
    fn checker_catches_bad_xml() {
        let head = r#"<?xml version="1.0"?>"#;
        assert!(check_xml(&format!("{head}<a><b/></a>")).is_ok());
        for bad in [
            "<a><b></a>",
            "<a>x < y</a>",
            "<a>&b;</a>",
            "<a t=\"<\"/>",
            "<a t=x/>",
            "<a/><b/>",
            "<a>",
        ] {
            assert!(check_xml(&format!("{head}{bad}")).is_err(), "{bad}");
        }
    }

    #[test]
    fn well_formed() {
        use FrameKind::*;
        let mut profile = split_profile();
        profile.stacks.push(stack(
            &[
                (State, "[disk]"),
                (Thread, "<a&b>"),
                (User, "ünï\"cödé' ✓ ]]> \u{1}"),
            ],
            2,
        ));
        for svg in [
            render(&profile, "a <title> & more"),
            render(&Profile::default(), "empty"),
        ] {
            check_xml(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        }
    }

    #[test]
    fn widths_are_proportional() {
        let svg = render(&split_profile(), "t");
        let (big, small) = (width(&svg, "big"), width(&svg, "small"));
        assert!((big - 3.0 * small).abs() < 0.02, "{big} vs {small}");
        assert!((big + small - GRAPH_WIDTH).abs() < 0.02);
        assert!((width(&svg, "all") - GRAPH_WIDTH).abs() < 0.01);
        // `small` starts where `big` ends: children are laid out in name order.
        let x = |name| {
            attr(group(&svg, name), "rect", "x")
                .parse::<f64>()
                .expect("x")
        };
        assert!((x("small") - (x("big") + big)).abs() < 0.02);
        // Root at the bottom: deeper frames are higher up.
        let y = |name| {
            attr(group(&svg, name), "rect", "y")
                .parse::<f64>()
                .expect("y")
        };
        assert!(y("all") > y("[running]") && y("[running]") > y("t") && y("t") > y("big"));
    }

    #[test]
    fn tooltips_and_header() {
        let svg = render(&split_profile(), "my title");
        assert!(svg.contains("<title>big (3 samples, 75.00%, 0.03 s)</title>"));
        assert!(svg.contains("<title>all (4 samples, 100.00%, 0.04 s)</title>"));
        assert!(svg.contains(">my title</text>"));
        assert!(
            svg.contains("4 samples, 0.04 s of thread time, 0.04 threads on average over 1.00 s")
        );
        assert!(svg.contains("<script><![CDATA["));

        let mut no_hz = split_profile();
        no_hz.hz = 0;
        assert!(render(&no_hz, "t").contains("<title>big (3 samples, 75.00%)</title>"));
    }

    #[test]
    fn escaping() {
        use FrameKind::*;
        let profile = Profile {
            stacks: vec![stack(&[(Thread, "<a&b>"), (User, "\"q'é→")], 1)],
            hz: 1,
            ..Profile::default()
        };
        let svg = render(&profile, "<a&b>");
        assert!(svg.contains("<title>&lt;a&amp;b&gt; (1 samples"));
        assert!(svg.contains(">&lt;a&amp;b&gt;</text>"));
        assert!(svg.contains("<title>&quot;q&apos;é→ (1 samples"));
        assert!(!svg.contains("<a&b>"));
        assert_eq!(escape("a\u{0}b\tc"), "a\u{fffd}b\tc");
    }

    #[test]
    fn narrow_frames_are_dropped_but_counted() {
        use FrameKind::*;
        let profile = Profile {
            stacks: vec![
                stack(&[(Thread, "t"), (User, "wide")], 1999),
                stack(&[(Thread, "t"), (User, "narrow")], 1),
            ],
            hz: 100,
            ..Profile::default()
        };
        let svg = render(&profile, "t");
        assert!(!svg.contains("narrow"));
        assert!(svg.contains("<title>t (2000 samples, 100.00%"));
        assert!(svg.contains("<title>wide (1999 samples, 99.95%"));
    }

    #[test]
    fn labels_are_truncated() {
        assert_eq!(fit("main", 100.0), "main");
        // Room for (40 - 6) / 6.82 = 4 characters.
        assert_eq!(fit("worker_loop", 40.0), "wo..");
        assert_eq!(fit("ééééééé", 40.0), "éé..");
        assert_eq!(fit("worker_loop", 20.0), "");

        use FrameKind::*;
        let long = "a_rather_long_function_name_that_cannot_fit";
        let profile = Profile {
            stacks: vec![stack(&[(User, long)], 10), stack(&[(User, "other")], 90)],
            hz: 1,
            ..Profile::default()
        };
        let svg = render(&profile, "t");
        let label = &group(&svg, long)[group(&svg, long).find("<text").expect("text")..];
        // 118 px: room for 16 characters.
        assert!(label.contains(">a_rather_long_..</text>"), "{label}");
    }

    #[test]
    fn empty_profile() {
        let svg = render(&Profile::default(), "nothing");
        assert!(svg.contains(">no samples</text>"));
        assert!(!svg.contains("class=\"f\""));
        check_xml(&svg).expect("well-formed");
    }

    #[test]
    fn deterministic() {
        let profile = split_profile();
        assert_eq!(render(&profile, "t"), render(&profile, "t"));
        // Stack order does not matter: children are sorted by name.
        let mut reversed = profile.clone();
        reversed.stacks.reverse();
        assert_eq!(render(&profile, "t"), render(&reversed, "t"));
    }

    #[test]
    fn colours() {
        use FrameKind::*;
        assert_eq!(colour(Some(User), "f"), colour(Some(User), "f"));
        let (r, g, b) = colour(Some(State), "[sleeping]");
        assert!(b > r && b > g, "sleeping is blue");
        let (r, g, b) = colour(Some(State), "[running]");
        assert!(r > g && r > b, "running is red");
        let (r, g, b) = colour(Some(Thread), "t");
        assert!(g > r && g > b, "threads are green");
        let (r, g, b) = colour(Some(State), "[zombie]");
        assert!(r == g && g == b, "other states are grey");
    }
}
