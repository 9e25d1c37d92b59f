//! Topology files (YAML), in two forms (see `docs/topology.md`):
//!
//! - the **generator form** names a generator and its parameters:
//!   `generator: kary-ntree`, `k: 4`, `n: 2` (also `pgft` with `m`/`w`/`p`
//!   lists, `ruft` with `k`/`n`, `mesh`/`torus` with `dims`, `hypercube` with
//!   `d`), an optional `name:` and an optional `storage:` list of NIDs whose
//!   hosts become [`HostKind::Storage`] (seed 001 §4.5, Gdmodk);
//! - the **explicit form** lists `switches:`, `hosts:` and `links:`, with an
//!   optional `family:` plus that family's parameters, so that engines with a
//!   closed form still apply. A link is one string, `A:PA -- B:PB` for a
//!   full-duplex cable, `A:PA -> B:PB` for a one-way link from A to B; ports
//!   are 0-based.
//!
//! Every error names the file, the element at fault and, when it can be
//! found, the line. [`Topology::to_yaml`] writes the explicit form, and
//! loading it gives back an identical [`Topology`].

use super::generators::generate;
use super::{
    Family, HostKind, NodeRef, PgftParams, PortNo, PortRef, SwitchParams, Topology, TopologyError,
};
use crate::switch_params::{
    SwitchLatency, MAX_CROSSBAR_SPEEDUP, MAX_SWITCH_LATENCY_FLIT_TIMES, MAX_SWITCH_LATENCY_NS,
};
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// Why a topology file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum TopologyFileError {
    /// The cause is part of the message (not a `source`), so that it is
    /// printed once whether or not the caller walks the error chain.
    #[error("{file}: cannot read: {error}")]
    Io { file: String, error: std::io::Error },
    /// Not YAML, an unknown key, a value of the wrong type.
    #[error("{}: {message}", at(file, *line))]
    Syntax {
        file: String,
        line: Option<usize>,
        message: String,
    },
    /// A file-level problem: a missing or misplaced key, a malformed link.
    #[error("{}: {element}: {message}", at(file, *line))]
    Spec {
        file: String,
        line: Option<usize>,
        element: String,
        message: String,
    },
    /// The described fabric is not a valid topology.
    #[error("{}: {element}: {error}", at(file, *line))]
    Invalid {
        file: String,
        line: Option<usize>,
        element: String,
        error: Box<TopologyError>,
    },
}

impl TopologyFileError {
    /// The 1-based line the error points at, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            TopologyFileError::Io { .. } => None,
            TopologyFileError::Syntax { line, .. }
            | TopologyFileError::Spec { line, .. }
            | TopologyFileError::Invalid { line, .. } => *line,
        }
    }

    /// The model-level error, for [`TopologyFileError::Invalid`].
    pub fn topology_error(&self) -> Option<&TopologyError> {
        match self {
            TopologyFileError::Invalid { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

fn at(file: &str, line: Option<usize>) -> String {
    match line {
        Some(l) => format!("{file}:{l}"),
        None => file.to_string(),
    }
}

/// The whole document; every key of both forms, checked for consistency
/// after parsing so that errors can say which key is misplaced.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    name: Option<String>,
    generator: Option<String>,
    family: Option<String>,
    k: Option<u32>,
    n: Option<u32>,
    m: Option<Vec<u32>>,
    w: Option<Vec<u32>>,
    p: Option<Vec<u32>>,
    dims: Option<Vec<u32>>,
    d: Option<u32>,
    storage: Option<Vec<u32>>,
    switches: Option<Vec<SwitchEntry>>,
    hosts: Option<Vec<HostEntry>>,
    links: Option<Vec<String>>,
    /// A number (`0`) or text (`4ft`, `250ns`): read as text.
    #[serde(rename = "switch-latency")]
    switch_latency: Option<serde_yaml_ng::Value>,
    #[serde(rename = "crossbar-speedup")]
    crossbar_speedup: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchEntry {
    name: String,
    ports: u16,
    level: Option<u32>,
    coords: Option<Vec<u32>>,
    #[serde(default)]
    label: Vec<u32>,
}

fn one_port() -> u16 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostEntry {
    name: String,
    #[serde(default = "one_port")]
    ports: u16,
    #[serde(default)]
    kind: HostKind,
    coords: Option<Vec<u32>>,
    #[serde(default)]
    label: Vec<u32>,
}

/// Upper bound on the ports of an explicit topology, all nodes together.
pub const MAX_TOTAL_PORTS: u64 = 64_000_000;

/// The family keywords of `generator:` and `family:`.
pub const FAMILY_NAMES: [&str; 7] = [
    "kary-ntree",
    "pgft",
    "ruft",
    "mesh",
    "torus",
    "hypercube",
    "custom",
];

/// The parameter keys, and which family uses which.
const PARAM_KEYS: [&str; 7] = ["k", "n", "m", "w", "p", "dims", "d"];

fn params_of(family: &str) -> &'static [&'static str] {
    match family {
        "kary-ntree" | "ruft" => &["k", "n"],
        "pgft" => &["m", "w", "p"],
        "mesh" | "torus" => &["dims"],
        "hypercube" => &["d"],
        _ => &[],
    }
}

/// Context for building errors: the file name and the text (for lines).
struct Source<'a> {
    file: &'a str,
    text: &'a str,
}

impl Source<'_> {
    fn spec(
        &self,
        line: Option<usize>,
        element: impl Into<String>,
        message: impl Into<String>,
    ) -> TopologyFileError {
        TopologyFileError::Spec {
            file: self.file.to_string(),
            line,
            element: element.into(),
            message: message.into(),
        }
    }

    fn invalid(
        &self,
        line: Option<usize>,
        element: impl Into<String>,
        error: TopologyError,
    ) -> TopologyFileError {
        TopologyFileError::Invalid {
            file: self.file.to_string(),
            line,
            element: element.into(),
            error: Box::new(error),
        }
    }

    fn key_line(&self, key: &str) -> Option<usize> {
        key_line(self.text, key)
    }
}

/// 1-based line of a top-level `key:` (at column 0).
fn key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map(|i| i + 1)
}

/// 1-based lines of the items of a top-level block sequence `key:`. Empty
/// when the sequence is written in flow style (`key: [..]`), in which case
/// errors go without a line.
fn item_lines(text: &str, key: &str) -> Vec<usize> {
    let Some(start) = key_line(text, key) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let mut item_indent = None;
    for (i, line) in text.lines().enumerate().skip(start) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        let is_item = trimmed == "-" || trimmed.starts_with("- ");
        match item_indent {
            None if is_item => item_indent = Some(indent),
            None => break,
            Some(ii) if indent < ii || (indent == ii && !is_item) => break,
            Some(_) => {}
        }
        if is_item && Some(indent) == item_indent {
            lines.push(i + 1);
        }
    }
    lines
}

impl Topology {
    /// Reads a topology file (either form); errors name the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Topology, TopologyFileError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = crate::input::read_bounded(path).map_err(|e| match e {
            crate::input::InputError::Io(error) => TopologyFileError::Io {
                file: file.clone(),
                error,
            },
            other => TopologyFileError::Syntax {
                file: file.clone(),
                line: None,
                message: other.to_string(),
            },
        })?;
        Topology::from_yaml_str(&text, &file)
    }

    /// Parses a topology file's text; `origin` names it in errors.
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<Topology, TopologyFileError> {
        let src = Source { file: origin, text };
        crate::input::check_yaml(text).map_err(|e| TopologyFileError::Syntax {
            file: origin.to_string(),
            line: match e {
                crate::input::InputError::TooDeep { line } => Some(line),
                _ => None,
            },
            message: match e {
                crate::input::InputError::TooDeep { .. } => format!(
                    "nested deeper than {} levels: refused",
                    crate::input::MAX_YAML_NESTING
                ),
                other => other.to_string(),
            },
        })?;
        let doc: Document =
            serde_yaml_ng::from_str(text).map_err(|e| TopologyFileError::Syntax {
                file: origin.to_string(),
                line: e.location().map(|l| l.line()),
                message: strip_location(&e.to_string()),
            })?;
        let mut topo = if doc.generator.is_some() {
            from_generator(&src, &doc)?
        } else {
            from_explicit(&src, &doc)?
        };
        topo.switch_params = switch_params(&src, &doc)?;
        if let Err(error) = topo.validate() {
            let (element, line) = locate_validation_error(&src, &topo, &error);
            return Err(src.invalid(line, element, error));
        }
        Ok(topo)
    }

    /// The explicit form of this topology. Loading it gives back a
    /// [`Topology`] equal to `self` (same ids, ports, link order, labels).
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# flitnet topology, explicit form (docs/topology.md)");
        let _ = writeln!(out, "name: {}", yaml_str(&self.name, false));
        write_family(&mut out, &self.family);
        if let Some(latency) = self.switch_params.switch_latency {
            let _ = writeln!(out, "switch-latency: {latency}");
        }
        if let Some(speedup) = self.switch_params.crossbar_speedup {
            let _ = writeln!(out, "crossbar-speedup: {speedup}");
        }
        out.push_str("switches:\n");
        for s in &self.switches {
            let _ = write!(
                out,
                "  - {{name: {}, ports: {}",
                yaml_str(&s.name, true),
                s.ports.len()
            );
            if let Some(level) = s.level {
                let _ = write!(out, ", level: {level}");
            }
            if let Some(c) = &s.coords {
                let _ = write!(out, ", coords: {}", list(c));
            }
            if !s.label.is_empty() {
                let _ = write!(out, ", label: {}", list(&s.label));
            }
            out.push_str("}\n");
        }
        out.push_str("hosts:\n");
        for h in &self.hosts {
            let _ = write!(out, "  - {{name: {}", yaml_str(&h.name, true));
            if h.ports.len() != 1 {
                let _ = write!(out, ", ports: {}", h.ports.len());
            }
            if h.kind == HostKind::Storage {
                out.push_str(", kind: storage");
            }
            if let Some(c) = &h.coords {
                let _ = write!(out, ", coords: {}", list(c));
            }
            if !h.label.is_empty() {
                let _ = write!(out, ", label: {}", list(&h.label));
            }
            out.push_str("}\n");
        }
        out.push_str("links:\n");
        for l in &self.links {
            let arrow = if l.duplex { "--" } else { "->" };
            let text = format!(
                "{}:{} {arrow} {}:{}",
                self.node_name(l.a.node),
                l.a.port,
                self.node_name(l.b.node),
                l.b.port
            );
            let _ = writeln!(out, "  - {}", yaml_str(&text, false));
        }
        out
    }
}

/// serde_yaml_ng appends " at line L column C"; we print the line ourselves.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

fn list(v: &[u32]) -> String {
    let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// A YAML scalar for `s`: plain when that is unambiguous, double-quoted
/// otherwise (a JSON string is a YAML double-quoted scalar). In flow context
/// (`{name: ..}`) spaces, colons and `>` force quotes too.
fn yaml_str(s: &str, flow: bool) -> String {
    let plain_chars = s.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(c, '_' | '-' | '.' | '/')
            || (!flow && matches!(c, ':' | ' ' | '>'))
    });
    let first_ok = s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    let reserved = matches!(
        s.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null"
    );
    let awkward = s.ends_with(' ') || s.ends_with(':') || s.contains(": ") || s.contains(" #");
    if plain_chars && first_ok && !reserved && !awkward {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
    }
}

fn write_family(out: &mut String, family: &Family) {
    match family {
        Family::KaryNTree { k, n } => {
            let _ = writeln!(out, "family: kary-ntree\nk: {k}\nn: {n}");
        }
        Family::Ruft { k, n } => {
            let _ = writeln!(out, "family: ruft\nk: {k}\nn: {n}");
        }
        Family::Pgft(p) => {
            let _ = writeln!(
                out,
                "family: pgft\nm: {}\nw: {}\np: {}",
                list(&p.m),
                list(&p.w),
                list(&p.p)
            );
        }
        Family::Mesh { dims } => {
            let _ = writeln!(out, "family: mesh\ndims: {}", list(dims));
        }
        Family::Torus { dims } => {
            let _ = writeln!(out, "family: torus\ndims: {}", list(dims));
        }
        Family::Hypercube { d } => {
            let _ = writeln!(out, "family: hypercube\nd: {d}");
        }
        Family::Custom => {}
    }
}

/// `switch-latency:` and `crossbar-speedup:`, checked against the bounds
/// the daemons accept (`FabricParams::validate` in the control protocol).
fn switch_params(src: &Source, doc: &Document) -> Result<SwitchParams, TopologyFileError> {
    let switch_latency = match &doc.switch_latency {
        None => None,
        Some(value) => {
            let key = "switch-latency";
            let text = match value {
                serde_yaml_ng::Value::Number(n) => n.to_string(),
                serde_yaml_ng::Value::String(t) => t.clone(),
                _ => String::new(),
            };
            let latency =
                SwitchLatency::parse(&text).map_err(|e| src.spec(src.key_line(key), key, e.0))?;
            let too_long = match latency {
                SwitchLatency::FlitTimes(n) => n > MAX_SWITCH_LATENCY_FLIT_TIMES,
                SwitchLatency::Ns(ns) => ns > MAX_SWITCH_LATENCY_NS,
            };
            if too_long {
                return Err(src.spec(
                    src.key_line(key),
                    key,
                    format!(
                        "{latency} is too long: at most {}ft or {} ms",
                        MAX_SWITCH_LATENCY_FLIT_TIMES,
                        MAX_SWITCH_LATENCY_NS / 1_000_000
                    ),
                ));
            }
            Some(latency)
        }
    };
    let crossbar_speedup = match doc.crossbar_speedup {
        None => None,
        Some(n) if (1..=MAX_CROSSBAR_SPEEDUP as u64).contains(&n) => Some(n as u8),
        Some(n) => {
            let key = "crossbar-speedup";
            return Err(src.spec(
                src.key_line(key),
                key,
                format!(
                    "{n} is out of range: a crossbar speedup is 1..={}",
                    MAX_CROSSBAR_SPEEDUP
                ),
            ));
        }
    };
    Ok(SwitchParams {
        switch_latency,
        crossbar_speedup,
    })
}

/// The family named by `generator:` or `family:` (`key`), with its
/// parameters; rejects missing parameters and parameters of other families.
fn parse_family(
    src: &Source,
    doc: &Document,
    key: &str,
    name: &str,
) -> Result<Family, TopologyFileError> {
    if !FAMILY_NAMES.contains(&name) {
        return Err(src.spec(
            src.key_line(key),
            key,
            format!(
                "unknown family `{name}`; expected one of {}",
                FAMILY_NAMES.join(", ")
            ),
        ));
    }
    let wanted = params_of(name);
    let present = |p: &str| param_present(doc, p);
    for p in PARAM_KEYS {
        if present(p) && !wanted.contains(&p) {
            return Err(src.spec(
                src.key_line(p),
                p,
                format!(
                    "`{p}` is not a parameter of {name} (it takes: {})",
                    list_or_none(wanted)
                ),
            ));
        }
    }
    if let Some(missing) = wanted.iter().find(|p| !present(p)) {
        return Err(src.spec(
            src.key_line(key),
            key,
            format!("{name} needs `{missing}` (it takes: {})", wanted.join(", ")),
        ));
    }
    let v = |x: &Option<Vec<u32>>| x.clone().unwrap_or_default();
    Ok(match name {
        "kary-ntree" => Family::KaryNTree {
            k: doc.k.unwrap_or(0),
            n: doc.n.unwrap_or(0),
        },
        "ruft" => Family::Ruft {
            k: doc.k.unwrap_or(0),
            n: doc.n.unwrap_or(0),
        },
        "pgft" => Family::Pgft(PgftParams {
            m: v(&doc.m),
            w: v(&doc.w),
            p: v(&doc.p),
        }),
        "mesh" => Family::Mesh { dims: v(&doc.dims) },
        "torus" => Family::Torus { dims: v(&doc.dims) },
        "hypercube" => Family::Hypercube {
            d: doc.d.unwrap_or(0),
        },
        _ => Family::Custom,
    })
}

fn param_present(doc: &Document, key: &str) -> bool {
    match key {
        "k" => doc.k.is_some(),
        "n" => doc.n.is_some(),
        "m" => doc.m.is_some(),
        "w" => doc.w.is_some(),
        "p" => doc.p.is_some(),
        "dims" => doc.dims.is_some(),
        "d" => doc.d.is_some(),
        _ => false,
    }
}

fn list_or_none(v: &[&str]) -> String {
    if v.is_empty() {
        "no parameters".to_string()
    } else {
        v.join(", ")
    }
}

fn from_generator(src: &Source, doc: &Document) -> Result<Topology, TopologyFileError> {
    for (key, present) in [
        ("family", doc.family.is_some()),
        ("switches", doc.switches.is_some()),
        ("hosts", doc.hosts.is_some()),
        ("links", doc.links.is_some()),
    ] {
        if present {
            return Err(src.spec(
                src.key_line(key),
                key,
                format!(
                    "`{key}` belongs to the explicit form; a file with `generator:` lists no nodes"
                ),
            ));
        }
    }
    let name = doc.generator.as_deref().unwrap_or_default();
    if name == "custom" {
        return Err(src.spec(
            src.key_line("generator"),
            "generator",
            "`custom` is not a generator; use the explicit form",
        ));
    }
    let family = parse_family(src, doc, "generator", name)?;
    let mut topo = generate(&family).map_err(|error| {
        let line = match &error {
            TopologyError::InvalidParameter { param, .. } => {
                let key: String = param
                    .chars()
                    .take_while(|c| c.is_ascii_alphabetic())
                    .collect();
                src.key_line(&key).or_else(|| src.key_line("generator"))
            }
            _ => src.key_line("generator"),
        };
        src.invalid(line, "generator", error)
    })?;
    if let Some(n) = &doc.name {
        topo.name = n.clone();
    }
    if let Some(storage) = &doc.storage {
        let lines = item_lines(src.text, "storage");
        for (i, &nid) in storage.iter().enumerate() {
            let line = lines.get(i).copied().or_else(|| src.key_line("storage"));
            let Some(host) = topo.hosts.get_mut(nid as usize) else {
                return Err(src.spec(
                    line,
                    format!("storage[{i}]"),
                    format!(
                        "there is no host with NID {nid} (NIDs are 0..{})",
                        topo.hosts.len()
                    ),
                ));
            };
            host.kind = HostKind::Storage;
        }
    }
    Ok(topo)
}

/// Parses one end of a link, `NAME:PORT`.
fn parse_end(text: &str) -> Option<(&str, PortNo)> {
    let (name, port) = text.trim().rsplit_once(':')?;
    Some((name, port.parse().ok()?))
}

/// Why a name cannot be used (it would make link strings ambiguous).
fn bad_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("a name cannot be empty")
    } else if name.trim() != name {
        Some("a name cannot start or end with a space")
    } else if name.chars().any(|c| c.is_control()) {
        Some("a name cannot contain control characters")
    } else if name.contains(" -- ") || name.contains(" -> ") {
        Some("a name cannot contain ` -- ` or ` -> ` (the link separators)")
    } else {
        None
    }
}

fn from_explicit(src: &Source, doc: &Document) -> Result<Topology, TopologyFileError> {
    if doc.storage.is_some() {
        return Err(src.spec(
            src.key_line("storage"),
            "storage",
            "`storage` belongs to the generator form; in the explicit form write `kind: storage` on the host",
        ));
    }
    let Some(hosts) = &doc.hosts else {
        return Err(src.spec(
            None,
            "hosts",
            "a topology file needs either `generator:` or `hosts:` (with `switches:` and `links:`)",
        ));
    };
    let family = match &doc.family {
        Some(name) => parse_family(src, doc, "family", name)?,
        None => {
            if let Some(p) = PARAM_KEYS.iter().find(|p| param_present(doc, p)) {
                return Err(src.spec(
                    src.key_line(p),
                    *p,
                    format!("`{p}` needs a `family:` (or a `generator:`)"),
                ));
            }
            Family::Custom
        }
    };
    // Without `name:`, the file's stem names the fabric.
    let default_name = || {
        Path::new(src.file).file_stem().map_or_else(
            || "unnamed".to_string(),
            |s| s.to_string_lossy().into_owned(),
        )
    };
    let mut topo = Topology::new(doc.name.clone().unwrap_or_else(default_name), family);
    // Every port is stored; bound the total so that a typo cannot exhaust memory.
    let total_ports: u64 = doc
        .switches
        .iter()
        .flatten()
        .map(|s| s.ports as u64)
        .sum::<u64>()
        + hosts.iter().map(|h| h.ports as u64).sum::<u64>();
    if total_ports > MAX_TOTAL_PORTS {
        return Err(src.spec(
            None,
            "switches/hosts",
            format!("{total_ports} ports in all; at most {MAX_TOTAL_PORTS} are supported"),
        ));
    }
    let switch_lines = item_lines(src.text, "switches");
    let host_lines = item_lines(src.text, "hosts");
    let link_lines = item_lines(src.text, "links");
    let mut names: HashMap<&str, NodeRef> = HashMap::new();
    for (i, s) in doc.switches.iter().flatten().enumerate() {
        let line = switch_lines.get(i).copied();
        let element = format!("switches[{i}] `{}`", s.name);
        if let Some(why) = bad_name(&s.name) {
            return Err(src.spec(line, element, why));
        }
        let id = topo.add_switch(s.name.clone(), s.ports as usize);
        if names.insert(&s.name, NodeRef::Switch(id)).is_some() {
            return Err(src.invalid(line, element, TopologyError::DuplicateName(s.name.clone())));
        }
        let sw = &mut topo.switches[id as usize];
        sw.level = s.level;
        sw.coords = s.coords.clone();
        sw.label = s.label.clone();
    }
    for (i, h) in hosts.iter().enumerate() {
        let line = host_lines.get(i).copied();
        let element = format!("hosts[{i}] `{}`", h.name);
        if let Some(why) = bad_name(&h.name) {
            return Err(src.spec(line, element, why));
        }
        let id = topo.add_host(h.name.clone(), h.ports as usize);
        if names.insert(&h.name, NodeRef::Host(id)).is_some() {
            return Err(src.invalid(line, element, TopologyError::DuplicateName(h.name.clone())));
        }
        let host = &mut topo.hosts[id as usize];
        host.kind = h.kind;
        host.coords = h.coords.clone();
        host.label = h.label.clone();
    }
    for (i, text) in doc.links.iter().flatten().enumerate() {
        let line = link_lines.get(i).copied();
        let element = format!("links[{i}] `{text}`");
        let (a, b, duplex) = if let Some((a, b)) = text.split_once(" -- ") {
            (a, b, true)
        } else if let Some((a, b)) = text.split_once(" -> ") {
            (a, b, false)
        } else {
            return Err(src.spec(
                line,
                element,
                "expected `A:PORT -- B:PORT` (full duplex) or `A:PORT -> B:PORT` (one-way)",
            ));
        };
        let mut ends = [PortRef::host(0, 0); 2];
        for (slot, end) in ends.iter_mut().zip([a, b]) {
            let Some((name, port)) = parse_end(end) else {
                return Err(src.spec(
                    line,
                    element,
                    format!(
                        "`{}` is not NODE:PORT (a node name, a colon, a 0-based port number)",
                        end.trim()
                    ),
                ));
            };
            let Some(&node) = names.get(name) else {
                return Err(src.invalid(
                    line,
                    element,
                    TopologyError::UnknownNode(name.to_string()),
                ));
            };
            *slot = PortRef { node, port };
        }
        topo.connect(ends[0], ends[1], duplex)
            .map_err(|error| src.invalid(line, element.clone(), error))?;
    }
    Ok(topo)
}

/// Which element and line a [`Topology::validate`] error is about.
fn locate_validation_error(
    src: &Source,
    topo: &Topology,
    error: &TopologyError,
) -> (String, Option<usize>) {
    let node_line = |name: &str| match topo.find_node(name) {
        Some(NodeRef::Switch(s)) => item_lines(src.text, "switches").get(s as usize).copied(),
        Some(NodeRef::Host(h)) => item_lines(src.text, "hosts").get(h as usize).copied(),
        None => None,
    };
    match error {
        TopologyError::Disconnected { unreachable, .. } => {
            (format!("node `{unreachable}`"), node_line(unreachable))
        }
        TopologyError::DuplicateName(name) => (format!("node `{name}`"), node_line(name)),
        TopologyError::NoHosts => ("hosts".to_string(), src.key_line("hosts")),
        TopologyError::NoReversePath { link, .. } => {
            let i = topo.links.iter().position(|l| topo.link_text(l) == *link);
            (
                format!("link `{link}`"),
                i.and_then(|i| item_lines(src.text, "links").get(i).copied()),
            )
        }
        TopologyError::SelfLoop { node, .. } => (format!("node `{node}`"), node_line(node)),
        _ => ("topology".to_string(), None),
    }
}

#[cfg(test)]
mod tests;
